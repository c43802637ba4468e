"""hlo: the HLO IR of tfxla-plugin, in XLA's own text format.

Public API: ``parse_module`` / ``HloModule.to_text`` (the text format),
``verify`` (shape and structure checks), ``evaluate`` (the NumPy reference
evaluator), the IR classes and the ``ComputationBuilder``. The opcode table in
``hlo.opcodes`` drives all of them.
"""

from hlo.attributes import (
    Attrs, CompRef, ComparisonDirection, ComparisonType, ConvDimLabels, FftType, FusionKind, Ident, IndexCheck, InstRef,
    OpMetadata, PadDim, ProgramShape, Raw, SliceDim, StrMap, Window, WindowDim,
)
from hlo.builder import ComputationBuilder, Value, module_of
from hlo.dtypes import PrimitiveType
from hlo.errors import HloError, HloEvaluationError, HloInvalidArgumentError, HloParseError, HloVerifierError
from hlo.evaluator import evaluate
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import Literal
from hlo.opcodes import Opcode
from hlo.shapes import Layout, Shape, ShapeLike, TupleShape, scalar
from hlo.text.parser import parse_module, parse_shape
from hlo.verifier import verify

__all__ = [
    "Attrs", "CompRef", "ComparisonDirection", "ComparisonType", "ConvDimLabels", "FftType", "FusionKind", "Ident",
    "IndexCheck", "InstRef", "OpMetadata", "PadDim", "ProgramShape", "Raw", "SliceDim", "StrMap", "Window",
    "WindowDim", "ComputationBuilder", "Value", "module_of", "PrimitiveType", "HloError", "HloEvaluationError",
    "HloInvalidArgumentError", "HloParseError", "HloVerifierError", "evaluate", "HloComputation",
    "HloInstruction", "HloModule", "Literal", "Opcode", "Layout", "Shape", "ShapeLike", "TupleShape", "scalar",
    "parse_module", "parse_shape", "verify",
]
