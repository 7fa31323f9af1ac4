"""Batch synthesis on one local CPU Ray cluster (the module's): two actors give the tokens, files and failure
records of a local run; the Ray Data predictor gives each row its solo result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (CI installs it: .ci/run)")

from omnivoice.batch.__main__ import main as batch_main  # noqa: E402
from tests.fixtures.ray_cluster import local_cluster  # noqa: E402
from tests.golden_paths import GOLDEN  # noqa: E402

from .test_batch_cli import model_args, write_manifest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster of 2 CPUs for the module; its address."""
    with local_cluster(ROOT, num_cpus=2) as address:
        yield address


def test_two_cpu_actors_equal_a_local_run(tmp_path, tiny_gguf, cluster, capsys):
    import soundfile as sf

    ref = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"].astype(np.float32)
    sf.write(tmp_path / "me.wav", ref, 24000, subtype="FLOAT")
    lines = [{"id": f"auto{i}", "text": f"Line {i} in the auto voice.", "seed": i} for i in range(3)]
    lines += [{"id": "clone", "text": "A cloned line.", "ref_audio": "me.wav", "ref_text": "Hello world, this is me",
               "seed": 9},
              {"id": "design", "text": "Designed.", "instruct": "male", "language_id": "en", "duration": 1.0},
              {"id": "bad", "text": "x", "language_id": "Klingonese"},
              "not json"]
    manifest = write_manifest(tmp_path / "lines.jsonl", lines)
    common = [str(manifest), "--num-step", "4", "--save-tokens", "--seed", "5", *model_args(tiny_gguf)]

    def batch(*argv: str) -> str:  # in this process: the Ray run then joins its driver's connection
        assert batch_main(list(argv)) == 2  # two items failed
        return capsys.readouterr().err

    batch("-o", str(tmp_path / "local"), *common)
    # --ray: two CPU actors share the cluster
    err = batch("-o", str(tmp_path / "ray"), *common, "--ray", cluster, "--cpu-actors", "2", "--threads", "1")
    assert err.count("pid ") == 2, err  # two actors described themselves
    names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ray").iterdir())
    assert len([n for n in names if n.endswith(".npy")]) == 5
    for name in names:
        if name.endswith(".npy"):
            np.testing.assert_array_equal(np.load(tmp_path / "ray" / name), np.load(tmp_path / "local" / name),
                                          err_msg=name)
    fails = [json.loads(x) for x in (tmp_path / "ray" / "failures.jsonl").read_text().splitlines()]
    assert fails == [json.loads(x) for x in (tmp_path / "local" / "failures.jsonl").read_text().splitlines()]
    assert [f["line"] for f in fails] == [6, 7]
    # resumable as a local run is
    err = batch("-o", str(tmp_path / "ray"), *common, "--ray", cluster, "--cpu-actors", "2")
    assert "0 to do, 5 already done, 2 bad" in err, err


def test_the_command_joins_a_running_cluster_by_its_address(tmp_path, tiny_gguf, cluster):
    """python -m omnivoice.batch --ray ADDRESS as a user runs it: its own process, whose ray.init joins the cluster
    (the test above runs the command in this process, already the cluster's driver)."""
    import os
    import subprocess
    import sys

    manifest = write_manifest(tmp_path / "lines.jsonl", [{"id": "one", "text": "Joined.", "seed": 1}])
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "omnivoice.batch", str(manifest), "-o", str(tmp_path / "out"),
                        "--num-step", "2", *model_args(tiny_gguf), "--ray", cluster, "--cpu-actors", "1",
                        "--threads", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "pid " in r.stderr and (tmp_path / "out" / "one.wav").is_file(), r.stderr


@pytest.mark.slow  # Ray Data starts its stats actor and the predictor's: 20-28 s beside two CPU hogs on 2 cores
def test_ray_data_predictor_gives_each_row_its_solo_result(tiny_gguf, cluster):
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow (the [ray] extra installs ray[data])")
    import omnivoice
    from omnivoice.batch.ray import OmniVoicePredictor

    rows = [{"text": "First row.", "seed": 1, "num_step": 4},
            {"text": "Second row, designed.", "instruct": "female", "seed": 2, "num_step": 3},
            {"text": "Bad row.", "language": "Klingonese", "seed": 3, "num_step": 3}]
    kwargs = {"model": str(tiny_gguf["f32"]), "codec": str(tiny_gguf["codec"]), "backend": "cpu", "threads": 1}
    ds = ray.data.from_items(rows).map_batches(OmniVoicePredictor, fn_constructor_kwargs=kwargs, concurrency=1,
                                              batch_size=3, batch_format="numpy")
    out = sorted(ds.take_all(), key=lambda r: r["text"])
    assert [r["text"] for r in out] == ["Bad row.", "First row.", "Second row, designed."]
    assert "Klingonese" in out[0]["error"] and len(out[0]["audio"]) == 0
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        for row, got in zip(rows[:2], out[1:]):
            r = dict(row)
            expected = ov.synthesize(r.pop("text"), **r)
            assert got["error"] == "" and int(got["sample_rate"]) == 24000
            np.testing.assert_array_equal(np.asarray(got["audio"]), expected.audio)
            np.testing.assert_array_equal(np.asarray(got["tokens"]), np.concatenate(expected.tokens, axis=1))
