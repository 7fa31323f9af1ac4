"""A compute graph built from Python: a no-alloc context, named inputs and outputs, the backend scheduler.

Typical use, where `build` is a model's graph function:

    g = Graph(runtime)
    x = g.input("x", np.float32, (T, C))           # numpy shape; ggml ne is the reverse
    y = build(g.ctx, x)
    g.output("y", y)
    g.allocate()
    out = g.compute(x=array)["y"]                   # numpy, shaped like the tensor (reversed ne)
    out = g.compute(x=other_array)["y"]             # replay: same graph, new inputs

A graph is built once for fixed shapes and replayed: building a 28-layer graph through cffi costs about a
millisecond per thousand nodes, allocation much more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import memory, types
from ._ffi import consts, ffi, lib, raise_pending
from .backend import Runtime

DEFAULT_MAX_NODES = 16384

Tensor = Any  # a ggml tensor: cffi cdata 'struct ggml_tensor *' (type hints only)


def ne_of(t) -> tuple[int, ...]:
    """ggml shape (ne0 first) of a tensor, trailing ones dropped."""
    ne = [t.ne[i] for i in range(consts["GGML_MAX_DIMS"])]
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return tuple(ne)


def shape_of(t) -> tuple[int, ...]:
    """numpy shape (reversed ne) of a tensor."""
    return tuple(reversed(ne_of(t)))


def _squeeze_leading(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Leading ones carry no layout information: (1, 64) and (64,) fill the same tensor."""
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


ALIGN = 64  # bytes: what input sizes are rounded up to (see Graph.input)


def _contiguous_view(ctx, raw, like):
    """A view of the start of `raw` with the shape of `like`, contiguous."""
    ne = [like.ne[i] for i in range(4)]
    es = lib.ggml_type_size(like.type)
    return lib.ggml_view_4d(ctx, raw, ne[0], ne[1], ne[2], ne[3], es * ne[0], es * ne[0] * ne[1],
                            es * ne[0] * ne[1] * ne[2], 0)


def tensor_name(t) -> str:
    return ffi.string(t.name).decode()


def set_name(t, name: str):
    """Name a tensor (for debug dumps and lookups); names longer than GGML_MAX_NAME - 1 bytes are an error."""
    raw = name.encode()
    if len(raw) >= consts["GGML_MAX_NAME"]:
        raise ValueError(f"tensor name {name!r} is {len(raw)} bytes; ggml allows {consts['GGML_MAX_NAME'] - 1}")
    lib.ggml_set_name(t, raw)
    return t


def named(t, name: str, i: int | None = None):
    """Name an intermediate tensor `name`, or `name-i` inside layer i, as llama.cpp's cb(cur, "attn_norm", il)
    does, so that a graph dump or a profile says which tensor a node is. Returns `t`."""
    return set_name(t, name if i is None else f"{name}-{i}")


def new_context(n_tensors: int, graph_nodes: int = 0):
    """A context that holds tensor metadata only (no_alloc): data lives in backend buffers."""
    size = lib.ggml_tensor_overhead() * n_tensors
    if graph_nodes:
        size += lib.ggml_graph_overhead_custom(graph_nodes, False)
    params = ffi.new("struct ggml_init_params *", {"mem_size": size, "mem_buffer": ffi.NULL, "no_alloc": True})
    ctx = lib.ggml_init(params[0])
    if ctx == ffi.NULL:
        raise MemoryError(f"ggml_init failed for a {size}-byte metadata context")
    return ctx


def new_tensor(ctx, ggml_type: int, shape: tuple[int, ...]):
    """A tensor with a numpy-order shape (1 to 4 dims)."""
    if not 1 <= len(shape) <= 4 or any(int(s) <= 0 for s in shape):
        raise ValueError(f"tensor shape {shape} must have 1 to 4 positive dimensions")
    ne = [int(s) for s in reversed(shape)]
    fn = (lib.ggml_new_tensor_1d, lib.ggml_new_tensor_2d, lib.ggml_new_tensor_3d, lib.ggml_new_tensor_4d)[len(ne) - 1]
    return fn(ctx, ggml_type, *ne)


def _check_allocated(t, what: str = "") -> None:
    if t.data == ffi.NULL or (t.buffer == ffi.NULL and (t.view_src == ffi.NULL or t.view_src.buffer == ffi.NULL)):
        raise ValueError(f"{what or tensor_name(t)} has no memory: it is not part of the allocated graph "
                         "(unused by every output?)")


