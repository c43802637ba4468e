"""Counted loops for lowerings whose unrolled form would grow with a size (the linear-algebra rules):
``fori_loop`` builds one HLO ``while`` over ``(s32 counter, *carried)``, the way XLA's own expanders
(CholeskyExpander, TriangularSolveExpander) emit theirs, so the module, the generated code and the
compile time stay the same for any trip count.

The body is written with the rule's ``LoweringContext`` helpers (``ctx.reshape``, ``ctx.select``, ...):
while it is built, ``ctx.b`` is the body's builder (``building``). Everything the body reads must be
carried: a ``Value`` of the enclosing computation is not visible inside it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape, scalar

Step = Callable[[Value, list[Value]], Sequence[Value]]


@contextmanager
def building(ctx: LoweringContext, cb: ComputationBuilder) -> Iterator[None]:
    """``ctx``'s helpers add to ``cb`` inside the block."""
    outer, ctx.b = ctx.b, cb
    try:
        yield
    finally:
        ctx.b = outer


def shape_key(values: Sequence[Value]) -> str:
    """A computation-name fragment naming the shapes of ``values`` (helper computations are keyed by it)."""
    parts = []
    for v in values:
        assert isinstance(v.shape, Shape)
        parts.append(v.shape.dtype.value + "x".join(str(d) for d in v.shape.dims))
    return "_".join(parts)


def fori_loop(ctx: LoweringContext, key: str, trips: int, carried: Sequence[Value], step: Step,
              reverse: bool = False) -> list[Value]:
    """``carried`` after ``for i in range(trips)`` (``reversed`` if ``reverse``) of ``carried = step(i,
    carried)``, ``i`` an s32 scalar; ``step`` returns values of the carried shapes. ``key`` names the
    body: two loops with the same key and carried shapes must have the same body (they share it)."""
    state = TupleShape((scalar(P.S32), *(v.shape for v in carried)))
    name = f"{key}_{shape_key(carried)}"

    def unpack(cb: ComputationBuilder) -> tuple[Value, list[Value]]:
        p = cb.parameter(state, name="state")
        return cb.get_tuple_element(p, index=0), [cb.get_tuple_element(p, index=i + 1) for i in range(len(carried))]

    def body(cb: ComputationBuilder) -> Value:
        with building(ctx, cb):
            t, values = unpack(cb)
            i = cb.subtract(ctx.scalar(trips - 1, P.S32), t) if reverse else t
            out = list(step(i, values))
            assert [v.shape for v in out] == [v.shape for v in carried], f"{key}: the step changed the carried shapes"
            return cb.tuple(cb.add(t, ctx.scalar(1, P.S32)), *out)

    def cond(cb: ComputationBuilder) -> Value:
        with building(ctx, cb):
            t, _ = unpack(cb)
            return ctx.compare(t, ctx.scalar(trips, P.S32), "LT")

    init = ctx.b.tuple(ctx.scalar(0, P.S32), *carried)
    loop = ctx.b.op(Opcode.WHILE, init, condition=ctx.computation(f"{name}_cond", cond),
                    body=ctx.computation(f"{name}_body", body))
    return [ctx.b.get_tuple_element(loop, index=i + 1) for i in range(len(carried))]


def dynamic_part(ctx: LoweringContext, x: Value, starts: Sequence[Value | int], sizes: Sequence[int]) -> Value:
    """``x[..., starts[0]:+sizes[0], ...]`` over its trailing ``len(starts)`` dims (int or s32 scalar starts,
    clamped as XLA clamps them); the leading dims whole."""
    dims = ctx.dims(x)
    lead = len(dims) - len(starts)
    zero = ctx.scalar(0, P.S32)
    index = [zero] * lead + [ctx.scalar(s, P.S32) if isinstance(s, int) else s for s in starts]
    return ctx.b.dynamic_slice(x, *index, dynamic_slice_sizes=(*dims[:lead], *sizes))


def dynamic_put(ctx: LoweringContext, x: Value, update: Value, starts: Sequence[Value | int]) -> Value:
    """``x`` with ``update`` written at ``starts`` of its trailing dims (``dynamic_part``'s inverse)."""
    lead = len(ctx.dims(x)) - len(starts)
    zero = ctx.scalar(0, P.S32)
    index = [zero] * lead + [ctx.scalar(s, P.S32) if isinstance(s, int) else s for s in starts]
    return ctx.b.dynamic_update_slice(x, update, *index)
