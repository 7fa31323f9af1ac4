"""Backends by name: which devices this install can use, and the backend set a model runs on.

A backend spec is `auto`, `cpu`, `cuda`, `vulkan`, `metal` (any registered ggml backend name, case-insensitive),
optionally with a device index: `cuda:1`. `auto` takes the first GPU device and falls back to the CPU.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from ..config import current
from ._ffi import LIB_DIR, ffi, lib
from .threads import resolve_threads

log = logging.getLogger("omnivoice.ggml")
_loaded = False

# ggml-vulkan rounds float32 products to float16 unless told otherwise when it creates the device (read in its
# ggml_vk_get_device, once per process): with fp16 arithmetic its tiled matrix shaders hold both operand tiles as
# float16 (FLOAT_TYPE) even for F32 x F32, and its cooperative-matrix paths (KHR coopmat, NV coopmat2, on by
# default on NVIDIA) convert F32 operands to F16 first. ggml_prec_set_acc (ggml_mul_mat_set_prec) picks only
# the accumulator and cannot undo either. With all three switches set it runs its float32 shaders: the matrix
# products, flash attention's scalar kernels (with F32 K/V) and the convolutions' im2col products.
VULKAN_F32_ENV = ("GGML_VK_DISABLE_F16", "GGML_VK_DISABLE_COOPMAT", "GGML_VK_DISABLE_COOPMAT2")
_vulkan_exact: bool | None = None  # how this process created its Vulkan device; None: not yet


def exact_f32_default() -> bool:
    """OMNIVOICE_EXACT_F32=1 asks every runtime for float32 arithmetic where a backend would round it."""
    return current().exact_f32


def _vulkan_mode(exact: bool) -> bool:
    """Set ggml-vulkan's float32 switches before its device is created; the mode the process ends up in."""
    global _vulkan_exact
    if _vulkan_exact is None:
        if exact:
            for name in VULKAN_F32_ENV:
                os.environ[name] = "1"
        _vulkan_exact = all(os.environ.get(name) for name in VULKAN_F32_ENV)
    elif exact and not _vulkan_exact:
        log.warning("the Vulkan device of this process was created with its F16 shaders; exact_f32 cannot change "
                    "that now (set OMNIVOICE_EXACT_F32=1 before the first Vulkan runtime)")
    return _vulkan_exact


def vulkan_arithmetic() -> str:
    """What a Vulkan device of this process computes float32 products in, for listings: "F32" or "F16" once the
    first Vulkan runtime fixed it (or where the environment already asks for float32), else the rule that runtime
    will follow: F16, but F32 for F32 weights (OmniVoice) or with OMNIVOICE_EXACT_F32=1."""
    if _vulkan_exact is not None:
        return "F32" if _vulkan_exact else "F16"
    if exact_f32_default() or all(os.environ.get(name) for name in VULKAN_F32_ENV):
        return "F32"
    return "F16 (F32 for F32 weights)"


def load_backends() -> None:
    """Load every backend module shipped with this install (once per process)."""
    global _loaded
    if not _loaded:
        # ggml's GGML_CUDA_GRAPH_OPT=1 (independent branches of a captured graph on concurrent streams) makes
        # LM steps 3-10 % faster on an H200 but stays the user's choice: in one of five CUDA test runs with it
        # the parity tests got wrong tokens, in none without it (BENCHMARKS.md, docs/GPU.md).
        lib.ggml_backend_load_all_from_path(str(LIB_DIR).encode())
        _loaded = True
        if lib.ggml_backend_dev_count() == 0:
            raise RuntimeError(f"no ggml backend could be loaded from {LIB_DIR}")


@dataclass(frozen=True)
class Device:
    """One device of one backend: `backend` is the registry name (CPU, CUDA, Vulkan, Metal)."""

    backend: str
    index: int
    name: str
    description: str
    kind: str  # cpu, gpu, igpu, accel
    memory_free: int
    memory_total: int

    @property
    def spec(self) -> str:
        """The backend spec that selects this device, e.g. `cuda:0`."""
        return f"{self.backend.lower()}:{self.index}"