def read_tensor(t) -> np.ndarray:
    """Copy a tensor's data from its backend buffer into a new numpy array (F32, F16 or I32)."""
    _check_allocated(t)
    dtype = types.numpy_dtype(t.type)
    if not lib.ggml_is_contiguous(t):
        raise ValueError(f"tensor {tensor_name(t)!r} is not contiguous; make it so with ggml_cont before reading")
    out = np.empty(shape_of(t), dtype=dtype)
    lib.ggml_backend_tensor_get(t, ffi.from_buffer(out), 0, out.nbytes)
    return out


def write_tensor(t, array: np.ndarray, what: str = "") -> None:
    """Copy a numpy array into a tensor, checking dtype and shape first (a ggml assert would abort the process)."""
    _check_allocated(t, what)
    dtype = types.numpy_dtype(t.type)
    array = np.asarray(array)
    if array.dtype != dtype:
        if array.dtype.kind != dtype.kind and not (array.dtype.kind in "iu" and dtype.kind == "i"):
            raise TypeError(f"{what or tensor_name(t)}: expected {dtype} data, got {array.dtype}")
        array = array.astype(dtype)
    if _squeeze_leading(array.shape) != shape_of(t):
        raise ValueError(f"{what or tensor_name(t)}: expected shape {shape_of(t)}, got {array.shape}")
    array = np.ascontiguousarray(array)
    lib.ggml_backend_tensor_set(t, ffi.from_buffer(array), 0, array.nbytes)


