from __future__ import annotations

import numpy as np
import pytest


class GraphRunner:
    """Runs a one-off graph: weights from numpy (optionally stored as f16/bf16/q8_0), inputs by name.

    On a GPU runtime the inputs are uploaded to the device like the weights (`device_inputs`): ggml's scheduler
    puts graph inputs on its last backend, the CPU, and in a graph with no device-held operand every node after
    them too (ggml-backend.cpp, "graph input"), so an op test built from inputs alone would never run its op on
    the GPU. On the CPU they stay graph inputs."""

    def __init__(self, runtime, device_inputs: bool | None = None):
        self.runtime = runtime
        self.device_inputs = runtime.is_gpu if device_inputs is None else device_inputs

    def __call__(self, build, inputs: dict, weights: dict | None = None, outputs=("y",)):
        from omnivoice.ggml import Graph, WeightStore

        store = WeightStore.from_arrays(self.runtime, weights or {"_unused": np.zeros(1, np.float32)})
        held = WeightStore.from_arrays(self.runtime, inputs) if self.device_inputs and inputs else None
        try:
            with Graph(self.runtime) as g:
                tensors = ({name: held[name] for name in inputs} if held is not None
                           else {name: g.input(name, arr.dtype, arr.shape) for name, arr in inputs.items()})
                result = build(g.ctx, store, **tensors)
                if not isinstance(result, tuple):
                    result = (result,)
                for name, t in zip(outputs, result):
                    g.output(name, t)
                out = g.compute(**({} if held is not None else inputs))
                return out[outputs[0]] if len(outputs) == 1 else tuple(out[n] for n in outputs)
        finally:
            if held is not None:
                held.close()
            store.close()


@pytest.fixture
def run(runtime):
    return GraphRunner(runtime)


@pytest.fixture(scope="session")
def cpu_runtime(runtime):
    """The CPU backend, whatever OMNIVOICE_TEST_BACKEND is: graphs with CPU-only nodes (custom ops) run here."""
    if not runtime.is_gpu:
        yield runtime
        return
    from omnivoice.ggml import Runtime

    with Runtime("cpu") as rt:
        yield rt


@pytest.fixture
def cpu_run(cpu_runtime):
    return GraphRunner(cpu_runtime)


@pytest.fixture
def one_thread_cpu_run():
    """A GraphRunner on the CPU backend with one thread: every node runs on the calling (main) thread."""
    from omnivoice.ggml import Runtime

    with Runtime("cpu", 1) as rt:
        yield GraphRunner(rt)
