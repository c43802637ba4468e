"""``python -m saved_models [--out DIR] [NAME ...] [--style saved_model|export|both] [--rebuild] [--option K=V]``:
build the sample SavedModels (all by default, both styles by default) and print their directories."""

from __future__ import annotations

import argparse
import sys

from tfxla_plugin.commands.models import add_build_arguments, run_build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saved_models", description=__doc__.split(":", 1)[1].strip())
    add_build_arguments(parser)
    return run_build(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
