"""The ``DnnlEpilogues`` pass: which part of each output fusion's epilogue oneDNN computes as post-ops.

For every ``fusion kind=kOutput`` with exactly one dot or convolution (the
hero) and an array result, ``dnnl_epilogue.match_epilogue`` finds the cut and
its post-op chain (none for a gradient convolution: ``dnnl_conv.takes_post_ops``), and the fusion is annotated
``post_ops={cut=%c,ops={...}}``: ``kernels_dnnl`` builds the oneDNN primitive
computing ``cut`` and an elemental loop for the rest. When the cut is not the
root and the NaN-masking chain (``exact_nan=False``) covers the whole fusion
with other post-ops, it is kept as ``fast={...}``: the primitive the backend
runs when ``dnnl_guard`` proves a call's accumulator finite. ``DnnlEpilogues(exact_nan=False)``
chooses the NaN-masking chain outright (no guard; wrong where a NaN arises: what
``bench/nan_guard_bench.py`` measures against).

The annotation says what oneDNN may compute exactly; whether it does (oneDNN
installed, element types, strides) is the code generator's choice, which
falls back to the elemental rules. Valid IR in, valid IR out: only the
annotation changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from backends.cpu.dnnl_conv import takes_post_ops
from backends.cpu.dnnl_epilogue import match_epilogue
from hlo.annotations import POST_OPS, PostOpChain
from hlo.attributes import FusionKind
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.passes.annotate import annotate
from hlo.shapes import Shape

HEROES = (Opcode.DOT, Opcode.CONVOLUTION)


def hero_of(fused: HloComputation) -> HloInstruction | None:
    """The one dot or convolution of an output fusion's computation (None: none, or several)."""
    heroes = [i for i in fused.instructions if i.opcode in HEROES]
    return heroes[0] if len(heroes) == 1 else None


def chain_of(fused: HloComputation, exact_nan: bool = True) -> PostOpChain | None:
    hero = hero_of(fused)
    if hero is None or not isinstance(fused.root.shape, Shape):
        return None
    if not takes_post_ops(hero, fused[hero.operands[0]].shape):  # a gradient convolution: computed alone
        return PostOpChain(hero.name, ())
    safe = match_epilogue(fused, hero.name, exact_nan=exact_nan)
    fast = None
    if safe.cut != fused.root_name:
        masking = match_epilogue(fused, hero.name, exact_nan=False)
        if masking.cut == fused.root_name and masking.ops != safe.ops:
            fast = masking.ops
    return PostOpChain(safe.cut, safe.ops, fast)


def _decide(module: HloModule, comp: HloComputation, exact_nan: bool = True) -> dict[str, object]:
    out: dict[str, object] = {}
    for inst in comp.instructions:
        if inst.opcode is Opcode.FUSION and inst.attr("kind") is FusionKind.OUTPUT:
            chain = chain_of(module.computation(inst.attr("calls").name), exact_nan)
            if chain is not None:
                out[inst.name] = chain
    return out


@dataclass(frozen=True)
class DnnlEpilogues:
    """Annotates every output fusion with its oneDNN post-op chain (``post_ops=``)."""

    name: str = "dnnl-epilogues"
    exact_nan: bool = True  # False: the NaN-masking chain, unguarded (a benchmark's baseline only)

    def run(self, module: HloModule) -> HloModule:
        return annotate(module, POST_OPS, partial(_decide, exact_nan=self.exact_nan))