_KINDS = {lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu", lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
          lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu", lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel"}


def _devices_raw() -> list[tuple[Device, object]]:
    load_backends()
    out = []
    per_backend: dict[str, int] = {}
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        reg = ffi.string(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))).decode()
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(dev, free, total)
        idx = per_backend.get(reg, 0)
        per_backend[reg] = idx + 1
        out.append((Device(backend=reg, index=idx,
                           name=ffi.string(lib.ggml_backend_dev_name(dev)).decode(),
                           description=ffi.string(lib.ggml_backend_dev_description(dev)).decode(),
                           kind=_KINDS.get(lib.ggml_backend_dev_type(dev), "other"),
                           memory_free=free[0], memory_total=total[0]), dev))
    return out


def list_devices() -> list[Device]:
    """Every device of every backend this install can use, CPU included."""
    return [d for d, _ in _devices_raw()]


def parse_spec(spec: str) -> tuple[str, int | None]:
    """Split `name[:index]` into a lower-case backend name and an optional index."""
    name, _, index = spec.strip().partition(":")
    if not name:
        raise ValueError(f"empty backend name in {spec!r}; expected auto, cpu, cuda, vulkan or metal")
    if index and not index.isdigit():
        raise ValueError(f"bad device index in backend spec {spec!r}: expected NAME or NAME:INDEX")
    return name.lower(), int(index) if index else None


def find_device(spec: str) -> tuple[Device, object]:
    """Resolve a backend spec to a device (and its ggml handle); clear error when it is not available."""
    name, index = parse_spec(spec)
    devices = _devices_raw()
    if name == "auto":
        gpus = [d for d in devices if d[0].kind in ("gpu", "igpu")]
        if index is not None:
            gpus = gpus[index:index + 1]
        chosen = gpus[0] if gpus else next(d for d in devices if d[0].kind == "cpu")
        return chosen
    matches = [d for d in devices if d[0].backend.lower() == name]
    if not matches:
        names = sorted({d.backend.lower() for d, _ in devices})
        raise ValueError(f"backend {name!r} is not available in this install (available: {', '.join(names)}); "
                         f"GPU backends are built with CMAKE_ARGS, see README")
    index = index or 0
    if index >= len(matches):
        raise ValueError(f"backend {name} has {len(matches)} device(s); index {index} does not exist")
    return matches[index]


# What our ggml patches add, as the built library says it has them. Each patch that a graph counts on lists a
# feature of this name in its backend's ggml_backend_get_features (vendor/ggml/patches: one line beside the
# kernel's change), so the question is asked of the library that was loaded, never of patch file names: a build
# from renumbered or squashed patches keeps its features, one without a patch lacks it (Runtime.has).
FUSED_CASTS = "omnivoice_fused_casts"                # RMSNorm x weight and SwiGLU written as the cast after them
FATTN_TYPED_OUT = "omnivoice_fattn_typed_out"        # short-sequence attention written as its product's input
FATTN_MASK_ROW = "omnivoice_fattn_mask_row"          # flash attention's op_params[5] = 1: one mask row a sequence
GUIDED_PICK = "omnivoice_guided_pick"                # guidance and the greedy pick as one kernel
QKV_ROPE_BY_POSITION = "omnivoice_qkv_rope_by_position"  # q/k norm + RoPE and V's rows a position a block
EMBED_SUM = "omnivoice_embed_sum"                    # the LM's input embedding as one kernel
MASKGIT_STEP = "ggml_backend_cuda_maskgit_step"      # the device MaskGIT step: a function the registry exports