class Graph:
    """One compute graph on a runtime's backends, allocated by its own scheduler and replayable."""

    def __init__(self, runtime: Runtime, max_nodes: int = DEFAULT_MAX_NODES, what: str = "the compute graph",
                 pooled: bool = True) -> None:
        """`what` names the graph in an out-of-memory error ("the codec encoder's graph for 12.0 s of audio").
        `pooled`: the graph may take a closed graph's scheduler (Runtime.schedulers), whose buffers keep the size
        its last graph needed; a graph that a cache keeps for many runs asks for a new one, sized for it alone."""
        self.runtime = runtime
        self.pooled = pooled
        self.max_nodes = max_nodes
        self.what = what
        self.ctx = new_context(max_nodes * 2, max_nodes)
        self._inputs: dict[str, object] = {}
        self._device_inputs: list = []  # the allocated tensors of the inputs declared with device=True
        self._outputs: dict[str, object] = {}
        self._gf = None
        self._sched = None
        self._sched_nodes = 0  # the scheduler's node budget (a kept one's may exceed max_nodes)
        # The run's completion event where the runtime waits per graph (None: not made yet; ffi.NULL: none to be
        # had): `wait` waits for this graph's own run, not for everything queued on the backend since (another
        # graph's run).
        self._event = None
        self._recorded = False

    # ------------------------------------------------------------------------------------------- building
    def input(self, name: str, dtype, shape: tuple[int, ...], device: bool = False):
        """Declare a named input tensor with a numpy-order shape; fed by `compute(name=array)`.

        ggml's scheduler keeps a graph input in host memory and, at every run, waits for the device to finish
        all it was given and copies the input over. `device=True` puts the input in the device's memory
        instead (no effect where the device is the CPU): `set_input` copies it there at once, and a run neither
        waits nor copies, so runs can be queued back to back. Write it only while no run of this graph is in
        flight (the copy does not wait for one)."""
        self._check_open()
        if name in self._inputs:
            raise ValueError(f"input {name!r} declared twice")
        ggml_type = types.from_numpy(dtype) if not isinstance(dtype, int) else dtype
        t = new_tensor(self.ctx, ggml_type, shape)
        nbytes = lib.ggml_nbytes(t)
        if nbytes % ALIGN:
            # The allocator packs tensors at 32-byte offsets: an input of, say, 8 x 125 int32 ids would put
            # every activation after it off the 64-byte lines that AVX-512 loads want (the CPU's F32 LM step
            # took 1.6x as long at an odd length). The input is allocated in whole 64-byte units and the graph
            # reads a view of it.
            raw = new_tensor(self.ctx, ggml_type, (-(-nbytes // ALIGN) * ALIGN // lib.ggml_type_size(ggml_type),))
            t = _contiguous_view(self.ctx, raw, t)
            set_name(t, name + ".view")
        else:
            raw = t
        set_name(raw, name)
        lib.ggml_set_input(raw)
        # The allocator frees an input once its last consumer ran; flagging it as an output too keeps its
        # memory, so inputs set once (masks, positions) survive into every replay of the graph.
        lib.ggml_set_output(raw)
        self._inputs[name] = t
        if device:
            self._device_inputs.append(raw)
        return t

    def output(self, name: str, t):
        """Mark a tensor as a named output, read back by `compute`."""
        self._check_open()
        if not lib.ggml_is_contiguous(t):
            t = lib.ggml_cont(self.ctx, t)
        set_name(t, name)
        lib.ggml_set_output(t)
        self._outputs[name] = t
        return t

    def allocate(self) -> None:
        """Build the graph from the outputs and allocate it on the scheduler (once).

        The compute buffers are measured first and checked against the memory each device has left; a graph
        that does not fit raises MemoryError naming `what`, the size and what is available, before anything
        is allocated.
        """
        self._check_open()
        if not self._outputs:
            raise ValueError("graph has no outputs")
        self._gf = lib.ggml_new_graph_custom(self.ctx, self.max_nodes, False)
        for t in self._outputs.values():
            lib.ggml_build_forward_expand(self._gf, t)
        n_nodes = lib.ggml_graph_n_nodes(self._gf)
        if n_nodes >= self.max_nodes:
            raise ValueError(f"graph has {n_nodes} nodes; raise max_nodes (now {self.max_nodes})")
        backends = self.runtime.backends
        # A closed graph's scheduler where one of a large enough budget is kept (Runtime.schedulers), else a new one
        kept = self.runtime.schedulers.take(self.max_nodes) if self.pooled else None
        if kept is not None:
            self._sched_nodes, self._sched = kept
        else:
            arr = ffi.new("ggml_backend_t[]", backends)
            sched = lib.ggml_backend_sched_new(arr, ffi.NULL, len(backends), self.max_nodes, False, True)
            if sched == ffi.NULL:
                raise RuntimeError("ggml_backend_sched_new failed")
            self._sched_nodes, self._sched = self.max_nodes, sched
        # Each measuring pass splits the graph, and ggml's split rewires every node whose source lives on another
        # backend to a copy made in the scheduler's own context (ggml_backend_sched_split_graph), which the reset
        # after the pass frees: the sources are put back after each pass, or the final split wires the nodes to
        # freed copies (on the H200: wrong products, then illegal memory accesses; a CPU-only scheduler makes no
        # copies, which is why the CPU never showed it; with one backend there is nothing to put back).
        nodes = [lib.ggml_graph_node(self._gf, i) for i in range(n_nodes)] if len(backends) > 1 else []
        sources = [tuple(node.src) for node in nodes]

        def restore_sources() -> None:
            for node, src in zip(nodes, sources):
                node.src = src

        def place_inputs() -> None:  # a reset forgets them: before each pass that splits the graph for good
            if len(backends) > 1:  # (the measurement's own reset comes first: it plans them on the host)
                for t in self._device_inputs:
                    lib.ggml_backend_sched_set_tensor_backend(self._sched, t, backends[0])

        self._check_memory(backends)
        restore_sources()
        # Reserve before allocating: it allocates the buffers that the measurement only sized (alloc_graph right
        # after a measurement would take the plan as current and write through buffers never allocated), and
        # reports a failed allocation.
        place_inputs()
        ok = lib.ggml_backend_sched_reserve(self._sched, self._gf)
        restore_sources()
        place_inputs()
        if not ok or not lib.ggml_backend_sched_alloc_graph(self._sched, self._gf):
            sched, self._sched = self._sched, None  # not kept for another graph: its buffers are in doubt
            lib.ggml_backend_sched_free(sched)
            raise MemoryError(f"could not allocate {self.what} on {self.runtime.device.spec} "
                              "(out of device memory)")

    def _check_memory(self, backends: list) -> None:
        """Measure the compute buffers the graph needs (nothing is allocated) against what each device has, less
        what the scheduler's buffers already hold (a kept scheduler's: they grow to the new size). Where that
        falls short, the runtime's other kept schedulers are freed first."""
        sizes = ffi.new("size_t[]", len(backends))
        lib.ggml_backend_sched_reserve_size(self._sched, self._gf, sizes)
        lib.ggml_backend_sched_reset(self._sched)
        for backend, size in zip(backends, sizes):
            size -= min(size, lib.ggml_backend_sched_get_buffer_size(self._sched, backend))
            free = memory.available(backend)
            if free is not None and size > free and self.runtime.schedulers.clear():
                free = memory.available(backend)
            if free is not None and size > free:
                name = ffi.string(lib.ggml_backend_name(backend)).decode()
                raise MemoryError(f"{self.what} needs {memory.describe(size)} of {name} memory for its "
                                  f"activations; {memory.describe(free)} is available")

    def buffer_size(self) -> int:
        """Bytes of compute buffer the scheduler allocated for this graph, over all of its backends."""
        if self._sched is None:
            return 0
        return self.runtime.sched_buffer_size(self._sched)

    @property
    def n_nodes(self) -> int:
        return lib.ggml_graph_n_nodes(self._gf) if self._gf is not None else 0

    # ------------------------------------------------------------------------------------------- running
    def set_input(self, name: str, array: np.ndarray) -> None:
        """Copy new data into a named input (the graph keeps its allocation)."""
        self._check_open()
        try:
            t = self._inputs[name]
        except KeyError:
            raise KeyError(f"graph has no input {name!r} (inputs: {', '.join(self._inputs)})") from None
        write_tensor(t, array, f"input {name!r}")

    def compute(self, outputs: list[str] | None = None, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Feed the given inputs, run the graph, return the named outputs (all by default) as numpy arrays."""
        self.launch(**inputs)
        self.wait()
        return self.read_outputs(outputs)

    def launch(self, **inputs: np.ndarray) -> None:
        """Feed the given inputs and start the graph run. A GPU backend returns once the work is queued, so the
        host can do other work before `wait`; the CPU backend computes here."""
        if self._sched is None:
            self.allocate()
        for name, value in inputs.items():
            self.set_input(name, value)
        status = lib.ggml_backend_sched_graph_compute_async(self._sched, self._gf)
        raise_pending()  # a Ctrl-C that landed in one of our custom ops' callbacks
        if status != lib.GGML_STATUS_SUCCESS:
            lib.ggml_backend_sched_synchronize(self._sched)
            raise RuntimeError(f"graph compute failed with ggml status {status}")
        if self.runtime.waits_per_graph:
            if self._event is None:
                self._event = lib.ggml_backend_event_new(lib.ggml_backend_get_device(self.runtime.backend))
            if self._event != ffi.NULL:
                lib.ggml_backend_event_record(self._event, self.runtime.backend)
                self._recorded = True

    def wait(self) -> None:
        """Wait for the run that `launch` started to end: only this graph's run where the runtime waits per
        graph (CUDA: its event), so that a run launched after it by another graph keeps the GPU busy meanwhile;
        elsewhere every run queued on the backends."""
        self._check_open()
        if self._recorded:
            self._recorded = False
            lib.ggml_backend_event_synchronize(self._event)
        else:
            lib.ggml_backend_sched_synchronize(self._sched)

    def read_outputs(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """The named outputs (all by default) of the last run, as numpy arrays."""
        self._check_open()
        names = names if names is not None else list(self._outputs)
        return {n: read_tensor(self._outputs[n]) for n in names}

    def tensor(self, name: str):
        """A named input or output tensor."""
        self._check_open()
        return self._inputs.get(name) or self._outputs[name]

    # ------------------------------------------------------------------------------------------- lifetime
    def _check_open(self) -> None:
        """Every tensor of the graph lives in its context: after close() they are freed memory, which a read or
        write would reach without this check (n_nodes on a closed session's graph crashed the process)."""
        if self.ctx is None:
            raise RuntimeError(f"{self.what} is closed")

    def close(self) -> None:
        # Each handle is detached before it is freed: a Ctrl-C is raised right after a C call returns, and
        # one between a free and the reset would have the next close() free it again (a segfault the batch
        # CLI's Ctrl-C test hit once in about fifty runs). The graph and the named tensors point into the
        # context: they go first.
        self._gf, self._inputs, self._outputs = None, {}, {}
        sched, self._sched = self._sched, None
        if sched is not None:
            lib.ggml_backend_sched_synchronize(sched)  # a run still queued (launch without wait) uses its buffers
            self.runtime.schedulers.give(sched, self._sched_nodes)  # kept for the next graph, or freed
        event, self._event, self._recorded = self._event, None, False
        if event is not None and event != ffi.NULL:
            lib.ggml_backend_event_free(event)
        ctx, self.ctx = self.ctx, None
        if ctx is not None:
            lib.ggml_free(ctx)

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def probe_flash_attn(runtime: Runtime, head_dim: int, kv_type: int) -> bool:
    """Whether the runtime's primary backend supports ggml_flash_attn_ext for this head size, K/V stored as
    `kv_type` and an F16 mask."""
    ctx = new_context(8)
    try:
        q = new_tensor(ctx, types.F32, (1, 4, head_dim))
        k = new_tensor(ctx, kv_type, (1, 4, head_dim))
        v = new_tensor(ctx, kv_type, (1, 4, head_dim))
        m = new_tensor(ctx, types.F16, (1, 4, 4))
        fa = lib.ggml_flash_attn_ext(ctx, q, k, v, m, 1.0, 0.0, 0.0)
        return bool(lib.ggml_backend_supports_op(runtime.backend, fa))
    finally:
        lib.ggml_free(ctx)
