"""HLO shapes: arrays (element type, dims, optional layout) and tuples.

Shapes are frozen and hashable. ``str(shape)`` is XLA's text form
(``f32[2,3]{1,0}``, ``(f32[], s32[4]{0})``, ``token[]``). Layout is the
minor-to-major order of the dims; ``None`` means "not printed"/unspecified.
``compatible`` ignores layouts, which is what shape inference compares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Union

from hlo.dtypes import PrimitiveType

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1  # XLA's dims, sizes and text integers are int64


@dataclass(frozen=True)
class Layout:
    """Minor-to-major dim order plus any extra layout text (tiles, memory space) kept verbatim."""

    minor_to_major: tuple[int, ...]
    extra: str = ""

    def __str__(self) -> str:
        body = ",".join(str(d) for d in self.minor_to_major)
        return "{" + body + (":" + self.extra if self.extra else "") + "}"

    @staticmethod
    def default(rank: int) -> "Layout":
        return Layout(tuple(range(rank - 1, -1, -1)))


@dataclass(frozen=True)
class Shape:
    """An array shape: element type and dims. ``dynamic[i]`` marks a bounded dynamic dim (``<=N``)."""

    dtype: PrimitiveType
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    dynamic: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        if any(d < 0 for d in self.dims):
            raise ValueError(f"negative dimension in {self.dims}")
        if self.layout is not None and len(self.layout.minor_to_major) not in (0, len(self.dims)):
            raise ValueError(f"layout {self.layout} does not match rank {len(self.dims)}")
        if self.dynamic is not None and not any(self.dynamic):
            object.__setattr__(self, "dynamic", None)

    # --- construction ------------------------------------------------------
    @staticmethod
    def array(dtype: PrimitiveType | str, dims=(), layout: bool | Layout | None = True) -> "Shape":
        """An array shape; ``layout=True`` gives XLA's default row-major layout."""
        if isinstance(dtype, str):
            dtype = PrimitiveType.from_text(dtype)
        dims = tuple(dims)
        if layout is True:
            layout = Layout.default(len(dims)) if dims and dtype.is_array_type else None
        elif layout is False:
            layout = None
        return Shape(dtype, dims, layout)

    def with_dims(self, dims, keep_layout: bool = False) -> "Shape":
        dims = tuple(dims)
        layout = self.layout if keep_layout else (Layout.default(len(dims)) if dims else None)
        return Shape(self.dtype, dims, layout)

    def with_dtype(self, dtype: PrimitiveType) -> "Shape":
        return Shape(dtype, self.dims, self.layout, self.dynamic)

    def without_layout(self) -> "Shape":
        return Shape(self.dtype, self.dims, None, self.dynamic)

    # --- queries -------------------------------------------------------------
    is_tuple = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)  # exact: a NumPy int64 product would wrap silently

    @property
    def byte_size(self) -> int:
        return self.num_elements * self.dtype.byte_size

    @property
    def size_fits_int64(self) -> bool:
        """Whether the byte size fits in int64, counting a zero dim as 1 (XLA's and NumPy's limit)."""
        return math.prod(max(d, 1) for d in self.dims) * self.dtype.byte_size <= INT64_MAX

    def compatible(self, other: "ShapeLike") -> bool:
        """Same element type and dims; layouts are ignored."""
        return isinstance(other, Shape) and self.dtype == other.dtype and self.dims == other.dims

    def leaves(self) -> Iterator["Shape"]:
        yield self

    def __str__(self) -> str:
        if self.dtype is PrimitiveType.TOKEN:
            return "token[]"
        dyn = self.dynamic or (False,) * len(self.dims)
        dims = ",".join(("<=" if dy else "") + str(d) for d, dy in zip(self.dims, dyn))
        text = f"{self.dtype.value}[{dims}]"
        if self.layout is not None and self.dims:
            text += str(self.layout)
        return text

    def short(self) -> str:
        """Text without layout, as XLA prints computation signatures."""
        return str(self.without_layout())


@dataclass(frozen=True)
class TupleShape:
    """A tuple of shapes (possibly nested, possibly empty)."""

    elements: tuple["ShapeLike", ...] = ()

    is_tuple = True

    def compatible(self, other: "ShapeLike") -> bool:
        return (
            isinstance(other, TupleShape)
            and len(self.elements) == len(other.elements)
            and all(a.compatible(b) for a, b in zip(self.elements, other.elements))
        )

    def leaves(self) -> Iterator[Shape]:
        for e in self.elements:
            yield from e.leaves()

    def without_layout(self) -> "TupleShape":
        return TupleShape(tuple(e.without_layout() for e in self.elements))

    def __str__(self) -> str:
        return "(" + join_indexed(str(e) for e in self.elements) + ")"

    def short(self) -> str:
        return "(" + join_indexed(e.short() for e in self.elements) + ")"


ShapeLike = Union[Shape, TupleShape]


def array_shape(shape: ShapeLike) -> Shape:
    """``shape`` where it must be an array (an instruction or value that cannot be a tuple)."""
    if not isinstance(shape, Shape):
        raise TypeError(f"expected an array shape, got the tuple {shape}")
    return shape


def tuple_shape(shape: ShapeLike) -> TupleShape:
    """``shape`` where it must be a tuple (a while's state, a computation returning several values)."""
    if not isinstance(shape, TupleShape):
        raise TypeError(f"expected a tuple shape, got {shape}")
    return shape


def join_indexed(items) -> str:
    """Join with ", " and mark every fifth item with ``/*index=N*/``, as XLA's printer does."""
    return ", ".join(f"/*index={i}*/{t}" if i and i % 5 == 0 else t for i, t in enumerate(items))


def scalar(dtype: PrimitiveType | str) -> Shape:
    return Shape.array(dtype, ())