def registry_features(reg) -> dict[str, str]:
    """The features a backend registry lists (ggml_backend_get_features, found through its proc address):
    ggml's own (the CPU's AVX2, F16C, ...; CUDA's ARCHS, USE_GRAPHS, ...) and our patches' (omnivoice_*), name ->
    value; {} for a registry that lists none."""
    fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
    if fn == ffi.NULL:
        return {}
    feats = ffi.cast("ggml_backend_get_features_t", fn)(reg)
    out = {}
    i = 0
    while feats[i].name != ffi.NULL:
        out[ffi.string(feats[i].name).decode()] = ffi.string(feats[i].value).decode()
        i += 1
    return out


def registry_has(reg, capability: str) -> bool:
    """Whether a backend registry has `capability`: a feature it lists with a value other than "0" or "", or a
    function it exports by that name (ggml_backend_reg_get_proc_address)."""
    if registry_features(reg).get(capability, "0") not in ("0", ""):
        return True
    return lib.ggml_backend_reg_get_proc_address(reg, capability.encode()) != ffi.NULL


def cpu_features() -> frozenset[str]:
    """The SIMD features that this build's CPU kernels use (ggml's own names: AVX2, F16C, FMA, AVX512,
    AVX512_BF16, AVX512_VNNI, AMX_INT8, NEON, FP16_VA, MATMUL_INT8, SVE, ...): a source build's CPU backend is
    compiled for the machine it was built on, so these are that CPU's; a wheel's is the module of the highest x86
    level this CPU runs (GGML_CPU_ALL_VARIANTS), and these are that level's."""
    load_backends()
    reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
    return frozenset(name for name, value in registry_features(reg).items() if value not in ("0", ""))


class SchedulerPool:
    """Backend schedulers of closed graphs, kept for the runtime's next graphs (Graph.allocate and close).

    A scheduler is sized for a node budget (its split context alone is 6.7 KB a node) and holds its graph's
    compute buffers. The serving engine builds an LM graph whenever its batch changes: making and freeing a
    scheduler, and its buffers' allocation and release, were a sixth of such a build; kept, with the padded rows
    zeroed on the device (weights.Zeros), the build is that much shorter (tools/op_profile.py build,
    BENCHMARKS.md). A kept
    scheduler is reset and takes the next graph of at most its budget; its buffers grow where that graph needs more.
    `max_kept` 0 keeps none (Runtime's default on the CPU); the kept ones' buffers (`size_of` a scheduler) hold
    at most `max_bytes` together, so that memory a graph's run allocates as it goes (ggml's CUDA pool, cuBLAS)
    is not taken from it (Runtime: a sixteenth of the device's). Thread-safe; `clear` frees every kept one
    (before the backends go, and when memory runs short)."""

    def __init__(self, max_kept: int = 2, max_bytes: int = 0, size_of=lambda sched: 0) -> None:
        self.max_kept, self.max_bytes, self.size_of = max_kept, max_bytes, size_of
        self._lock = threading.Lock()
        self._kept: list[tuple[int, object, int]] = []  # (node budget, scheduler, buffer bytes), oldest first
        self.closed = False

    def take(self, max_nodes: int) -> tuple[int, object] | None:
        """(node budget, scheduler): a kept scheduler for a graph of at most `max_nodes` nodes (the smallest
        budget that fits), or None."""
        with self._lock:
            fits = [i for i, (n, _, _) in enumerate(self._kept) if n >= max_nodes]
            if not fits:
                return None
            return self._kept.pop(min(fits, key=lambda i: self._kept[i][0]))[:2]

    def give(self, sched, max_nodes: int) -> None:
        """Keep a scheduler of this node budget whose graph is done (its runs waited for), the oldest freed past
        `max_kept` or `max_bytes`; one whose buffers alone are over `max_bytes` is freed."""
        with self._lock:
            if self.closed or not self.max_kept or (nbytes := self.size_of(sched)) > self.max_bytes:
                lib.ggml_backend_sched_free(sched)
                return
            lib.ggml_backend_sched_set_eval_callback(sched, ffi.NULL, ffi.NULL)  # a profiler's (tools/op_profile)
            lib.ggml_backend_sched_reset(sched)
            self._kept.append((max_nodes, sched, nbytes))
            while len(self._kept) > self.max_kept or sum(k[2] for k in self._kept) > self.max_bytes:
                lib.ggml_backend_sched_free(self._kept.pop(0)[1])

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self, close: bool = False) -> int:
        """Free every kept scheduler (and, with `close`, every one given from now on); returns how many."""
        with self._lock:
            self.closed = self.closed or close
            kept, self._kept = self._kept, []
            n = len(kept)
            while kept:  # detached first: see Graph.close
                lib.ggml_backend_sched_free(kept.pop()[1])
            return n


