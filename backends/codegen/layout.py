"""Layout indexing: the C expression of a multi-index's offset in a buffer, and back.

An index is a tuple of C expressions of type ``int64_t``, one per dim. ``linear_index`` honours the
shape's layout (``minor_to_major``; row-major if none) and leaves out dims of size 1;
``delinearize`` is its inverse. Both write C-family integer arithmetic, the same in every backend.
"""

from __future__ import annotations

from hlo.shapes import Shape

Index = tuple[str, ...]


def _minor_to_major(shape: Shape) -> tuple[int, ...]:
    if shape.layout is not None and shape.layout.minor_to_major:
        return tuple(shape.layout.minor_to_major)
    return tuple(range(len(shape.dims) - 1, -1, -1))


def linear_index(shape: Shape, idx: Index) -> str:
    """Offset of ``idx`` in a buffer of ``shape`` (honouring its layout; row-major if none)."""
    if not shape.dims:
        return "0"
    terms = []
    stride = 1
    for d in _minor_to_major(shape):
        if shape.dims[d] != 1:
            e = idx[d] if " " not in idx[d] or _enclosed(idx[d]) else f"({idx[d]})"  # "a + b" * s needs parentheses
            terms.append(e if stride == 1 else f"{e} * {stride}")
        stride *= shape.dims[d]
    return " + ".join(f"({t})" if " " in t else t for t in terms) or "0"


def _enclosed(expr: str) -> bool:
    """Whether ``expr`` is one parenthesized group, e.g. ``(a + b)`` but not ``(a) + (b)``."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return False
    depth = 0
    for k, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(expr) - 1:
            return False
    return True


def delinearize(offset: str, shape: Shape) -> Index:
    """The multi-index of linear ``offset`` in ``shape`` (layout-aware), as C expressions."""
    if not shape.dims:
        return ()
    idx: list[str] = ["0"] * len(shape.dims)
    stride = 1
    for d in _minor_to_major(shape):
        n = shape.dims[d]
        if n != 1:
            idx[d] = f"(({offset}) / {stride}) % {n}" if stride != 1 else f"({offset}) % {n}"
        stride *= n
    return tuple(idx)
