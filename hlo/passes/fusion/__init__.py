"""Fusion: many HLO instructions become one loop nest (XLA's "single most important optimization").

``FusionPass(options).run(module)`` rewrites every scheduled computation into
``fusion`` instructions (``kind=kLoop|kInput|kOutput, calls=%fused_...``) that
the CPU code generator compiles to one loop nest each:

* ``loop_fusion``: producer-consumer fusion (elementwise chains, data
  movement, reductions with their producers and epilogues, dot epilogues);
* ``multi_output``: siblings reading the same input, and producers kept as
  extra outputs of their consumer (tuple roots with identical output dims);
* ``policy``: what may fuse and at what cost; ``decisions``: the log saying
  why every refused pair was refused; ``graph`` and ``materialize``: the
  working representation and its translation back to HLO.
"""

from hlo.passes.fusion.decisions import FusionDecision, FusionRecord, render
from hlo.passes.fusion.fusion_pass import FusionPass, scheduled_computations
from hlo.passes.fusion.loop_fusion import LoopFusion
from hlo.passes.fusion.multi_output import MultiOutputFusion
from hlo.passes.fusion.policy import NOT_FUSIBLE, FusionOptions

__all__ = ["FusionPass", "FusionOptions", "FusionDecision", "FusionRecord", "LoopFusion", "MultiOutputFusion",
           "NOT_FUSIBLE", "render", "scheduled_computations"]
