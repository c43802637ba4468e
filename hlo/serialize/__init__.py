"""Our ``HloModule`` as XLA's ``xla.HloModuleProto`` (the ``*_serialized`` compiler-IR stages).

``module_proto(module)`` fills the proto as XLA's own ``HloModule::ToProto`` does: computations in our
order (callees before callers) with ids 1, 2, ..., instruction ids ``computation id << 32 | n`` (n counting
from 1 in instruction order, as XLA numbers them), operands, called computations and the root by id, every
shape with its element type, dims, dynamic-dim marks and layout, constants as ``LiteralProto``s, each
instruction attribute through one table (``attrs.py``, keyed by the attribute name of the text form), the
defaults XLA's parser fills in where the text leaves them out, and for an ``is_scheduled=true`` module the
schedule its text order is. ``serialize_module`` is its ``SerializeToString()``. ``tests/test_hlo_proto.py``
checks the result against XLA's own bytes for XLA's own modules, as lowered and as optimized.

Our own attributes, which XLA does not have (``index_check=``, the backends' kernel-shape annotations),
travel in ``frontend_attributes`` as ``tfxla.<key>`` -> their text form (``attrs.OWN_ATTRS``).
The proto is never silently incomplete: an attribute held as uninterpreted text (``hlo.attributes.Raw``;
but ``backend_config=``, an opaque string in the proto too), one with no proto field (the header's
``alias_passthrough_params=true``, which is ``HloModuleConfig`` state), an elided constant (``{...}``) or layout text we keep verbatim (tiles, memory
space) is a ``ProtoConversionError`` naming the computation, the instruction and the attribute.
"""

from hlo.serialize.module import ProtoConversionError, module_proto, serialize_module

__all__ = ["ProtoConversionError", "module_proto", "serialize_module"]
