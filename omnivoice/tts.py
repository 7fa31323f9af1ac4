"""`python -m omnivoice.tts`: text to speech from the command line."""

from __future__ import annotations

import argparse
import sys


def list_devices() -> int:
    from .ggml import list_devices as devices

    for d in devices():
        mem = f"{d.memory_total / 2**30:.1f} GiB" if d.memory_total else "n/a"
        print(f"{d.spec:<10} {d.kind:<5} {d.name:<12} {d.description} ({mem})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnivoice.tts", description=__doc__)
    p.add_argument("--list-devices", action="store_true", help="print the backends and devices, then exit")
    args = p.parse_args(argv)
    if args.list_devices:
        return list_devices()
    p.error("nothing to do")
    return 2


if __name__ == "__main__":
    sys.exit(main())
