"""Locate and open a Hugging Face OmniVoice checkpoint directory (configs, tokenizer files, tensors)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CheckpointError
from .safetensors_reader import SafetensorsFile

# (path, what it is) -- the weights may also come as model.safetensors.index.json + shards
REQUIRED = [
    ("config.json", "OmniVoice config"),
    ("tokenizer.json", "text tokenizer"),
    ("tokenizer_config.json", "text tokenizer config"),
    ("audio_tokenizer/config.json", "audio tokenizer config"),
    ("audio_tokenizer/model.safetensors", "audio tokenizer weights"),
]


class TensorSet:
    """Tensors of one model, possibly spread over several safetensors shards."""

    def __init__(self, files: list[SafetensorsFile]):
        self.files = files
        self._where: dict[str, SafetensorsFile] = {}
        for f in files:
            for name in f.names():
                if name in self._where:
                    raise CheckpointError(f"tensor {name!r} appears in both {self._where[name].path} and {f.path}")
                self._where[name] = f

    def names(self) -> list[str]:
        """All tensor names."""
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> SafetensorsFile:
        """The shard holding ``name``."""
        try:
            return self._where[name]
        except KeyError:
            paths = ", ".join(str(f.path) for f in self.files)
            raise CheckpointError(f"{paths}: no tensor named {name!r}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        """Torch-order shape of ``name``."""
        return self.file_of(name).shape(name)

    def get(self, name: str) -> np.ndarray:
        """Values of ``name`` (floating types as float32)."""
        return self.file_of(name).get(name)


@dataclass
class Checkpoint:
    """Everything the converter reads from a checkpoint directory."""

    root: Path
    config: dict
    codec_config: dict
    preprocessor_config: dict | None
    tokenizer_json: dict
    tokenizer_config: dict
    lm: TensorSet
    codec: TensorSet


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot parse JSON ({e})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return obj


def _lm_weights(root: Path) -> TensorSet:
    single, index = root / "model.safetensors", root / "model.safetensors.index.json"
    if single.is_file():
        return TensorSet([SafetensorsFile(single)])
    idx = _read_json(index)
    shards = sorted(set((idx.get("weight_map") or {}).values()))
    if not shards:
        raise CheckpointError(f"{index}: weight_map is empty")
    missing = [s for s in shards if not (root / s).is_file()]
    if missing:
        raise CheckpointError(f"{index}: shard(s) missing: {', '.join(missing)}")
    return TensorSet([SafetensorsFile(root / s) for s in shards])


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Open ``path`` as an OmniVoice checkpoint, or raise CheckpointError listing everything missing."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a directory")
    missing = [f"{rel} ({what})" for rel, what in REQUIRED if not (root / rel).is_file()]
    if not (root / "model.safetensors").is_file() and not (root / "model.safetensors.index.json").is_file():
        missing.insert(1, "model.safetensors (LM weights)")
    if missing:
        raise CheckpointError(f"{root} is not an OmniVoice checkpoint; missing: {'; '.join(missing)}")
    config = _read_json(root / "config.json")
    if config.get("model_type") != "omnivoice":
        raise CheckpointError(
            f"{root / 'config.json'}: model_type is {config.get('model_type')!r}, expected 'omnivoice'")
    llm = config.get("llm_config")
    if not isinstance(llm, dict) or llm.get("model_type") != "qwen3":
        got = llm.get("model_type") if isinstance(llm, dict) else llm
        raise CheckpointError(f"{root / 'config.json'}: llm_config.model_type is {got!r}, expected 'qwen3'")
    codec_config = _read_json(root / "audio_tokenizer" / "config.json")
    if codec_config.get("model_type") != "higgs_audio_v2_tokenizer":
        raise CheckpointError(f"{root / 'audio_tokenizer' / 'config.json'}: model_type is "
                              f"{codec_config.get('model_type')!r}, expected 'higgs_audio_v2_tokenizer'")
    pre = root / "audio_tokenizer" / "preprocessor_config.json"
    return Checkpoint(
        root=root,
        config=config,
        codec_config=codec_config,
        preprocessor_config=_read_json(pre) if pre.is_file() else None,
        tokenizer_json=_read_json(root / "tokenizer.json"),
        tokenizer_config=_read_json(root / "tokenizer_config.json"),
        lm=_lm_weights(root),
        codec=TensorSet([SafetensorsFile(root / "audio_tokenizer" / "model.safetensors")]),
    )


def require(cfg: dict, key: str, where: str, kind: type | tuple = (int,)):
    """``cfg[key]``, type-checked, or a CheckpointError naming the file and field."""
    if key not in cfg or cfg[key] is None:
        raise CheckpointError(f"{where}: field {key!r} is missing")
    val = cfg[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(val, bool) and bool not in kinds:
        raise CheckpointError(f"{where}: field {key!r} is {val!r}, expected {'/'.join(k.__name__ for k in kinds)}")
    if not isinstance(val, kinds):
        raise CheckpointError(f"{where}: field {key!r} is {val!r}, expected {'/'.join(k.__name__ for k in kinds)}")
    return val
