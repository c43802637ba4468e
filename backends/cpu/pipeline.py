"""The CPU backend's HLO optimization pipeline (what ``backends.cpu.compile`` runs before codegen).

simplify (algebraic simplification, constant folding, DCE, CSE to a fixed
point) -> fusion -> layout assignment -> DCE. (Buffer assignment runs in the
code generator, which owns the schedule.) Every pass is verified after it runs; ``dump`` is
called after every pass that changed the module (XLA-style per-pass dumps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hlo.ir import HloModule
from hlo.passes import FixedPoint, Pipeline, PipelineOptions
from hlo.passes.algsimp import AlgebraicSimplifier
from hlo.passes.constant_folding import ConstantFolding
from hlo.passes.cse import CommonSubexpressionElimination
from hlo.passes.dce import DeadCodeElimination
from hlo.passes.layout_assignment import LayoutAssignment


@dataclass
class OptimizeOptions:
    fusion: bool = True
    disabled: frozenset[str] = frozenset()
    dump: Callable[[int, str, HloModule], None] | None = None
    verify: bool = True
    log: list = field(default_factory=list)  # (pass name, changed) after a run


def cpu_passes(fusion: bool = True) -> list:
    passes: list = [
        FixedPoint([AlgebraicSimplifier(), ConstantFolding(), DeadCodeElimination(),
                    CommonSubexpressionElimination()], max_rounds=8, name="simplify"),
    ]
    if fusion:
        from hlo.passes.fusion import FusionPass

        passes.append(FusionPass())
    passes += [LayoutAssignment(), DeadCodeElimination()]
    return passes


def optimize(module: HloModule, options: OptimizeOptions | None = None) -> HloModule:
    return optimize_with_passes(module, options)[0]


def optimize_with_passes(module: HloModule, options: OptimizeOptions | None = None) -> tuple[HloModule, list]:
    """``optimize``, also returning the pass objects it ran (the fusion pass keeps its decision log)."""
    options = options or OptimizeOptions()
    passes = cpu_passes(options.fusion)
    pipeline = Pipeline(passes, PipelineOptions(verify=options.verify, disabled=options.disabled, dump=options.dump),
                        name="cpu")
    result = pipeline.run(module)
    options.log[:] = pipeline.log
    return result, passes
