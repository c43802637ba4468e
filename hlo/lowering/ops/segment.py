"""UnsortedSegmentSum / Max / Min / Prod: the dense form of a gather's gradient (IndexedSlices made
dense), Keras ``AdaptiveAveragePooling*``/``AdaptiveMaxPooling*`` and their gradients, ``tf.math.
unsorted_segment_*``.

``UnsortedSegmentSum(data, segment_ids, num_segments)`` has dims ``[num_segments] +
data.shape[segment_ids.rank:]``: ``out[segment_ids[i...], ...] (+)= data[i..., ...]``. One HLO scatter
into a constant (0 for sum, 1 for prod, the type's lowest finite value for max and its highest for min:
TF's identities for an empty segment) with the combiner. Negative ids are dropped, as by TF's kernel;
ids ``>= num_segments`` (which TF's CPU kernel rejects at run time) are dropped by the scatter too.
``num_segments`` sets the output shape, so it must be a compile-time constant.
"""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import combiner
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import FLOATS, NUMERIC


def _identity(kind: str, dtype: P) -> float | int:
    if kind in ("add", "mul"):
        return 0 if kind == "add" else 1
    info = np.finfo(dtype.numpy) if dtype in FLOATS else np.iinfo(dtype.numpy)
    return info.min if kind == "max" else info.max


def _unsorted_segment(kind: str) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        data, ids, _ = ctx.inputs
        dd, idims = ctx.dims(data), ctx.dims(ids)
        (n,) = ctx.const_ints(2)
        if n < 0:
            raise ctx.invalid_argument(f"Input num_segments == {n} must not be negative.")
        if tuple(dd[:len(idims)]) != tuple(idims):
            raise ctx.invalid_argument(f"data.shape = {list(dd)} does not start with segment_ids.shape = "
                                       f"{list(idims)}")
        dtype = ctx.dtype(data)
        out = (n,) + tuple(dd[len(idims):])
        init = ctx.broadcast_in_dim(ctx.scalar(_identity(kind, dtype), dtype), out, ())
        rank = len(idims)
        return ctx.b.scatter(init, ids, data, update_window_dims=tuple(range(rank, len(dd))), inserted_window_dims=(0,),
                             scatter_dims_to_operand_dims=(0,), index_vector_dim=rank,
                             to_apply=combiner(ctx, kind, dtype))
    return lower


_KINDS = {"UnsortedSegmentSum": "add", "UnsortedSegmentProd": "mul", "UnsortedSegmentMax": "max",
          "UnsortedSegmentMin": "min"}
for _op, _kind in _KINDS.items():
    register_lowering(_op, dtypes=NUMERIC, const_inputs=(2,))(_unsorted_segment(_kind))
