"""The `tfxla` command line: one entry point with subcommands (mirroring saved_model_cli's flags).

Each subcommand lives in its own module under ``tfxla_plugin/commands/``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tfxla_plugin._version import __version__
from tfxla_plugin.commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfxla",
        description="tfxla-plugin: an XLA-style JIT compiler for TensorFlow.",
    )
    parser.add_argument("--version", action="version", version=f"tfxla-plugin {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tfxla_plugin.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except ImportError as e:
        from tfxla_plugin import _requirements

        if not _requirements.is_tensorflow_missing(e):
            raise
        print(f"tfxla {args.command}: {_requirements.tensorflow_missing('this command')}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
