"""Our ``HloModule`` as XLA's ``xla.HloModuleProto`` (the ``*_serialized`` compiler-IR stages).

``module_proto(module)`` fills the proto as XLA's own ``HloModule::ToProto`` does: computations in our
order (callees before callers) with ids 1, 2, ..., instruction ids ``computation id << 32 | n`` (n counting
from 1 in instruction order, as XLA numbers them), operands, called computations and the root by id, every
shape with its element type, dims, dynamic-dim marks and layout, constants as ``LiteralProto``s, and each
instruction attribute through one table (``attrs.py``, keyed by the attribute name of the text form).
``serialize_module`` is its ``SerializeToString()``.

The proto is never silently incomplete: an attribute held as uninterpreted text (``hlo.attributes.Raw``),
one with no proto field (our ``index_check=``, the backends' kernel-shape annotations), an elided constant
(``{...}``) or layout text we keep verbatim (tiles, memory space) is a ``ProtoConversionError`` naming the
computation, the instruction and the attribute.
"""

from hlo.serialize.module import ProtoConversionError, module_proto, serialize_module

__all__ = ["ProtoConversionError", "module_proto", "serialize_module"]
