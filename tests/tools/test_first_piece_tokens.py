"""tools/first_piece_tokens.py on the tiny model: it compares the texts stream_sentences cuts, its control (the
uncut stream against synthesize) comes out at 100 %, and its figures are those of the tokens themselves."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

import omnivoice
from omnivoice.text.streaming import stream_sentences

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import server_load  # the texts of its streaming loads: what the tool must draw

TEXT_SEED, WORDS, SEED = 3, (18, 25), 5


def test_first_piece_tokens_compares_the_cut_texts_against_synthesize(tiny_gguf, tmp_path):
    out = tmp_path / "fp.json"
    r = subprocess.run([sys.executable, str(REPO / "tools" / "first_piece_tokens.py"), "--model",
                        str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--texts", "12", "--words",
                        f"{WORDS[0]}:{WORDS[1]}", "--text-seed", str(TEXT_SEED), "--seed", str(SEED),
                        "--controls", "2", "--json", str(out)], check=False, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())

    texts = server_load.client_texts(TEXT_SEED, 0, 12, WORDS)
    cut = [(i, t) for i, t in enumerate(texts) if stream_sentences(t, True) != stream_sentences(t, False)]
    assert 2 <= len(cut) < 12, "the sample should hold texts cut and texts left whole"
    rows = result["rows"]
    assert result["cut"] == len(cut) and [(row["index"], row["text"]) for row in rows] == cut
    assert all(row["pieces"] == len(stream_sentences(t, True)) for row, (_, t) in zip(rows, cut))
    assert f"| 12 | {len(cut)} |" in r.stdout and "2 of 2 equal" in r.stdout

    # the control: the uncut stream's tokens are synthesize's, frame for frame
    control = result["control"]
    assert control["texts"] == control["equal"] == 2
    assert all(c["equal_share"] == 1.0 and c["frames"] == c["frames_whole"] for c in control["rows"])

    shares = [row["equal_share"] for row in rows]
    assert result["equal_share"] == {"median": statistics.median(shares), "min": min(shares), "max": max(shares)}
    assert result["equal_share"]["max"] < 0.5, "the cut changes the sentence's tokens"

    # the first cut text's figures, from the tokens themselves
    i, text = cut[0]
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        whole = np.concatenate(ov.synthesize(text, seed=SEED + i).tokens, axis=1)
        with ov.engine() as engine:
            job = engine.submit({"text": text, "seed": SEED + i}, stream=True, short_first=True)
            pieces = np.concatenate(job.result().tokens, axis=1)
    n = min(whole.shape[1], pieces.shape[1])
    assert (rows[0]["frames"], rows[0]["frames_whole"]) == (pieces.shape[1], whole.shape[1])
    assert rows[0]["equal_share"] == float(np.mean(pieces[:, :n] == whole[:, :n]))
    assert result["texts"] == 12 and result["words"] == list(WORDS) and "cores" in result["machine"]
