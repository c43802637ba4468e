"""``tfxla tensorboard --dir SAVEDMODEL --logdir L``: write a SavedModel's TensorBoard runs.

Runs and tags are those of ``tfxla_plugin.tensorboard`` (see ``docs/tensorboard.md``); a plain SavedModel is
compiled with auto-clustering at a concrete batch size (``--jit``: as the Grappler hook compiles it, which is
what ``tfxla serve --jit`` runs), a wrapped one is shown as loaded.
"""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from tfxla_plugin._requirements import MissingDependencyError, require_tensorboard

    try:  # before loading or compiling anything, and before the logdir is created
        require_tensorboard("this command")
    except MissingDependencyError as e:
        print(f"tfxla tensorboard: {e}; nothing was written to {args.logdir}", file=sys.stderr)
        return 1
    from tfxla_plugin.tensorboard.saved_model import SavedModelError, write_saved_model

    try:
        written = write_saved_model(args.dir, args.logdir, signature_def=args.signature_def, tag_set=args.tag_set,
                                    batch=args.batch, name=args.name, overwrite=args.overwrite, jit=args.jit)
    except (SavedModelError, FileExistsError, NotADirectoryError, LookupError) as e:
        print(f"tfxla tensorboard: {e}", file=sys.stderr)
        return 1
    for run_name, path in written.runs.items():
        print(f"wrote run {run_name}: {path}")
    print(f"view with: tensorboard --logdir {written.logdir} --host 127.0.0.1")
    return 0


def register(sub) -> None:
    p = sub.add_parser("tensorboard", help="write a SavedModel's clusters, HLO and kernels as TensorBoard runs")
    p.add_argument("--dir", required=True, help="SavedModel directory (plain or wrapped)")
    p.add_argument("--logdir", required=True, help="TensorBoard log directory to write runs into")
    p.add_argument("--signature_def", default="serving_default", help="signature to show (default serving_default)")
    p.add_argument("--tag_set", default="serve", help="comma-separated MetaGraph tags (default serve)")
    p.add_argument("--batch", type=int, default=1, help="size for unknown (None) dimensions when compiling")
    p.add_argument("--name", default=None, help="run name prefix (default: the signature name)")
    p.add_argument("--overwrite", action="store_true", help="replace event files of earlier runs of that name")
    p.add_argument("--jit", action="store_true",
                   help="a plain SavedModel as the Grappler hook compiles it (what tfxla serve --jit runs)")
    p.set_defaults(func=run)
