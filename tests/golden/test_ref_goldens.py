"""The reference goldens (ref_*.npz) are internally consistent and match today's tiny checkpoint.

They are produced by tools/reference/goldens.py pipeline; the tests here catch a stale or damaged golden before
another area's parity test draws wrong conclusions from it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MASK = 1024
GEN_CASES = ("auto", "design", "clone", "long")


def _load(name: str):
    d = np.load(HERE / f"ref_{name}.npz")
    return d, json.loads(str(d["meta_json"]))


def _tree_hash(root: Path) -> str:
    """sha256 over 'relative/path:sha256(content)' lines, as tools/reference/run_reference.py keys its cache."""
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file() and not q.name.startswith(".")):
        h.update(f"{p.relative_to(root).as_posix()}:{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def tiny_checkpoint_hash(tmp_path_factory) -> str:
    spec = importlib.util.spec_from_file_location("make_checkpoint", REPO / "tools" / "make_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_checkpoint"] = mod  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(mod)
    return _tree_hash(mod.make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", "tiny", 0))


@pytest.mark.parametrize("case", GEN_CASES)
def test_golden_matches_current_tiny_checkpoint(case, tiny_checkpoint_hash):
    _, meta = _load(case)
    assert meta["checkpoint_sha256"] == tiny_checkpoint_hash, (
        f"ref_{case}.npz was made from another tiny checkpoint; rerun python3 tools/reference/goldens.py pipeline")
    assert meta["settings"]["class_temperature"] == 0.0 and meta["settings"]["position_temperature"] == 0.0


@pytest.mark.parametrize("case", GEN_CASES)
def test_calls_are_consistent(case):
    d, meta = _load(case)
    calls = meta["calls"]
    assert len(calls) == (4 if case == "long" else 1)
    for k, c in enumerate(calls):
        T, L, S = c["target_len"], c["cond_len"], meta["settings"]["num_step"]
        cond, mask = d[f"call{k}_cond_ids"], d[f"call{k}_cond_audio_mask"]
        tokens, steps, sched = d[f"call{k}_tokens"], d[f"call{k}_unmask_step"], d[f"call{k}_schedule"]
        assert cond.shape == (8, L) and mask.shape == (L,) and tokens.shape == (8, T)
        # step 0: all-MASK target window; the text prompt is the same id on every codebook row
        assert np.all(cond[:, L - T:] == MASK) and np.all(d[f"call{k}_uncond_ids"] == MASK)
        n_text = int(np.argmax(mask))
        assert np.all(mask[n_text:]) and not np.any(mask[:n_text])
        assert np.all(cond[:, :n_text] == cond[0, :n_text])
        assert (L - T - n_text) == (c["ref_len"] or 0)
        # the schedule fills all 8T positions, one step each, as unmask_step says
        assert sched.shape == (S,) and sched.sum() == 8 * T
        assert np.array_equal(np.bincount(steps.ravel(), minlength=S), sched)
        assert tokens.min() >= 0 and tokens.max() < MASK
        if k >= 1:  # chunks after the first use chunk 0's tokens as their voice prompt
            assert np.array_equal(cond[:, n_text:L - T], d["call0_tokens"])


@pytest.mark.parametrize("case", GEN_CASES)
def test_logit_summaries_agree_with_full_rows(case):
    d, meta = _load(case)
    for k in range(len(meta["calls"])):
        for side in ("cond", "uncond"):
            p = f"call{k}_logits_{side}"
            idx, val, lse = d[f"{p}_top_idx"], d[f"{p}_top_val"], d[f"{p}_lse"]
            assert np.all(np.diff(val, axis=-1) <= 0) and np.all(val[..., 0] < lse)
            if f"{p}_rows" not in d.files:
                continue
            rows, pos = d[f"{p}_rows"].astype(np.float64), d[f"call{k}_logits_positions"]
            assert np.array_equal(np.take_along_axis(rows, idx[:, pos].astype(np.int64), axis=-1), val[:, pos])
            ref_lse = np.log(np.exp(rows - rows.max(-1, keepdims=True)).sum(-1)) + rows.max(-1)
            np.testing.assert_allclose(lse[:, pos], ref_lse, rtol=1e-6, atol=1e-5)


def test_clone_reference_codes_sit_before_the_target():
    d, meta = _load("clone")
    c = meta["calls"][0]
    T, L, Tr = c["target_len"], c["cond_len"], c["ref_len"]
    assert np.array_equal(d["call0_cond_ids"][:, L - T - Tr:L - T], d["ref_codes"])
    assert d["ref_wav_encoded"].size % 960 == 0 and d["ref_wav_encoded"].size // 960 == Tr
    # pydub's silence removal went through int16: the encoder input is on the 16-bit grid
    assert np.array_equal(d["ref_wav_encoded"] * 32768, np.round(d["ref_wav_encoded"] * 32768))


@pytest.mark.parametrize("case", ("auto", "design", "clone"))
def test_decoded_audio_has_hop_length_per_frame_and_sane_level(case):
    d, meta = _load(case)
    audio = d["decoded_audio"]
    assert audio.size == 960 * meta["calls"][0]["target_len"]
    rms = float(np.sqrt(np.mean(audio.astype(np.float64) ** 2)))
    assert 0.02 < rms < 0.5 and np.abs(audio).max() < 1.0


def test_codec_golden_shapes():
    d = np.load(HERE / "ref_codec.npz")
    assert d["encode_a_codes"].shape == (8, 25) and d["encode_b_codes"].shape == (8, 26)
    assert d["decode_audio"].shape == (960 * d["decode_codes"].shape[1],)
    for key in ("encode_a_codes", "encode_b_codes", "decode_codes"):
        assert d[key].min() >= 0 and d[key].max() < 1024
    # random weights must still give varied codes, or codec parity would be trivially easy
    assert all(len(np.unique(row)) > 5 for row in d["encode_a_codes"])
