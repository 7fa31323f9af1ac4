"""`python -m omnivoice.cache`: list and clean the converted-model cache ($OMNIVOICE_CACHE, else
~/.cache/omnivoice; see omnivoice.resolve).

    python -m omnivoice.cache                 # list: entry, size, GGUF files, source checkpoint, stale or not
    python -m omnivoice.cache clean           # remove stale entries (checkpoint gone or changed since)
    python -m omnivoice.cache clean --all     # remove every entry
    python -m omnivoice.cache rm NAME ...     # remove the named entries
"""

from __future__ import annotations

import argparse
import sys

from . import cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m omnivoice.cache", epilog=cli.EXIT_STATUS_HELP,
                                description="List and clean the cache of converted checkpoints "
                                            "($OMNIVOICE_CACHE, else ~/.cache/omnivoice).")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("list", help="list the entries (the default)")
    c = sub.add_parser("clean", help="remove stale entries: their checkpoint is gone or has changed")
    c.add_argument("--all", action="store_true", help="remove every entry")
    c.add_argument("-n", "--dry-run", action="store_true", help="say what would be removed, remove nothing")
    r = sub.add_parser("rm", help="remove the named entries")
    r.add_argument("names", nargs="+", metavar="NAME")
    return p


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _body(args: argparse.Namespace) -> int:
    from .resolve import cache_dir, list_cache, remove_cache_entry

    entries = list_cache()
    if args.command in (None, "list"):
        print(f"{cache_dir()}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
              f"{_size(sum(e.size for e in entries))}")
        for e in entries:
            state = "stale" if e.stale else "current"
            print(f"  {e.name}  {_size(e.size)}  {state}  {', '.join(e.files) or '(no GGUF)'}"
                  f"  <- {e.checkpoint or 'unknown checkpoint'}")
        return cli.EXIT_OK
    if args.command == "rm":
        by_name = {e.name: e for e in entries}
        unknown = [n for n in args.names if n not in by_name]
        if unknown:
            raise ValueError(f"no cache entry named {', '.join(unknown)} in {cache_dir()} "
                             f"(python -m omnivoice.cache lists them)")
        chosen = [by_name[n] for n in args.names]
        dry = False
    else:
        chosen = [e for e in entries if args.all or e.stale]
        dry = args.dry_run
    for e in chosen:
        if not dry:
            remove_cache_entry(e)
        print(f"{'would remove' if dry else 'removed'} {e.name} ({_size(e.size)})")
    freed = sum(e.size for e in chosen)
    print(f"{len(chosen)} entr{'y' if len(chosen) == 1 else 'ies'}, {_size(freed)} "
          f"{'would be freed' if dry else 'freed'}")
    return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (see omnivoice.cli)."""
    args = build_parser().parse_args(argv)
    return cli.run(lambda: _body(args))


if __name__ == "__main__":
    sys.exit(main())
