"""A repo of GGUFs as --model: only the two files needed are downloaded. No network here: huggingface_hub's
listing and download calls are replaced by a stand-in serving files from a local folder (the calls our code makes,
with their signatures), which records every download."""

from __future__ import annotations

import shutil
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest

from omnivoice.quantize import SCHEMES
from omnivoice.resolve import REPO_QUANT_ORDER, ModelNotAvailable, pick_repo_files, resolve_model

THEIR_REPO = ["README.md", ".gitattributes", "omnivoice-base-F32.gguf", "omnivoice-base-BF16.gguf",
              "omnivoice-base-Q8_0.gguf", "omnivoice-base-Q4_K_M.gguf", "omnivoice-tokenizer-F32.gguf",
              "omnivoice-tokenizer-BF16.gguf", "omnivoice-tokenizer-Q8_0.gguf", "omnivoice-tokenizer-Q4_K_M.gguf"]


@pytest.mark.parametrize("quant, prefer, lm, codec", [
    ("auto", "f32", "omnivoice-base-F32.gguf", "omnivoice-tokenizer-F32.gguf"),
    ("auto", "bf16", "omnivoice-base-BF16.gguf", "omnivoice-tokenizer-F32.gguf"),
    ("auto", "f16", "omnivoice-base-F32.gguf", "omnivoice-tokenizer-F32.gguf"),  # no F16: the next in order
    ("q4_k_m", "f32", "omnivoice-base-Q4_K_M.gguf", "omnivoice-tokenizer-F32.gguf"),
    ("q8_0", "f32", "omnivoice-base-Q8_0.gguf", "omnivoice-tokenizer-F32.gguf"),
])
def test_pick_from_their_listing(quant, prefer, lm, codec):
    assert pick_repo_files(THEIR_REPO, quant, prefer) == (lm, codec)


def test_pick_other_listings():
    assert pick_repo_files(["config.json", "model.safetensors", "audio_tokenizer/config.json"]) is None
    assert pick_repo_files(["gguf/omnivoice-base-Q4_K_M.gguf", "gguf/omnivoice-tokenizer-Q8_0.gguf"]) == \
        ("gguf/omnivoice-base-Q4_K_M.gguf", "gguf/omnivoice-tokenizer-Q8_0.gguf")
    with pytest.raises(ModelNotAvailable, match=r"no omnivoice-base-Q6_K\.gguf \(it has .*Q4_K_M"):
        pick_repo_files(THEIR_REPO, "q6_k")
    with pytest.raises(ModelNotAvailable, match="no codec GGUF"):
        pick_repo_files(["omnivoice-base-Q8_0.gguf"])
    assert set(REPO_QUANT_ORDER) == set(SCHEMES)


class FakeHub:
    """Stands in for huggingface_hub's HfApi().model_info (its file list) and hf_hub_download over a local
    folder."""

    def __init__(self, repos: dict[str, Path], cache: Path) -> None:
        self.repos, self.cache, self.downloads = repos, cache, []
        hub = self

        class HfApi:
            def model_info(self, repo_id, **kwargs):
                import httpx
                from huggingface_hub.errors import RepositoryNotFoundError

                if repo_id not in hub.repos:  # what the Hub answers for a repo that does not exist
                    url = f"https://huggingface.co/api/models/{repo_id}"
                    raise RepositoryNotFoundError(f"404 Client Error: Repository Not Found for url: {url}",
                                                  response=httpx.Response(404, request=httpx.Request("GET", url)))
                return SimpleNamespace(siblings=[SimpleNamespace(rfilename=p.name)
                                                 for p in sorted(hub.repos[repo_id].iterdir())])

        self.HfApi = HfApi

    def hf_hub_download(self, repo_id, filename, **kwargs):
        self.downloads.append((repo_id, filename))
        dst = self.cache / repo_id.replace("/", "--") / filename
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.repos[repo_id] / filename, dst)
        return str(dst)


@pytest.fixture
def fake_hub(monkeypatch, tmp_path, cpp_tiny):
    import huggingface_hub

    repo = tmp_path / "repo"
    repo.mkdir()
    for key, name in (("f32", "omnivoice-base-F32.gguf"), ("q8_0", "omnivoice-base-Q8_0.gguf"),
                      ("codec", "omnivoice-tokenizer-F32.gguf"), ("codec_q8_0", "omnivoice-tokenizer-Q8_0.gguf")):
        (repo / name).symlink_to(cpp_tiny[key])
    (repo / "README.md").write_text("omnivoice.cpp GGUFs\n")
    hub = FakeHub({"Serveurperso/omnivoice.cpp-GGUF": repo}, tmp_path / "hf-cache")
    monkeypatch.setattr(huggingface_hub, "HfApi", hub.HfApi)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub.hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *a, **k: pytest.fail("a repo of GGUFs must not be downloaded whole"))
    return hub


def test_a_gguf_repo_downloads_two_files(fake_hub, cpp_tiny):
    lm, codec = resolve_model("Serveurperso/omnivoice.cpp-GGUF", quant="q8_0")
    assert fake_hub.downloads == [("Serveurperso/omnivoice.cpp-GGUF", "omnivoice-base-Q8_0.gguf"),
                                  ("Serveurperso/omnivoice.cpp-GGUF", "omnivoice-tokenizer-F32.gguf")]
    assert lm.read_bytes() == cpp_tiny["q8_0"].read_bytes() and codec.name == "omnivoice-tokenizer-F32.gguf"
    lm2, _ = resolve_model("Serveurperso/omnivoice.cpp-GGUF")  # auto on the CPU: F32
    assert lm2.name == "omnivoice-base-F32.gguf" and len(fake_hub.downloads) == 4


def test_no_such_repo_is_bad_input(fake_hub):
    with pytest.raises(ModelNotAvailable, match="no such model"):
        resolve_model("Serveurperso/nothing-here")


def test_omnivoice_speaks_from_a_gguf_repo(fake_hub, cpp_tiny, tiny_gguf):
    import omnivoice

    greedy = dict(num_step=6, position_temperature=0.0, class_temperature=0.0, duration=1.0)
    with omnivoice.OmniVoice("Serveurperso/omnivoice.cpp-GGUF", backend="cpu", quant="q8_0") as ov:
        a = ov.synthesize("Hello from the hub.", **greedy)
    with omnivoice.OmniVoice(str(tiny_gguf["q8_0"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        b = ov.synthesize("Hello from the hub.", **greedy)
    np.testing.assert_array_equal(a.tokens[0], b.tokens[0])
    np.testing.assert_array_equal(a.audio, b.audio)
