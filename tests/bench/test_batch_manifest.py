"""tools/batch_bench.py --write-manifest: the manifests the throughput and Ray runs use are valid batch manifests,
and the multilingual mix gives every voice mode every language (issue 19 asks for several languages)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from omnivoice.batch.manifest import read_manifest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def test_the_multilingual_manifest_reads_whole_and_crosses_modes_with_languages(tmp_path):
    path = tmp_path / "m" / "lines.jsonl"
    subprocess.run([sys.executable, str(TOOLS / "batch_bench.py"), "--write-manifest", str(path), "--sizes", "21",
                    "--mix", "multilingual", "--steps", "4"], check=True, capture_output=True)
    manifest = read_manifest(path)
    assert len(manifest.good) == len(manifest.items) == 21, [i.error for i in manifest.items if i.error]
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]

    def mode(r: dict) -> str:
        return "clone" if "ref_audio" in r else "design" if "instruct" in r else "auto"

    pairs = {(mode(r), r["language"]) for r in lines}
    languages = {r["language"] for r in lines}
    assert len(languages) == 7 and len(pairs) == 21  # every mode meets every language
    assert all(item.request.language == r["language"] for item, r in zip(manifest.items, lines))
