"""The binding layer: backends by name, graphs (inputs, replay, misuse as Python errors), weight loading."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from omnivoice.ggml import Graph, Runtime, WeightStore, ffi, lib, list_devices, parse_spec, read_tensor
from omnivoice.ggml.weights import Zeros
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
    # after close every tensor of the graph is freed memory: each use is an error, not a read of it
    assert g.n_nodes == 0 and g.buffer_size() == 0
    for use in (lambda: g.compute(a=x), lambda: g.set_input("a", x), lambda: g.read_outputs(),
                lambda: g.tensor("y"), lambda: g.input("c", np.float32, (2,)), g.allocate):
        with pytest.raises(RuntimeError, match="the compute graph is closed"):
            use()
    g.close()  # twice is fine


def _chain(runtime, n: int, depth: int) -> Graph:
    """x -> tanh(W x) `depth` times: a run long enough on a GPU that reading before its end would show."""
    g = Graph(runtime)
    w = g.input("w", np.float32, (n, n))
    x = g.input("x", np.float32, (1, n))
    for _ in range(depth):
        x = lib.ggml_tanh(g.ctx, lib.ggml_mul_mat(g.ctx, w, x))
    g.output("y", x)
    g.allocate()
    return g


def test_a_closed_graphs_scheduler_serves_the_next_graph(rng):
    """Runtime.schedulers: a closed graph's scheduler is reset and taken by the next graph of at most its node
    budget, which computes what a fresh one does; a larger budget gets a new scheduler; the runtime frees them."""
    with Runtime("cpu", 1) as rt:
        assert rt.schedulers.max_kept == 0  # on the CPU by default none (their buffers are host memory)
        rt.schedulers.max_kept = 2
        w, x = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)
        first = _chain(rt, 8, 3)
        expected = first.compute(w=w, x=x)["y"]
        sched = first._sched
        first.close()
        assert len(rt.schedulers) == 1
        second = _chain(rt, 8, 5)  # another graph: more nodes, other buffers, the same budget
        assert second._sched == sched and len(rt.schedulers) == 0
        y = np.tanh(np.tanh(expected @ w.T) @ w.T)
        np.testing.assert_allclose(second.compute(w=w, x=x)["y"], y, rtol=1e-5, atol=1e-6)
        second.close()
        big = Graph(rt, max_nodes=2 * first.max_nodes)
        big.output("y", lib.ggml_scale(big.ctx, big.input("x", np.float32, (4,)), 2.0))
        big.allocate()
        assert big._sched != sched and len(rt.schedulers) == 1  # the kept one's budget is too small
        big.close()
        assert len(rt.schedulers) == 2
    assert len(rt.schedulers) == 0 and rt.schedulers.closed


def test_kept_schedulers_hold_at_most_max_bytes():
    """The kept schedulers' buffers stay under max_bytes together (the oldest goes first), and one whose buffers
    alone are over it is not kept (Runtime: a sixteenth of the device's memory)."""
    with Runtime("cpu", 1) as rt:
        pool = rt.schedulers
        pool.max_kept = 4
        graphs = [_chain(rt, 64, 2) for _ in range(3)] + [_chain(rt, 1024, 2)]
        small, big = pool.size_of(graphs[0]._sched), pool.size_of(graphs[3]._sched)
        assert 0 < small < big
        pool.max_bytes = 2 * small
        for g in graphs[:3]:
            g.close()
        assert len(pool) == 2  # a third would be over 2 * small: the first went
        graphs[3].close()
        assert len(pool) == 2  # over max_bytes alone: freed, the two small ones kept


def test_the_memory_check_counts_a_kept_schedulers_buffers(rng, monkeypatch):
    """A kept scheduler's buffers serve its next graph: the check asks the device only for what they lack (here
    nothing, with no memory left at all). Where the device has too little, the other kept schedulers are freed
    and the device asked again."""
    from omnivoice.ggml import memory

    with Runtime("cpu", 1) as rt:
        rt.schedulers.max_kept = 3
        for g in [_chain(rt, 64, 2) for _ in range(3)]:
            g.close()
        assert len(rt.schedulers) == 3
        monkeypatch.setattr(memory, "available", lambda backend: 0)
        same = _chain(rt, 64, 2)  # the same buffers' size: nothing more is needed
        assert len(rt.schedulers) == 2
        w, x = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((1, 64)).astype(np.float32)
        w64 = w.astype(np.float64)
        np.testing.assert_allclose(same.compute(w=w, x=x)["y"], np.tanh(np.tanh(x[0] @ w64.T) @ w64.T), atol=2e-5)
        asked = []  # the kept schedulers at each question: none the first time, plenty once they are freed

        def available(backend) -> int:
            asked.append(len(rt.schedulers))
            return 0 if len(asked) == 1 else 1 << 40
        monkeypatch.setattr(memory, "available", available)
        bigger = _chain(rt, 512, 2)  # more than its kept buffers hold: the other kept one is freed, then it fits
        assert asked == [1, 0] and len(rt.schedulers) == 0
        monkeypatch.setattr(memory, "available", lambda backend: 0)
        with pytest.raises(MemoryError, match="needs .* of CPU memory for its activations; 0 MiB is available"):
            _chain(rt, 4096, 2)
        same.close()
        bigger.close()


def test_two_graphs_in_flight_are_waited_for_one_at_a_time(runtime, rng):
    """Two graphs launched one after the other and waited for in either order (the pipelined engine's
    pattern): each wait returns that graph's whole result (on CUDA a wait is its own run's event)."""
    n, depth = 512, 64
    w = (rng.standard_normal((2, n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((2, 1, n)).astype(np.float32)
    want = []
    for i in range(2):
        y = x[i]
        for _ in range(depth):
            y = np.tanh(y @ w[i].T)
        want.append(y[0])
    ga, gb = _chain(runtime, n, depth), _chain(runtime, n, depth)
    try:
        ga.launch(w=w[0], x=x[0])
        gb.launch(w=w[1], x=x[1])
        ga.wait()
        np.testing.assert_allclose(ga.read_outputs()["y"], want[0], atol=2e-4)
        ga.launch(x=x[1], w=w[1])   # queued behind gb's run
        gb.wait()
        np.testing.assert_allclose(gb.read_outputs()["y"], want[1], atol=2e-4)
        ga.wait()
        np.testing.assert_allclose(ga.read_outputs()["y"], want[1], atol=2e-4)
        gb.launch(x=x[0], w=w[0])   # closed with a run still queued: close waits for it
    finally:
        ga.close()
        gb.close()


def test_device_inputs_are_held_on_the_device_and_runs_queue(runtime, rng):
    """An input declared with device=True lives in the device's memory (the LM's ids: Graph.input), so runs
    launched back to back are queued without a wait or a copy in between, each computing what was written."""
    n, depth = 256, 32
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((2, 1, n)).astype(np.float32)
    want = []
    for i in range(2):
        y = x[i]
        for _ in range(depth):
            y = np.tanh(y @ w.T)
        want.append(y[0])
    with Graph(runtime) as g:
        wt = g.input("w", np.float32, (n, n), device=True)
        cur = xt = g.input("x", np.float32, (1, n), device=True)
        host = g.input("h", np.float32, (1, n))  # a plain input beside them: the scheduler copies it at each run
        for _ in range(depth):
            cur = lib.ggml_tanh(g.ctx, lib.ggml_mul_mat(g.ctx, wt, cur))
        g.output("y", cur)
        g.output("z", lib.ggml_add(g.ctx, xt, host))
        g.allocate()

        def on_host(t) -> bool:
            return bool(lib.ggml_backend_buffer_is_host(t.buffer if t.buffer != ffi.NULL else t.view_src.buffer))

        assert on_host(g.tensor("x")) == (runtime.device.kind == "cpu")
        assert on_host(g.tensor("h"))
        g.set_input("w", w)
        g.set_input("h", x[1])
        for i in range(2):
            g.set_input("x", x[i])  # no run in flight
            for _ in range(3):
                g.launch()
            g.wait()
            out = g.read_outputs()
            np.testing.assert_allclose(out["y"], want[i], atol=2e-4)
            np.testing.assert_allclose(out["z"], (x[i] + x[1])[0], rtol=1e-6)


def test_a_closed_runtime_refuses_use():
    rt = Runtime("cpu", 1)
    rt.close()
    for use in (lambda: rt.backend, lambda: rt.cpu,
                lambda: WeightStore.from_arrays(rt, {"w": np.zeros(4, np.float32)})):
        with pytest.raises(RuntimeError, match="the runtime on cpu:0 is closed"):
            use()
    rt.close()


def test_a_closed_weight_store_says_so(runtime):
    store = WeightStore.from_arrays(runtime, {"w": np.zeros(4, np.float32)})
    assert "w" in store and not store.closed
    store.close()
    with pytest.raises(RuntimeError, match="the weight store is closed"):
        store["w"]


@pytest.mark.parametrize("in_place", [True, False])
def test_weights_from_a_gguf_in_place_or_copied(tiny_gguf, in_place):
    from omnivoice.gguf import open_model

    with Runtime("cpu") as rt:
        f = open_model(tiny_gguf["f32"], "omnivoice-lm")
        with WeightStore(rt, f.path, f.metadata, region=f.data) as w:
            chosen = f.tensors[:6]
            for t in chosen:
                w.add(t.name, t.tensor_type, t.shape, t.data)
            norm = f.tensor("llm.norm.weight").data.view(np.float32)
            w.add_array("twice_norm", 2 * norm)
            w.upload(in_place=in_place, release=f.release)
            for t in chosen:
                want = t.data.view(np.float32).reshape(tuple(reversed(t.shape)))
                np.testing.assert_array_equal(read_tensor(w[t.name]), want)
                in_file = f.data.ctypes.data <= int(ffi.cast("uintptr_t", w[t.name].data)) < f.data.ctypes.data + \
                    f.data.nbytes
                assert in_file == in_place
            np.testing.assert_array_equal(read_tensor(w["twice_norm"]), 2 * norm)
            assert w.metadata["general.architecture"] == "omnivoice-lm"


def test_stacked_weights_hold_the_rows_of_their_parts(runtime, rng):
    a, b = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
    with WeightStore(runtime) as w:
        w.add("ab", lib.GGML_TYPE_F32, (8, 8), [a, b])
        w.upload()
        np.testing.assert_array_equal(read_tensor(w["ab"]), np.concatenate([a, b]))


def test_weights_are_checked_before_ggml_sees_them(runtime):
    """Each of these would abort the process inside ggml (ggml_new_tensor, ggml_row_size)."""
    with WeightStore(runtime, "x.gguf") as w:
        data = np.zeros(64, np.uint8)
        with pytest.raises(ValueError, match="'a' has shape \\[16, 0\\]"):
            w.add("a", lib.GGML_TYPE_F32, (16, 0), data)
        with pytest.raises(ValueError, match="1 to 4 dimensions"):
            w.add("a", lib.GGML_TYPE_F32, (2, 2, 2, 2, 1), data)
        with pytest.raises(ValueError, match="ggml type 4 is not a tensor type"):
            w.add("a", 4, (16,), data)
        with pytest.raises(ValueError, match="ggml type 99 is not a tensor type"):
            w.add("a", 99, (16,), data)
        with pytest.raises(ValueError, match="row length 16 is not a multiple of q8_0's block of 32"):
            w.add("a", lib.GGML_TYPE_Q8_0, (16,), data)
        with pytest.raises(ValueError, match="'a' holds 64 bytes; its type f32 and shape \\[32\\] need 128"):
            w.add("a", lib.GGML_TYPE_F32, (32,), data)
        w.add("a", lib.GGML_TYPE_F32, (16,), data)
        with pytest.raises(ValueError, match="'a' added twice"):
            w.add("a", lib.GGML_TYPE_F32, (16,), data)


def test_gguf_errors(tiny_gguf, tmp_path):
    from omnivoice.gguf import open_model

    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        open_model(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="expected 'omnivoice-lm'"):
        open_model(tiny_gguf["codec"], "omnivoice-lm")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(tiny_gguf["f32"].read_bytes()[:-1000])
    with pytest.raises(GGUFFormatError, match="truncated"):
        open_model(truncated)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        open_model(junk)


def test_quantized_weights_from_arrays(runtime, rng):
    w = rng.standard_normal((16, 64)).astype(np.float32)
    with WeightStore.from_arrays(runtime, {"q": ("q8_0", w), "h": ("f16", w)}) as store:
        assert store["q"].type == lib.GGML_TYPE_Q8_0 and store["h"].type == lib.GGML_TYPE_F16
        np.testing.assert_array_equal(read_tensor(store["h"]), w.astype(np.float16))


def test_zeros_are_set_on_the_device_beside_arrays(runtime, rng):
    """Zeros tensors are cleared where they are allocated (no host array), and the arrays beside them in the
    same buffer keep their values. The store before leaves its memory dirty: the allocator hands freed memory
    on, so a tensor allocated but never cleared would read that back."""
    dirty = {f"d{i}": np.full((64, 32), -7.0, np.float32) for i in range(4)}
    WeightStore.from_arrays(runtime, dirty).close()
    a = rng.standard_normal((3, 5)).astype(np.float32)
    with WeightStore.from_arrays(runtime, {"z": Zeros(np.float32, (64, 32)), "a": a,
                                           "h": Zeros(np.float16, (2, 3, 4))}) as store:
        assert store["z"].type == lib.GGML_TYPE_F32 and store["h"].type == lib.GGML_TYPE_F16
        assert tuple(store["h"].ne)[:3] == (4, 3, 2)
        np.testing.assert_array_equal(read_tensor(store["z"]), np.zeros((64, 32), np.float32))
        np.testing.assert_array_equal(read_tensor(store["h"]), np.zeros((2, 3, 4), np.float16))
        np.testing.assert_array_equal(read_tensor(store["a"]), a)


@pytest.mark.parametrize("what", ["graph", "schedulers", "weights", "runtime"])
def test_a_ctrl_c_right_after_a_free_does_not_free_twice(what, rng, monkeypatch):
    """A signal's exception is raised right after a C call returns, so a close() interrupted just after a free
    must not free that handle again when it is called a second time (or by __del__): that double free crashed
    the batch CLI's Ctrl-C test about once in fifty runs. ("graph": a runtime that keeps no schedulers, so that
    the graph's close frees its own; "schedulers": the kept ones freed by the pool.)"""
    fn = {"graph": "ggml_backend_sched_free", "schedulers": "ggml_backend_sched_free",
          "weights": "ggml_backend_buffer_free", "runtime": "ggml_backend_free"}[what]
    real, freed = getattr(lib, fn), []

    def free_then_interrupt(handle):
        key = int(ffi.cast("uintptr_t", handle))
        if key not in freed:  # a real second free would crash this process: count it instead
            real(handle)
        freed.append(key)
        if len(freed) == 1:
            raise KeyboardInterrupt

    rt = Runtime("cpu", 1)
    if what in ("graph", "schedulers"):
        rt.schedulers.max_kept = 0 if what == "graph" else 2
        graphs = [_chain(rt, 4, 2) for _ in range(2)]  # two graphs at once: two schedulers
        for g in graphs:
            g.compute(w=rng.standard_normal((4, 4)).astype(np.float32),
                      x=rng.standard_normal((1, 4)).astype(np.float32))
        if what == "graph":
            obj = graphs[0]
            graphs[1].close()
        else:
            for g in graphs:
                g.close()
            assert len(rt.schedulers) == 2
            obj = SimpleNamespace(close=rt.schedulers.clear)
    elif what == "weights":
        obj = WeightStore.from_arrays(rt, {"a": np.ones(4, np.float32), "b": np.ones((2, 3), np.float32)})
    else:
        obj = rt
    monkeypatch.setattr(lib, fn, free_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        obj.close()
    obj.close()
    monkeypatch.undo()
    if what != "runtime":
        rt.close()
    assert freed and len(freed) == len(set(freed)), freed


def test_the_build_records_the_locked_patches():
    """build_ext.py records in _lib/build.json the patches it applied, the ones ggml.lock lists: a record for
    people. Graphs ask the library what it has (tests/ggml/test_capabilities.py); the old question by file name
    still answers, with a DeprecationWarning."""
    import json
    from pathlib import Path

    from omnivoice.ggml import build_info, built_with_patch

    lock = json.loads((Path(__file__).resolve().parents[2] / "vendor" / "ggml" / "ggml.lock").read_text())
    files = [p["file"] for p in lock["patches"]]
    assert build_info["ggml_patches"] == files
    with pytest.warns(DeprecationWarning, match="Runtime.has"):
        assert built_with_patch(files[0][:5]) and not built_with_patch("9999-")
