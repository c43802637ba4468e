"""``tfxla hlo FILE``: parse, verify, print and optionally evaluate an HLO text file."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    import numpy as np

    import hlo

    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    try:
        module = hlo.parse_module(text)
        hlo.verify(module)
    except hlo.HloError as e:
        print(f"{args.file}:{e}", file=sys.stderr)
        return 1
    print(module.to_text(print_operand_shapes=not args.short), end="")
    if args.evaluate:
        rng = np.random.default_rng(0)
        inputs = []
        for p in module.entry.parameters:
            shape = p.shape
            arr = rng.standard_normal(shape.dims) if shape.dtype.is_float else rng.integers(-5, 5, shape.dims)
            inputs.append(arr.astype(shape.dtype.numpy))
        for i, out in enumerate(hlo.evaluate(module, *inputs)):
            print(f"// result {i}: {out.dtype}{list(out.shape)}\n{out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("hlo", help="parse, verify and print an HLO text file (XLA's format)")
    p.add_argument("file", help="HLO text file, or - for stdin")
    p.add_argument("--evaluate", action="store_true", help="also evaluate it on seeded random inputs")
    p.add_argument("--short", action="store_true", help="print operands without their shapes")
    p.set_defaults(func=run)
