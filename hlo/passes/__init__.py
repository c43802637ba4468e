"""HLO optimization passes.

A pass is a small object with a ``name`` and ``run(module) -> HloModule``; the
IR is immutable, so a pass returns the module it was given when it changed
nothing and a new module otherwise ("changed" is ``result is not module``).
Contract of every pass: a verified module in, a verified module out, same
entry signature. ``Pipeline`` runs passes in order, verifies after each, can
dump between passes and disable passes by name; ``FixedPoint`` reruns a group
until nothing changes (capped, with cycle detection).
"""

from hlo.passes.pipeline import FixedPoint, HloPass, Pipeline, PipelineOptions

__all__ = ["FixedPoint", "HloPass", "Pipeline", "PipelineOptions"]