class Runtime:
    """The backends one model runs on: the chosen device plus the CPU as the scheduler's fallback.

    Owns the ggml backend handles and the schedulers its closed graphs left (`schedulers`); `close()` (or the
    context manager) frees them.
    """

    def __init__(self, spec: str = "auto", n_threads: int | None = None, exact_f32: bool | None = None) -> None:
        """`exact_f32` (default: OMNIVOICE_EXACT_F32) asks for float32 arithmetic where the backend would round
        it: Vulkan then runs its float32 shaders (process-wide, fixed by the first Vulkan runtime; see
        VULKAN_F32_ENV) and models keep flash attention's K/V in F32 (or use the plain path where the backend
        has no F32 flash kernel). CUDA's TF32 is switched off by NVIDIA_TF32_OVERRIDE=0 in the environment."""
        self.device, dev = find_device(spec)
        self._dev = dev
        self._capabilities: dict[str, bool] = {}  # Runtime.has's answers
        self.n_threads = resolve_threads(n_threads)
        self.exact_f32 = exact_f32_default() if exact_f32 is None else bool(exact_f32)
        if self.device.backend.lower() == "vulkan":
            self.exact_f32 = _vulkan_mode(self.exact_f32)
        self._backends = []
        # Schedulers kept on GPUs only: a CPU graph's compute buffer is host memory that a kept scheduler would
        # hold (the codec encoder's for a long clip is GBs), and the CPU's steps dwarf the build it saves.
        self.schedulers = SchedulerPool(
            max_kept=2 if self.device.kind != "cpu" else 0, max_bytes=self.device.memory_total // 16,
            size_of=self.sched_buffer_size)
        self._init(dev)
        if self.device.kind != "cpu":
            _, cpu_dev = find_device("cpu")
            self._init(cpu_dev)

    def _init(self, dev) -> object:
        backend = lib.ggml_backend_dev_init(dev, ffi.NULL)
        if backend == ffi.NULL:
            raise RuntimeError(f"could not initialise ggml device {ffi.string(lib.ggml_backend_dev_name(dev))!r}")
        reg = lib.ggml_backend_dev_backend_reg(dev)
        set_threads = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
        if set_threads != ffi.NULL:
            ffi.cast("ggml_backend_set_n_threads_t", set_threads)(backend, self.n_threads)
        self._backends.append(backend)
        return backend

    @property
    def backends(self) -> list:
        """Primary first, CPU last: the order the scheduler wants."""
        if not self._backends:
            # freed handles would crash ggml, and a scheduler of no backend aborts it
            raise RuntimeError(f"the runtime on {self.device.spec} is closed")
        return list(self._backends)

    @property
    def backend(self):
        """The primary backend's handle."""
        return self.backends[0]

    @property
    def cpu(self):
        """The CPU backend's handle (the primary one on a CPU runtime)."""
        return self.backends[-1]

    def has(self, capability: str) -> bool:
        """Whether the primary device's backend has `capability` (FUSED_CASTS, GUIDED_PICK, ...): a feature its
        registry lists, or a function it exports by that name (registry_has). Asked once per name."""
        if capability not in self._capabilities:
            self._capabilities[capability] = registry_has(lib.ggml_backend_dev_backend_reg(self._dev), capability)
        return self._capabilities[capability]

    def proc(self, name: str, ctype: str):
        """The function the primary device's backend registry exports as `name` (ggml_backend_reg_get_proc_address),
        cast to the cffi type `ctype`; None where it exports none (another backend, or a build without the patch)."""
        reg = lib.ggml_backend_dev_backend_reg(self._dev)
        fn = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
        return None if fn == ffi.NULL else ffi.cast(ctype, fn)

    @property
    def arithmetic(self) -> str | None:
        """What this runtime's float32 products are computed in where the backend chooses: "F32" or "F16" on
        Vulkan (its float32 or float16 shaders, see exact_f32); None elsewhere."""
        if self.device.backend.lower() == "vulkan":
            return "F32" if self.exact_f32 else "F16"
        return None

    @property
    def label(self) -> str:
        """The device as load lines name it: `vulkan:0 (NVIDIA H200, F32 arithmetic)`."""
        arithmetic = f", {self.arithmetic} arithmetic" if self.arithmetic else ""
        return f"{self.device.spec} ({self.device.description}{arithmetic})"

    @property
    def is_gpu(self) -> bool:
        return self.device.kind != "cpu"

    @property
    def waits_per_graph(self) -> bool:
        """Whether a graph's run can be waited for alone while another graph's run queued after it goes on
        (Graph.wait through a completion event): CUDA's events are a plain cudaEventRecord on the backend's
        stream. Vulkan's events submit pending work and change its command-buffer state, a path no test of ours
        has run, so there (and on the CPU, which computes at launch) a wait covers every queued run."""
        return self.device.backend.lower() == "cuda"

    @property
    def products_need_contiguous(self) -> bool:
        """Whether graphs should copy a strided F32 operand of a matrix product into a contiguous tensor first:
        ggml-vulkan converts an operand that is not contiguous in its first two dimensions to F16 before the
        product (ggml_vk_mul_mat_q_f16), whatever its float32 switches say; the other backends multiply it in
        F32 in place. Measured on lavapipe: K.Q of permuted F32 views 3e-4 relative error, 1.3e-7 contiguous."""
        return self.device.backend.lower() == "vulkan"

    def supports_flash_attn(self, head_dim: int = 128, kv_type: int | None = None) -> bool:
        """Whether the primary backend runs ggml_flash_attn_ext for this head size on K/V stored and attended as
        `kv_type` (default F16), probed once per combination. F32 K/V on CUDA count as unsupported: ggml-cuda
        accepts them but converts them to F16 before attending (fattn-common.cuh, need_f16_K/V), which on the
        H200 gave 7e-4 relative error in tests/nn and 99.8 % teacher-forced agreement at full size where F32
        means 100 %; the CPU and Vulkan kernels attend F32 K/V in F32."""
        from . import types
        from .graph import probe_flash_attn

        kv_type = types.F16 if kv_type is None else kv_type
        if kv_type == types.F32 and self.device.backend.lower() == "cuda":
            return False
        cache = self.__dict__.setdefault("_fa", {})
        if (head_dim, kv_type) not in cache:
            cache[(head_dim, kv_type)] = probe_flash_attn(self, head_dim, kv_type)
        return cache[(head_dim, kv_type)]

    @property
    def extra_buffer_types(self) -> dict:
        """The CPU backend's extra buffer types by name ("CPU_REPACK"; "AMX" in builds for CPUs with AMX); empty
        on GPU runtimes. Matrices stored in one are rearranged once, at upload, into the layout of that buffer's
        product kernels; such tensors live in anonymous memory and cannot be read back."""
        if "_extra_bufts" not in self.__dict__:
            self._extra_bufts = {}
            if self.device.kind == "cpu":
                reg = lib.ggml_backend_dev_backend_reg(self._dev)
                fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
                get = ffi.cast("ggml_backend_dev_get_extra_bufts_t", fn) if fn != ffi.NULL else None
                bufts = get(self._dev) if get is not None else ffi.NULL
                i = 0
                while bufts != ffi.NULL and bufts[i] != ffi.NULL:
                    self._extra_bufts[ffi.string(lib.ggml_backend_buft_name(bufts[i])).decode()] = bufts[i]
                    i += 1
        return self._extra_bufts

    # Types whose products the AMX buffer runs faster than both the plain and the CPU_REPACK layouts, measured on
    # an Emerald Rapids Xeon (tools/matmul_bench.py --repack): Q8_0 (faster than F32 there, the plain layout
    # slower) and Q4_K. Its F16 path was slower than the plain one; the other K-quants were not measured.
    AMX_TYPES = ("Q8_0", "Q4_K")

    def weight_buffer(self, ggml_type: int, ne: list[int]) -> str | None:
        """The extra buffer type a weight matrix of this type and shape (ggml order) should live in for faster
        products here: "AMX" for AMX_TYPES where the device has a kernel for it, else "CPU_REPACK" where ggml
        has a repacked kernel, else None (the plain layout): multiplies_in, cached."""
        if len(ne) != 2 or not self.extra_buffer_types:
            return None
        key = (int(ggml_type), int(ne[0]), int(ne[1]))
        cache = self.__dict__.setdefault("_weight_buffer", {})
        if key not in cache:
            cache[key] = None
            amx = ffi.string(lib.ggml_type_name(ggml_type)).decode().upper() in self.AMX_TYPES
            for name in (["AMX"] if amx else []) + ["CPU_REPACK"]:
                if self.multiplies_in(name, ggml_type, ne):
                    cache[key] = name
                    break
        return cache[key]

    def repacks(self, ggml_type: int, ne: list[int]) -> bool:
        """Whether a weight matrix of this type and shape gets another layout's product kernel here
        (weight_buffer)."""
        return self.weight_buffer(ggml_type, ne) is not None

    def multiplies_in(self, buffer_type: str, ggml_type: int, ne: list[int]) -> bool:
        """Whether the CPU device multiplies by a weight matrix of this type and shape (ggml order) living in the
        extra buffer type named `buffer_type`: asked about a product with the weight labelled by a zero-sized
        buffer of that type."""
        buft = self.extra_buffer_types.get(buffer_type)
        if buft is None or len(ne) != 2:
            return False
        params = ffi.new("struct ggml_init_params *", {"mem_size": 3 * lib.ggml_tensor_overhead(),
                                                       "mem_buffer": ffi.NULL, "no_alloc": True})
        ctx = lib.ggml_init(params[0])
        label = lib.ggml_backend_buft_alloc_buffer(buft, 0)  # zero-sized: only says where w would live
        try:
            w = lib.ggml_new_tensor_2d(ctx, ggml_type, ne[0], ne[1])
            w.buffer = label
            x = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, ne[0], 1)
            return bool(lib.ggml_backend_dev_supports_op(self._dev, lib.ggml_mul_mat(ctx, w, x)))
        finally:
            lib.ggml_backend_buffer_free(label)
            lib.ggml_free(ctx)

    def sched_buffer_size(self, sched) -> int:
        """Bytes of compute buffer that a scheduler of this runtime holds, over all of its backends."""
        return sum(int(lib.ggml_backend_sched_get_buffer_size(sched, b)) for b in self.backends)

    def close(self) -> None:
        self.schedulers.clear(close=True)  # they point at the backends
        backends, self._backends = self._backends, []  # detached first: see Graph.close
        while backends:
            lib.ggml_backend_free(backends.pop())

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        exact = ", exact_f32" if self.exact_f32 else ""
        return f"Runtime({self.device.spec}: {self.device.description}, threads={self.n_threads}{exact})"
