"""How much memory a backend can still give: what a graph's measured plan is checked against before allocating.

ggml's own figure for the CPU is the machine's whole physical memory ("free system memory is ill-defined"), so
for host memory this module asks the operating system: the kernel's MemAvailable, the cgroup's limit less its
usage, and the address space left under RLIMIT_AS, whichever is smallest. GPU devices report their free memory
through ggml_backend_dev_memory.
"""

from __future__ import annotations

from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no RLIMIT_AS
    resource = None

from ._ffi import ffi, lib


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _vm_size() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_available() -> int | None:
    """Bytes this process can still allocate in host memory, or None where the system does not say."""
    limits = []
    available = _meminfo("MemAvailable")
    if available is not None:
        limits.append(available)
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            limits.append(max(0, limit - usage))
    if resource is not None:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        vm = _vm_size()
        if soft != resource.RLIM_INFINITY and vm is not None:
            limits.append(max(0, soft - vm))
    return min(limits) if limits else None


def available(backend) -> int | None:
    """Bytes the device of a ggml backend can still give a buffer, or None when unknown."""
    dev = lib.ggml_backend_get_device(backend)
    if dev == ffi.NULL:
        return None
    if lib.ggml_backend_dev_type(dev) == lib.GGML_BACKEND_DEVICE_TYPE_CPU:
        return host_available()
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(dev, free, total)
    return int(free[0]) if total[0] else None


def describe(n_bytes: int) -> str:
    """A byte count for messages: 512 MiB, 3.1 GiB."""
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.0f} MiB"
