#!/usr/bin/env python3
"""Write the GGUF files omnivoice.cpp's convert.py writes, from a checkpoint in the Hugging Face layout.

    python3 tools/omnivoice_cpp_layout.py CHECKPOINT_DIR -o OUT_DIR
        -> OUT_DIR/omnivoice-base-F32.gguf, OUT_DIR/omnivoice-tokenizer-F32.gguf   (their layout)

A test fixture: it lets the tests load files in omnivoice.cpp's layout (GitHub ServeurpersoCom/omnivoice.cpp,
MIT, HEAD 4f33af8) without its C++ or its Python environment. Re-created from their convert.py (and
docs/../shared/spec/INTEROP.md), not copied; what it reproduces:

* gguf-py's GGUFWriter, default alignment (32, no general.alignment key), no general.file_type; keys in the
  order their script adds them, the standard LM keys through the writer's add_* helpers (so under
  ``omnivoice-lm.``), integer arrays as INT32 (gguf-py's type for Python ints), the codebook weights an INT32
  array, the tokenizer as ``tokenizer.ggml.model`` "gpt2" + tokens (holes as "") + merges only.
* Tensors in sorted name order, every one in the checkpoint's own dtype (F32 here); dropped: the LM's
  ``codebook_layer_offsets``, the codec's ``decoder_semantic.*``, ``fc1.*``, the RVQ EMA buffers and the weight
  norm parametrizations, whose folded HuBERT positional conv weight (folded in float32) comes last.
* ConvTranspose1d weights raw, torch [IC, OC, K] (ggml ne (K, OC, IC)).

Their quantized files are these run through their tools/quantize.cpp; ``python -m omnivoice.quantize`` re-creates
that tool (same policy, same ggml quantization functions), so the tests make their Q8_0/K-quant files with it.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path
from typing import Callable, Optional

import gguf
import numpy as np

BASE_NAME = "omnivoice-base-F32.gguf"
CODEC_NAME = "omnivoice-tokenizer-F32.gguf"
SPECIALS = ("<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>",
            "<|text_start|>", "<|text_end|>")
POS_CONV = "semantic_model.encoder.pos_conv_embed.conv"
# a test's damage: (tensor name, torch-order values) -> values to store instead, or None to leave the tensor out
Edit = Optional[Callable[[str, np.ndarray], Optional[np.ndarray]]]


class _Writer(gguf.GGUFWriter):
    """gguf-py's writer with a test's damage applied: tensors edited or left out, keys left out."""

    def __init__(self, path: Path, arch: str, edit: Edit = None, drop: tuple[str, ...] = ()) -> None:
        self.edit, self.drop = edit, set(drop)  # before the base class adds general.architecture
        super().__init__(path, arch)

    def add_key_value(self, key, val, vtype, sub_type=None) -> None:
        if key not in self.drop:
            super().add_key_value(key, val, vtype, sub_type=sub_type)

    def add_tensor(self, name, tensor, *args, **kwargs) -> None:
        if self.edit is not None:
            tensor = self.edit(name, tensor)
        if tensor is not None:
            super().add_tensor(name, tensor, *args, **kwargs)


def _safetensors(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))
    meta.pop("__metadata__", None)
    return meta, 8 + n


def _tensor(path: Path, hdr: int, info: dict) -> np.ndarray:
    start, stop = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(hdr + start)
        raw = f.read(stop - start)
    if info["dtype"] != "F32":
        raise ValueError(f"{path}: this fixture writer handles F32 checkpoints only ({info['dtype']})")
    return np.frombuffer(raw, np.float32).reshape(info["shape"]).copy()


def _tokenizer(w: gguf.GGUFWriter, tok: dict) -> None:
    vocab, added = tok["model"]["vocab"], tok.get("added_tokens", [])
    top = max(max(vocab.values(), default=-1), max((a["id"] for a in added), default=-1))
    tokens = [""] * (top + 1)
    for text, i in vocab.items():
        tokens[i] = text
    for a in added:
        tokens[a["id"]] = a["content"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_base(ckpt: Path, out: Path, edit: Edit = None, drop: tuple[str, ...] = ()) -> Path:
    """omnivoice.cpp's omnivoice-base-F32.gguf of the checkpoint at `ckpt` (`edit`, `drop`: a test's damage)."""
    cfg = json.loads((ckpt / "config.json").read_text())
    llm = cfg["llm_config"]
    tok = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    w = _Writer(out, "omnivoice-lm", edit, drop)
    w.add_name("OmniVoice")
    w.add_block_count(llm["num_hidden_layers"])
    w.add_embedding_length(llm["hidden_size"])
    w.add_feed_forward_length(llm["intermediate_size"])
    w.add_head_count(llm["num_attention_heads"])
    w.add_head_count_kv(llm["num_key_value_heads"])
    w.add_key_length(llm["head_dim"])
    w.add_value_length(llm["head_dim"])
    w.add_vocab_size(llm["vocab_size"])
    w.add_context_length(llm["max_position_embeddings"])
    w.add_layer_norm_rms_eps(llm["rms_norm_eps"])
    w.add_rope_freq_base(float(llm["rope_parameters"]["rope_theta"]))
    w.add_bool("omnivoice.tie_word_embeddings", bool(llm.get("tie_word_embeddings", False)))
    w.add_uint32("omnivoice.num_audio_codebook", cfg["num_audio_codebook"])
    w.add_uint32("omnivoice.audio_vocab_size", cfg["audio_vocab_size"])
    w.add_uint32("omnivoice.audio_mask_id", cfg["audio_mask_id"])
    w.add_array("omnivoice.audio_codebook_weights", [int(x) for x in cfg["audio_codebook_weights"]])
    ids = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    for text in SPECIALS:
        if text in ids:
            w.add_uint32("omnivoice.special." + text.strip("<|>"), ids[text])
    _tokenizer(w, tok)
    path = ckpt / "model.safetensors"
    meta, hdr = _safetensors(path)
    for name in sorted(meta):
        if name != "codebook_layer_offsets":
            w.add_tensor(name, _tensor(path, hdr, meta[name]))
    _finish(w)
    return out


def _dropped(name: str) -> bool:
    return (name.startswith(("decoder_semantic.", "fc1.")) or "parametrizations.weight.original" in name
            or ("quantizer.quantizers." in name and name.endswith((".cluster_size", ".embed_avg", ".inited"))))


def write_codec(ckpt: Path, out: Path, edit: Edit = None, drop: tuple[str, ...] = ()) -> Path:
    """omnivoice.cpp's omnivoice-tokenizer-F32.gguf of the checkpoint at `ckpt` (`edit`, `drop`: a test's damage)."""
    cfg = json.loads((ckpt / "audio_tokenizer" / "config.json").read_text())
    ac, sm = cfg["acoustic_model_config"], cfg["semantic_model_config"]
    w = _Writer(out, "omnivoice-tokenizer", edit, drop)
    w.add_name("OmniVoice-tokenizer")
    for key in ("sample_rate", "semantic_sample_rate", "downsample_factor", "codebook_size", "codebook_dim"):
        w.add_uint32(f"omnivoice.{key}", cfg[key])
    for key in ("encoder_hidden_size", "decoder_hidden_size", "hidden_size", "n_codebooks", "hop_length"):
        w.add_uint32(f"omnivoice.acoustic.{key}", ac[key])
    for key in ("upsampling_ratios", "downsampling_ratios"):
        w.add_array(f"omnivoice.acoustic.{key}", [int(x) for x in ac[key]])
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                "num_feat_extract_layers"):
        w.add_uint32(f"omnivoice.semantic.{key}", sm[key])
    for key in ("conv_dim", "conv_kernel", "conv_stride"):
        w.add_array(f"omnivoice.semantic.{key}", [int(x) for x in sm[key]])
    for key in ("num_conv_pos_embeddings", "num_conv_pos_embedding_groups"):
        w.add_uint32(f"omnivoice.semantic.{key}", sm[key])
    w.add_float32("omnivoice.semantic.layer_norm_eps", float(sm["layer_norm_eps"]))
    path = ckpt / "audio_tokenizer" / "model.safetensors"
    meta, hdr = _safetensors(path)
    g = _tensor(path, hdr, meta[POS_CONV + ".parametrizations.weight.original0"])
    v = _tensor(path, hdr, meta[POS_CONV + ".parametrizations.weight.original1"])
    folded = v * g / np.sqrt(np.sum(v * v, axis=(0, 1), keepdims=True))   # float32 arithmetic, as theirs
    for name in sorted(meta):
        if not _dropped(name):
            w.add_tensor(name, _tensor(path, hdr, meta[name]))
    w.add_tensor(POS_CONV + ".weight", folded.astype(np.float32, copy=False))
    _finish(w)
    return out


def write_files(ckpt: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """Both files into `out_dir`; returns (base, codec) paths."""
    ckpt, out_dir = Path(ckpt), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_base(ckpt, out_dir / BASE_NAME), write_codec(ckpt, out_dir / CODEC_NAME)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="checkpoint directory in the Hugging Face layout (F32)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    args = ap.parse_args(argv)
    for p in write_files(args.checkpoint, args.out):
        print(p, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
