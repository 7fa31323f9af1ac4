"""The binding layer: backends by name, graphs (inputs, replay, misuse as Python errors), weight loading."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import Graph, Runtime, WeightStore, lib, list_devices, parse_spec, read_tensor
from omnivoice.gguf import GGUFFormatError


def test_devices_and_specs():
    devices = list_devices()
    assert any(d.kind == "cpu" and d.spec == "cpu:0" for d in devices)
    assert parse_spec("CUDA:1") == ("cuda", 1) and parse_spec("auto") == ("auto", None)
    with pytest.raises(ValueError, match="index"):
        parse_spec("cuda:x")
    with pytest.raises(ValueError, match="not available"):
        Runtime("nosuchbackend")
    with pytest.raises(ValueError, match="index 7 does not exist"):
        Runtime("cpu:7")


def test_graph_replay_and_input_checks(runtime, rng):
    with Graph(runtime) as g:
        a = g.input("a", np.float32, (3, 4))
        b = g.input("b", np.float32, (3, 4))
        g.input("unused", np.float32, (2,))  # declared, never consumed
        g.output("y", lib.ggml_add(g.ctx, lib.ggml_mul(g.ctx, a, b), a))
        g.allocate()
        x, y = rng.standard_normal((2, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(g.compute(a=x, b=y)["y"], x * y + x, rtol=1e-6)
        # b keeps its value across replays; only a changes
        x2 = rng.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_allclose(g.compute(a=x2)["y"], x2 * y + x2, rtol=1e-6)
        with pytest.raises(ValueError, match="expected shape"):
            g.compute(a=np.zeros((4, 3), np.float32))
        with pytest.raises(TypeError, match="float32"):
            g.compute(a=np.zeros((3, 4), np.int32))
        with pytest.raises(KeyError, match="no input 'c'"):
            g.compute(c=x)
        with pytest.raises(ValueError, match="not part of the allocated graph"):
            g.compute(unused=np.zeros(2, np.float32))


@pytest.mark.parametrize("mmap", [True, False])
def test_weights_from_gguf_in_place_or_copied(tiny_gguf, mmap):
    from omnivoice.gguf import read_gguf

    with Runtime("cpu") as rt:
        f = read_gguf(str(tiny_gguf["f32"]))
        with WeightStore.from_gguf(rt, tiny_gguf["f32"], "omnivoice-lm", mmap=mmap,
                                   derived={"twice_norm": lambda get: 2 * get("llm.norm.weight")}) as w:
            for t in f.tensors[:6]:
                want = t.data.view(np.float32).reshape(tuple(reversed(t.shape)))
                np.testing.assert_array_equal(read_tensor(w[t.name]), want)
            norm = f.tensor("llm.norm.weight").data.view(np.float32)
            np.testing.assert_array_equal(read_tensor(w["twice_norm"]), 2 * norm)
            assert w.metadata["general.architecture"] == "omnivoice-lm"


def test_stacked_weights_hold_the_rows_of_their_parts(tiny_gguf):
    from omnivoice.gguf import read_gguf

    f = read_gguf(str(tiny_gguf["f32"]))
    parts = [f"llm.layers.0.self_attn.{n}_proj.weight" for n in "qkv"]
    with Runtime("cpu") as rt:
        with WeightStore.from_gguf(rt, tiny_gguf["f32"], stack={"qkv": parts}, mmap=False) as w:
            want = np.concatenate([f.tensor(n).data.view(np.float32).reshape(tuple(reversed(f.tensor(n).shape)))
                                   for n in parts])
            np.testing.assert_array_equal(read_tensor(w["qkv"]), want)
            assert not any(n in w for n in parts)
        with pytest.raises(ValueError, match="row lengths differ"):
            WeightStore.from_gguf(rt, tiny_gguf["f32"], mmap=False,
                                  stack={"bad": ["llm.layers.0.mlp.down_proj.weight", parts[0]]})
        with pytest.raises(ValueError, match="only matrices"):
            WeightStore.from_gguf(rt, tiny_gguf["f32"], mmap=False, stack={"bad": ["llm.norm.weight", parts[0]]})
        with pytest.raises(KeyError, match="no_such"):
            WeightStore.from_gguf(rt, tiny_gguf["f32"], mmap=False, stack={"bad": ["no_such.weight"]})
        with pytest.raises(ValueError, match="mmap=False"):
            WeightStore.from_gguf(rt, tiny_gguf["f32"], mmap=True, stack={"qkv": parts})


def test_gguf_errors(tiny_gguf, tmp_path):
    with Runtime("cpu") as rt:
        with pytest.raises(FileNotFoundError, match="missing.gguf"):
            WeightStore.from_gguf(rt, tmp_path / "missing.gguf")
        with pytest.raises(ValueError, match="expected 'omnivoice-lm'"):
            WeightStore.from_gguf(rt, tiny_gguf["codec"], "omnivoice-lm")
        truncated = tmp_path / "cut.gguf"
        truncated.write_bytes(tiny_gguf["f32"].read_bytes()[:-1000])
        with pytest.raises(GGUFFormatError, match="truncated"):
            WeightStore.from_gguf(rt, truncated)
        junk = tmp_path / "junk.gguf"
        junk.write_bytes(b"not a gguf file at all")
        with pytest.raises(GGUFFormatError, match="not a GGUF file"):
            WeightStore.from_gguf(rt, junk)


def test_quantized_weights_from_arrays(runtime, rng):
    w = rng.standard_normal((16, 64)).astype(np.float32)
    with WeightStore.from_arrays(runtime, {"q": ("q8_0", w), "h": ("f16", w)}) as store:
        assert store["q"].type == lib.GGML_TYPE_Q8_0 and store["h"].type == lib.GGML_TYPE_F16
        np.testing.assert_array_equal(read_tensor(store["h"]), w.astype(np.float16))
