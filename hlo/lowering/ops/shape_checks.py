"""EnsureShape: the identity, after checking at compile time (shapes are static here) that the input's
dims match the ``shape`` attribute (a -1 dim or an unknown rank matches anything), with TF's message."""

from __future__ import annotations

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL


def _expected(ctx: LoweringContext) -> tuple[int, ...] | None:
    """The ``shape`` attribute's dims (-1 unknown), or None for an unknown rank."""
    if not ctx.has_attr("shape"):
        raise ctx.error("missing attribute 'shape'")
    proto = ctx.node.attr["shape"]
    if proto.WhichOneof("value") != "shape":
        raise ctx.error("attribute 'shape' is not a shape")
    return None if proto.shape.unknown_rank else tuple(int(d.size) for d in proto.shape.dim)


@register_lowering("EnsureShape", dtypes=ALL)
def ensure_shape(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    want, got = _expected(ctx), ctx.dims(x)
    if want is not None and (len(want) != len(got) or any(w not in (-1, g) for w, g in zip(want, got))):
        shown = ",".join("?" if w == -1 else str(w) for w in want)
        raise ctx.invalid_argument(f"Shape of tensor {ctx.node.input[0]} {list(got)} is not compatible with "
                                   f"expected shape [{shown}].")
    return x
