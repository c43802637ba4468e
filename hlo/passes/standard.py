"""The target-independent pass list and the pipeline runner every backend's pipeline builds on.

A backend's ``pipeline.py`` is ``BackendPipeline(name, backend_passes)``:
``standard_passes`` (simplify: algebraic simplification, constant folding,
DCE and CSE to a fixed point -> fusion -> layout assignment -> DCE), then the
backend's own passes, which only annotate the kernel shape the backend will
emit (``hlo/annotations.py``) and so run last, on the final schedule. A
module compiled without optimization still gets the backend's passes
(``prepare``). Every pass is verified after it runs; ``dump`` is called after
every pass that changed the module (XLA-style per-pass dumps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hlo.ir import HloModule
from hlo.passes.algsimp import AlgebraicSimplifier
from hlo.passes.constant_folding import ConstantFolding
from hlo.passes.cse import CommonSubexpressionElimination
from hlo.passes.dce import DeadCodeElimination
from hlo.passes.layout_assignment import LayoutAssignment
from hlo.passes.pipeline import FixedPoint, HloPass, Pipeline, PipelineOptions


@dataclass
class OptimizeOptions:
    fusion: bool = True
    disabled: frozenset[str] = frozenset()
    dump: Callable[[int, str, HloModule], None] | None = None
    verify: bool = True
    log: list = field(default_factory=list)  # (pass name, changed) after a run


def standard_passes(fusion: bool = True) -> list[HloPass]:
    """The passes every backend runs first, in order."""
    passes: list[HloPass] = [
        FixedPoint([AlgebraicSimplifier(), ConstantFolding(), DeadCodeElimination(),
                    CommonSubexpressionElimination()], max_rounds=8, name="simplify"),
    ]
    if fusion:
        from hlo.passes.fusion import FusionPass

        passes.append(FusionPass())
    passes += [LayoutAssignment(), DeadCodeElimination()]
    return passes


@dataclass(frozen=True)
class BackendPipeline:
    """One backend's pipeline: ``standard_passes`` then ``backend_passes()``."""

    name: str
    backend_passes: Callable[[], list[HloPass]]

    def entry_points(self) -> tuple[Callable, Callable, Callable, Callable]:
        """``passes, optimize, optimize_with_passes, prepare``: what each ``backends/<name>/pipeline.py``
        exposes, so that every backend's pipeline module has the same functions."""
        return self.passes, self.optimize, self.optimize_with_passes, self.prepare

    def passes(self, fusion: bool = True) -> list[HloPass]:
        return standard_passes(fusion) + self.backend_passes()

    def optimize(self, module: HloModule, options: OptimizeOptions | None = None) -> HloModule:
        return self.optimize_with_passes(module, options)[0]

    def optimize_with_passes(self, module: HloModule, options: OptimizeOptions | None = None
                             ) -> tuple[HloModule, list[HloPass]]:
        """``optimize``, also returning the pass objects it ran (the fusion pass keeps its decision log)."""
        options = options or OptimizeOptions()
        return self._run(self.passes(options.fusion), module, options)

    def prepare(self, module: HloModule, options: OptimizeOptions | None = None) -> HloModule:
        """Only the backend's own passes: what a module compiled without optimization still needs."""
        return self._run(self.backend_passes(), module, options or OptimizeOptions())[0]

    def _run(self, passes: list[HloPass], module: HloModule, options: OptimizeOptions
             ) -> tuple[HloModule, list[HloPass]]:
        pipeline = Pipeline(passes, PipelineOptions(verify=options.verify, disabled=options.disabled,
                                                    dump=options.dump), name=self.name)
        result = pipeline.run(module)
        options.log[:] = pipeline.log
        return result, passes
