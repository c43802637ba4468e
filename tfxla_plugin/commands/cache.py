"""``tfxla cache info|clear``: what the kernel cache holds, and emptying it (``backends.cache_usage``).

The cache is ``--cache_dir`` when given, else ``TFXLA_FLAGS``'s ``--cache_dir``, else the default
(``$TFXLA_CACHE_DIR``, or ``~/.cache/tfxla_plugin/kernels``); the limit shown is ``--cache_max_bytes``.
"""

from __future__ import annotations

import argparse
import sys


def _root(args: argparse.Namespace):
    from backends import cache_usage
    from tfxla_plugin.flags import Flags

    flags = Flags.from_env()
    return cache_usage.cache_root(args.cache_dir or flags.cache_dir), flags


def _size(n: float) -> str:
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


def run_info(args: argparse.Namespace) -> int:
    from backends import cache_usage

    root, flags = _root(args)
    found = cache_usage.usage(root)
    limit = flags.cache_max_bytes
    print(f"location: {root}{'' if root.exists() else ' (not created yet)'}")
    print(f"entries: {len(found.entries)}")
    total = found.total_bytes
    print(f"total: {total} bytes" + (f" ({_size(total)})" if total >= 1024 else ""))
    print(f"limit: {f'{limit} bytes ({_size(limit)})' if limit > 0 else 'none'} (TFXLA_FLAGS=--cache_max_bytes)")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    from backends import cache_usage
    from backends.kernel_cache import UnsafeCacheError

    root, _ = _root(args)
    try:
        removed, skipped = cache_usage.clear(root)
    except (cache_usage.NotACacheError, UnsafeCacheError) as e:
        print(f"tfxla cache clear: {e}; nothing removed", file=sys.stderr)
        return 1
    freed = sum(e.size for e in removed)
    print(f"removed {len(removed)} entries ({_size(freed)}) from {root}")
    if skipped:
        print(f"kept {len(skipped)} entries another process is building or reading right now")
    return 0


def register(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the kernel cache")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    for name, func, text in (("info", run_info, "the cache's location, entries, total size and limit"),
                             ("clear", run_clear, "remove every entry (refuses a directory that is not a cache)")):
        q = actions.add_parser(name, help=text)
        q.add_argument("--cache_dir", default=None, help="the cache directory (default: TFXLA_FLAGS's, else the default)")
        q.set_defaults(func=func)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
