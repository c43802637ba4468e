"""Shared helpers for the fusion pass tests: reducer computations, random inputs, and ``fuse``, which
runs the pass and checks verification, exact evaluator agreement and the CPU backend's numbers."""

from __future__ import annotations

import numpy as np

import backends.cpu as cpu
import hlo
from hlo.opcodes import Opcode
from hlo.passes.fusion import FusionOptions, FusionPass

ADD = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
"""
MAX = """
%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}
"""
MIN = """
%min (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] minimum(f32[] %a, f32[] %b)
}
"""
LESS = """
%less (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %lt = pred[] compare(f32[] %a, f32[] %b), direction=LT
}
"""


def random_args(module: hlo.HloModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for p in module.entry.parameters:
        dtype = p.shape.dtype.numpy
        if np.issubdtype(dtype, np.integer):
            args.append(rng.integers(0, 4, p.shape.dims).astype(dtype))
        else:
            args.append(rng.standard_normal(p.shape.dims).astype(dtype))
    return args


def fuse(text: str, options: FusionOptions | None = None, compile_: bool = True):
    """Run the pass; check verification, exact evaluator agreement and (optionally) the CPU backend."""
    module = hlo.parse_module(text)
    hlo.verify(module)
    fusion = FusionPass(options or FusionOptions())
    out = fusion.run(module)
    hlo.verify(out)
    args = random_args(module)
    want = hlo.evaluate(module, *args)
    for got, ref in zip(hlo.evaluate(out, *args), want):
        np.testing.assert_array_equal(got, ref)
    if compile_:
        for got, ref in zip(cpu.compile(out)(*args), want):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    return out, fusion


def members(fusion: FusionPass) -> dict[str, tuple[str, tuple[str, ...]]]:
    """fusion name -> (kind, fused instruction names)."""
    return {f.fusion: (f.kind, f.members) for f in fusion.fusions}


def entry_ops(module: hlo.HloModule) -> list[str]:
    return [f"{i.name}={i.opcode.text}" for i in module.entry.instructions if i.opcode is not Opcode.PARAMETER]


# --- loop fusion ---------------------------------------------------------------------------------


# Two reductions and two elementwise ops of one input: siblings in two groups of equal output dims.
SIBLINGS = "HloModule siblings\n" + MAX + MIN + """
ENTRY %main (x: f32[4,8]) -> (f32[4], f32[4], f32[4,8], f32[4,8]) {
  %x = f32[4,8]{1,0} parameter(0)
  %ninf = f32[] constant(-inf)
  %hi = f32[4]{0} reduce(f32[4,8]{1,0} %x, f32[] %ninf), dimensions={1}, to_apply=%max
  %inf = f32[] constant(inf)
  %lo = f32[4]{0} reduce(f32[4,8]{1,0} %x, f32[] %inf), dimensions={1}, to_apply=%min
  %e = f32[4,8]{1,0} exponential(f32[4,8]{1,0} %x)
  %n = f32[4,8]{1,0} negate(f32[4,8]{1,0} %x)
  ROOT %t = (f32[4]{0}, f32[4]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(%hi, %lo, %e, %n)
}
"""
