"""Check omnivoice.generate's Philox, logf and Gumbel noise against PyTorch on a real NVIDIA GPU.

Run on a machine with an NVIDIA GPU (written for an H200), torch with CUDA, and numpy:

    python3 tools/reference/philox_cuda_check.py [--device 0] [--seeds 0 42 ...] [--exhaustive-log]
    python3 tools/reference/philox_cuda_check.py --write-golden tests/golden/generate_cuda.npz   # regenerate

For each seed it calls ``torch.cuda.manual_seed(seed)`` and makes successive ``torch.rand`` /
``torch.rand_like`` draws on the GPU: the position-noise sizes 8*T for T in {1, 7, 125, 1000,
5000}, the class-noise sizes 8*T*1025 (beyond one grid pass they use all four words of each
Philox block), sizes at the grid boundary, and a MaskGIT-like sequence over two chunks. Our
``CudaPhiloxGenerator`` (built with the device's multiprocessor count and threads per
multiprocessor) must give the same float32 values bit for bit and the same generator offset
after every draw (read from ``torch.cuda.get_rng_state()``). Then, bit for bit: ``torch.log``
against our CUDA ``logf`` (a 16M sample, or every float32 in [1e-10, 32] with
``--exhaustive-log``), the Gumbel noise ``-log(-log(u + 1e-10) + 1e-10)``, division by a Python
float, and the reference's class sampling (top 10 %, Gumbel, argmax) against ours.

``--write-golden PATH`` also records a small sample of these GPU results (rand draws with their
offsets, hard logf cases, Gumbel noise) for tests/generate/test_cuda_golden.py, which checks them
in CI without a GPU.

Prints a PASS/FAIL table; exit status 0 when everything passes, 1 on a mismatch, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _load_generate():
    """omnivoice.generate, or the same folder loaded standalone if the package cannot import here."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    try:
        import omnivoice.generate as gen  # noqa: PLC0415

        return gen
    except Exception as exc:  # the package root may need a built ggml library
        print(f"(importing omnivoice.generate failed: {exc!r}; loading the folder standalone)")
        folder = os.path.join(REPO, "omnivoice", "generate")
        spec = importlib.util.spec_from_file_location(
            "_ov_generate", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_ov_generate"] = mod
        spec.loader.exec_module(mod)
        return mod


def _bits_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    return a.view(np.uint32) != b.view(np.uint32)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.rows.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'}  {name:<48} {detail}", flush=True)

    @property
    def failed(self) -> int:
        return sum(1 for _, ok, _ in self.rows if not ok)


def _torch_offset(torch, device) -> int:
    state = torch.cuda.get_rng_state(device).numpy()
    # CUDA generator state: seed (uint64) then philox offset (uint64), little endian.
    return int(state[8:16].view(np.uint64)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 42, 1234, 2**40 + 7, 2**64 - 1])
    parser.add_argument("--exhaustive-log", action="store_true", help="compare logf on every float32 in [1e-10, 32]")
    parser.add_argument("--write-golden", metavar="PATH", help="write the small golden file for CI tests")
    args = parser.parse_args()

    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        print("CUDA is not available: this check needs an NVIDIA GPU")
        return 2
    gen_mod = _load_generate()
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    num_sms = props.multi_processor_count
    threads_per_sm = getattr(props, "max_threads_per_multi_processor", None)
    if threads_per_sm is None:
        threads_per_sm = 2048
        print("(torch does not report max_threads_per_multi_processor; assuming 2048)")
    print(f"device: {props.name}, {num_sms} SMs, {threads_per_sm} threads/SM; torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}")
    if (num_sms, threads_per_sm) != (132, 2048):
        print("note: not the H200 defaults (132, 2048); the generator is built with this device's values")

    table = Table()
    golden: dict[str, np.ndarray] = {}
    pick = np.random.default_rng(12345)

    def new_gen(seed):
        return gen_mod.CudaPhiloxGenerator(seed, num_sms=num_sms, max_threads_per_sm=threads_per_sm)

    # 1. Successive draws of many sizes, per seed.
    sizes = [8 * t for t in (1, 7, 125, 1000, 5000)] + [8 * t * 1025 for t in (1, 40, 375)] + [3, 270_336, 270_337]
    golden_seeds = (42, 2**40 + 7)
    for seed in args.seeds:
        torch.cuda.manual_seed(seed)
        ours = new_gen(seed)
        for i, n in enumerate(sizes):
            theirs = torch.rand(n, device=device).cpu().numpy()
            mine = ours.rand(n)
            off_t, off_o = _torch_offset(torch, device), ours.offset
            bad = int(_bits_differ(theirs, mine).sum())
            table.add(f"rand seed={seed} n={n}", bad == 0 and off_t == off_o,
                      f"mismatches {bad}/{n}, offset torch {off_t} ours {off_o}")
            if seed in golden_seeds:
                idx = np.unique(np.concatenate([np.arange(min(n, 64)), np.arange(max(0, n - 64), n),
                                                pick.integers(0, n, size=min(n, 256))]))
                key = f"rand_{seed}_{i}"
                golden[key + "__n"] = np.array(n, dtype=np.int64)
                golden[key + "__idx"] = idx.astype(np.int64)
                golden[key + "__val"] = theirs[idx]
                golden[key + "__offset"] = np.array(off_t, dtype=np.uint64)

    # 2. A MaskGIT-like sequence through rand_like of shaped tensors (two chunks, one stream).
    seed = 20240607
    torch.cuda.manual_seed(seed)
    ours = new_gen(seed)
    ok_all, detail = True, ""
    for T in (37, 151):
        for step in range(4):
            for shape in ((1, 8, T, 1025), (1, 8, T)):
                x = torch.empty(shape, device=device)
                theirs = torch.rand_like(x).cpu().numpy()
                mine = ours.rand_like(shape)
                ok = not _bits_differ(theirs, mine).any() and _torch_offset(torch, device) == ours.offset
                if not ok and ok_all:
                    detail = f"first mismatch T={T} step={step} shape={shape}"
                ok_all &= ok
    table.add("rand_like MaskGIT sequence (2 chunks)", ok_all, detail or f"offset {ours.offset}")

    # 3. logf, bit for bit.
    lo, hi = np.float32(1e-10).view(np.uint32), np.float32(32.0).view(np.uint32)
    if args.exhaustive_log:
        starts = range(int(lo), int(hi) + 1, 2**24)
        chunks = [np.arange(s, min(s + 2**24, int(hi) + 1), dtype=np.uint32) for s in starts]
        label = f"every float32 in [1e-10, 32] ({int(hi) - int(lo) + 1})"
    else:
        chunks = [pick.integers(int(lo), int(hi) + 1, size=2**24, dtype=np.uint64).astype(np.uint32)]
        label = "16M random float32 in [1e-10, 32]"
    bad, total, hard_x, hard_y, rand_x, rand_y = 0, 0, [], [], [], []
    for bits in chunks:
        x = bits.view(np.float32)
        y_t = torch.log(torch.from_numpy(x).to(device)).cpu().numpy()
        diff = _bits_differ(y_t, gen_mod.logf(x))
        bad += int(diff.sum())
        total += x.size
        if len(hard_x) < 4:  # inputs where CUDA's logf is not the correctly rounded log
            cr = np.log(x.astype(np.float64)).astype(np.float32)
            hard = np.flatnonzero(_bits_differ(cr, y_t))[:1024]
            hard_x.append(x[hard])
            hard_y.append(y_t[hard])
        if not rand_x:
            sel = pick.integers(0, x.size, size=2048)
            rand_x.append(x[sel])
            rand_y.append(y_t[sel])
    table.add("logf == torch.log (CUDA)", bad == 0, f"{label}: {bad} differ")
    golden["logf__x"] = np.concatenate(hard_x[:2] + rand_x)
    golden["logf__y"] = np.concatenate(hard_y[:2] + rand_y)

    # 4. Gumbel noise, division by a Python float, class sampling: bit for bit.
    torch.cuda.manual_seed(7)
    u_t = torch.rand(4_000_000, device=device)
    u = u_t.cpu().numpy()
    g_t = (-torch.log(-torch.log(u_t + 1e-10) + 1e-10)).cpu().numpy()
    bad = int(_bits_differ(g_t, gen_mod.gumbel_noise(u)).sum())
    table.add("gumbel noise -log(-log(u+1e-10)+1e-10)", bad == 0, f"{bad}/{u.size} differ")
    sel = pick.integers(0, u.size, size=2048)
    golden["gumbel__u"], golden["gumbel__g"] = u[sel], g_t[sel]

    x_t = torch.randn(1_000_000, device=device) * 10
    x = x_t.cpu().numpy()
    for temp in (5.0, 0.7, 1.3, 3.0, 1.0):
        bad = int(_bits_differ((x_t / temp).cpu().numpy(), x * np.float32(1.0 / temp)).sum())
        table.add(f"x / {temp} == x * float32(1/{temp})", bad == 0, f"{bad}/{x.size} differ")

    # The reference's class sampling (_filter_top_k, _gumbel_sample, argmax), verbatim in torch.
    T, V = 50, 1025
    logits = torch.randn(1, 8, T, V, device=device) * 3
    lp_t = torch.log_softmax(logits, dim=-1)
    lp_t[..., 1024] = -float("inf")
    k = int(np.ceil(0.1 * V))
    val, ind = lp_t.topk(k, dim=-1)
    filtered = torch.full_like(lp_t, float("-inf")).scatter_(-1, ind, val)
    torch.cuda.manual_seed(99)
    scaled = filtered / 0.8
    sample_t = (scaled + (-torch.log(-torch.log(torch.rand_like(scaled) + 1e-10) + 1e-10)))[0].cpu().numpy()
    lp = lp_t[0].cpu().numpy()
    sample_o = gen_mod.gumbel_sample(gen_mod.filter_top_k(lp), 0.8, new_gen(99))
    pred_o = gen_mod.sample_classes(lp, 0.8, new_gen(99))
    bad = int(_bits_differ(sample_t, sample_o).sum())
    same = float(np.mean(sample_t.argmax(-1) == pred_o))
    table.add("class sample (top 10 %, Gumbel, argmax)", bad == 0 and same == 1.0,
              f"perturbed logits: {bad} differ; same class {same * 100:.3f} %")

    print()
    print(f"{len(table.rows) - table.failed} passed, {table.failed} failed")
    if args.write_golden:
        golden["meta_json"] = np.array(json.dumps({
            "device": props.name, "num_sms": num_sms, "max_threads_per_sm": threads_per_sm,
            "torch": torch.__version__, "cuda": torch.version.cuda, "golden_seeds": list(golden_seeds),
            "command": "python3 tools/reference/philox_cuda_check.py --write-golden tests/golden/generate_cuda.npz",
        }))
        np.savez_compressed(args.write_golden, **golden)
        print(f"wrote {args.write_golden} ({os.path.getsize(args.write_golden)} bytes)")
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
