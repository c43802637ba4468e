"""TF -> HLO lowering (the tf2xla of tfxla-plugin).

``register_lowering`` holds one small rule per TF op type (in ``hlo/lowering/ops/``);
``can_lower`` answers whether a node can be compiled and why not; ``lower_graph``
turns a GraphDef subgraph into a verified ``HloModule``.
"""

from hlo.lowering.errors import InvalidArgumentLoweringError, LoweringError, UnsupportedOpError
from hlo.lowering.graph import InputSpec, lower_graph
from hlo.lowering.registry import LOWERINGS, NEVER_COMPILED, Verdict, can_lower, register_lowering, supported_ops

__all__ = [
    "InvalidArgumentLoweringError", "LoweringError", "UnsupportedOpError", "InputSpec", "lower_graph", "LOWERINGS",
    "NEVER_COMPILED", "Verdict", "can_lower", "register_lowering", "supported_ops",
]
