"""What the GEMM kernels share: the product they compute (``Gemm``) and the loop that fills a K slice.

``kernel_dot`` describes dots and convolutions as a ``Gemm`` and computes them on the CUDA cores;
``kernel_wmma`` computes the f16/bf16 ones on the tensor cores. Both fill their shared-memory slices
with ``emit_slice_loads``: each element of A (``bm`` x ``bk``) and B (``bk`` x ``bn``) is computed by
the elemental rules at its (row, k) / (k, col), zero past the edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backends.codegen.buffer import IndentedBuffer

# (body, em, row or col variable, k variable): writes the element into ``av`` / ``bv`` (zero outside)
Loader = Callable[[IndentedBuffer, object, str, str], None]


@dataclass(frozen=True)
class Gemm:
    """A product a GEMM kernel computes: ``core`` (a dot or convolution: the root, or under an
    elementwise epilogue), batch ``nb`` x [m, k] x [k, n], the loaders of A and B elements, and
    ``out_index()``: the result's multi-index (and linear offset, or None) at output row ``mm``, col
    ``nn``."""

    core: object
    nb: int
    m: int
    n: int
    k: int
    load_a: Loader
    load_b: Loader
    out_index: Callable[[], tuple]
    note: str


def emit_slice_loads(body: IndentedBuffer, em, g: Gemm, tile: tuple[int, int, int], threads: int,
                     slots: tuple[str, str], value_t: str, convert: str = "") -> None:
    """Fill the A and B slices of K offset ``k0`` (``tile`` = (bm, bn, bk); block origin ``m0``,
    ``n0``): thread ``tid`` computes every ``threads``-th element in row-major slice order and writes
    ``convert(value)`` to its slot (``slots``: C expressions of the slice position ``l``)."""
    bm, bn, bk = tile
    for name, load, size, coords, slot in (
            ("a", g.load_a, bm * bk, f"am = m0 + l / {bk}, ak = k0 + l % {bk}", slots[0]),
            ("b", g.load_b, bk * bn, f"bk = k0 + l / {bn}, bn = n0 + l % {bn}", slots[1])):
        with body.block(f"for (int l = tid; l < {size}; l += {threads})"):
            body.line(f"const int64_t {coords};")
            body.line(f"{value_t} {name}v = 0;")
            em.push()
            load(body, em, "am" if name == "a" else "bn", "ak" if name == "a" else "bk")
            em.pop()
            body.line(f"{slot} = {convert}({name}v);" if convert else f"{slot} = {name}v;")
