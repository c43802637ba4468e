"""Layout assignment: every array shape gets an explicit layout before code generation.

Values without a layout get XLA's default (row-major, ``{n-1,...,0}``); layouts
already present (real XLA dumps, entry layouts) are kept, and the code
generator honours them when it indexes buffers. Dot and convolution operands
stay in these logical layouts at the HLO level: the oneDNN kernels choose
their preferred (blocked) weight formats themselves and reorder constant
weights once at kernel init, so no HLO-level copy is needed for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.ir import HloComputation, HloModule
from hlo.passes.editor import map_computations
from hlo.shapes import Layout, Shape, ShapeLike, TupleShape


def with_layout(shape: ShapeLike) -> ShapeLike:
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(with_layout(e) for e in shape.elements))
    if shape.dims and shape.layout is None and shape.dtype.is_array_type:
        return Shape(shape.dtype, shape.dims, Layout.default(len(shape.dims)), shape.dynamic)
    return shape


@dataclass(frozen=True)
class LayoutAssignment:
    name: str = "layout-assignment"

    def run(self, module: HloModule) -> HloModule:
        def assign(comp: HloComputation) -> HloComputation:
            new = tuple(i if with_layout(i.shape) == i.shape else i.replace(shape=with_layout(i.shape))
                        for i in comp.instructions)
            if all(a is b for a, b in zip(new, comp.instructions)):
                return comp
            return comp.replace(instructions=new)

        return map_computations(module, assign)
