"""``tfxla wrap --dir SRC --output_dir DST``: compile a SavedModel's signatures into a wrapped SavedModel."""

from __future__ import annotations

import argparse
import sys

import backends


def _jit(value: str):
    value = value.lower()
    if value in ("true", "1", "yes"):
        return True
    if value == "auto":
        return "auto"
    raise argparse.ArgumentTypeError(f"--jit_compile must be true or auto, got {value!r}")


def _tiles(value: str) -> tuple[int, ...]:
    try:
        tiles = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch_tiles must be comma-separated integers, got {value!r}") from None
    if not tiles or min(tiles) < 1:
        raise argparse.ArgumentTypeError(f"--batch_tiles must be positive integers, got {value!r}")
    return tiles


def run(args: argparse.Namespace) -> int:
    from tfxla_plugin import saved_model
    from tfxla_plugin.errors import UnsupportedGraphError

    try:
        report = saved_model.wrap(args.dir, args.output_dir, signatures=args.signature_def or None,
                                  tag_set=args.tag_set, backend=args.backend, freeze=args.freeze,
                                  jit_compile=args.jit_compile, batch_tiles=args.batch_tiles,
                                  progress=not args.quiet)
    except (OSError, ValueError, NotImplementedError, UnsupportedGraphError) as e:  # NotTileable is a ValueError
        print(f"tfxla wrap: {e}", file=sys.stderr)
        return 1
    print(report)
    if report.compiled_nothing:  # the model was written, but wrapping it gained nothing
        print(f"tfxla wrap: no signature compiled any cluster; {args.output_dir} runs entirely in TensorFlow "
              "(the reasons are above)", file=sys.stderr)
        return 2
    return 0


def register(sub) -> None:
    p = sub.add_parser("wrap", help="compile a SavedModel's signatures into a new SavedModel that runs the kernels")
    p.add_argument("--dir", required=True, help="the SavedModel to wrap")
    p.add_argument("--output_dir", required=True, help="where to save the wrapped SavedModel (new or empty)")
    p.add_argument("--signature_def", action="append", metavar="NAME",
                   help="a signature to wrap (repeatable; default: all)")
    p.add_argument("--tag_set", default="serve", help="comma-separated tags of the MetaGraph (default: serve)")
    p.add_argument("--backend", default=backends.DEFAULT, choices=backends.names(),
                   help="code generator (default: cpu; cuda: CUDA kernels, needs nvcc here and an NVIDIA GPU to run)")
    p.add_argument("--freeze", action="store_true", help="fold variables into the kernels as constants")
    p.add_argument("--jit_compile", type=_jit, default="auto",
                   help="auto: unsupported ops stay in TensorFlow (default); true: every node must compile")
    p.add_argument("--batch_tiles", type=_tiles, default=(1, 8),
                   help="batch sizes to compile kernels for when the batch dim is None (default: 1,8)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it is drawn only when stderr is a terminal anyway)")
    p.set_defaults(func=run)
