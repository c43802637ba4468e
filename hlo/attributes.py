"""Typed attribute values of HLO instructions and modules.

Each attribute in XLA's text (``dimensions={1}``, ``window={size=3x3 ...}``,
``direction=GT``) is parsed once into one of these frozen values; the codecs in
``hlo/text/attr_codecs.py`` map attribute keys to value types. Attributes we do
not interpret are kept as ``Raw`` text so they print back unchanged.
``Attrs`` is an immutable, insertion-ordered mapping whose equality ignores order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from hlo.errors import first_duplicate
from hlo.shapes import ShapeLike


class ComparisonDirection(enum.Enum):
    EQ = "EQ"
    NE = "NE"
    LT = "LT"
    LE = "LE"
    GT = "GT"
    GE = "GE"


class ComparisonType(enum.Enum):
    FLOAT = "FLOAT"
    TOTALORDER = "TOTALORDER"
    SIGNED = "SIGNED"
    UNSIGNED = "UNSIGNED"


class IndexCheck(enum.Enum):
    """``index_check=`` on a gather or a scatter: TF's run-time check of the indices instead of XLA's
    clamp (gather) or skip (scatter) (no attribute: XLA's semantics). A failed check fails the run with
    an invalid-argument error carrying the message of the TF kernel named, which the TF lowering
    attaches (``hlo/index_check.py`` states it)."""

    TF_GATHER = "tf_gather"  # GatherV2: each scalar index in [0, n); nothing is checked when the result is empty
    TF_GATHER_ND = "tf_gather_nd"  # GatherNd: each index vector (the last dim) inside the operand
    TF_SCATTER_ND = "tf_scatter_nd"  # ScatterNd: each index row inside the output shape
    TF_TENSOR_SCATTER = "tf_tensor_scatter"  # TensorScatterUpdate/Add/Sub/Min/Max: the same, into the tensor

    @property
    def is_scatter(self) -> bool:
        """Whether this is a scatter's check (else a gather's)."""
        return self in (IndexCheck.TF_SCATTER_ND, IndexCheck.TF_TENSOR_SCATTER)


class FftType(enum.Enum):
    """``fft_type=`` of an fft: complex forward/inverse, real-to-complex forward, complex-to-real inverse."""

    FFT = "FFT"
    IFFT = "IFFT"
    RFFT = "RFFT"
    IRFFT = "IRFFT"


class FusionKind(enum.Enum):
    LOOP = "kLoop"
    INPUT = "kInput"
    OUTPUT = "kOutput"
    CUSTOM = "kCustom"


@dataclass(frozen=True)
class Ident:
    """A bare identifier value we do not interpret further (``rng_uniform``, ``API_VERSION_ORIGINAL``)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Raw:
    """Attribute text kept verbatim (sharding, backend_config we do not read, ...)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CompRef:
    """A reference to a computation by name (without the ``%``)."""

    name: str

    def __str__(self) -> str:
        return "%" + self.name


@dataclass(frozen=True)
class InstRef:
    """A reference to an instruction by name (``control-predecessors={%a}``)."""

    name: str

    def __str__(self) -> str:
        return "%" + self.name


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class PadDim:
    low: int
    high: int
    interior: int = 0


@dataclass(frozen=True)
class WindowDim:
    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1
    rhs_dilate: int = 1
    reversal: bool = False


@dataclass(frozen=True)
class Window:
    dims: tuple[WindowDim, ...] = ()


@dataclass(frozen=True)
class ConvDimLabels:
    """Convolution dimension numbers, as in ``dim_labels=b01f_01io->b01f``."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    @property
    def num_spatial(self) -> int:
        return len(self.input_spatial)

    @staticmethod
    def nhwc(num_spatial: int = 2) -> "ConvDimLabels":
        sp = tuple(range(1, num_spatial + 1))
        return ConvDimLabels(0, num_spatial + 1, sp, num_spatial, num_spatial + 1,
                             tuple(range(num_spatial)), 0, num_spatial + 1, sp)


@dataclass(frozen=True)
class OpMetadata:
    """``metadata={op_type="..." op_name="..." source_file="..." source_line=N ...}``.

    ``fields`` keeps every key in text order (values are str or int) so unknown keys survive.
    """

    fields: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default=None):
        for k, v in self.fields:
            if k == key:
                return v
        return default

    @property
    def op_type(self) -> str | None:
        return self.get("op_type")

    @property
    def op_name(self) -> str | None:
        return self.get("op_name")

    @property
    def source_file(self) -> str | None:
        return self.get("source_file")

    @property
    def source_line(self) -> int | None:
        return self.get("source_line")

    @staticmethod
    def make(op_type=None, op_name=None, source_file=None, source_line=None) -> "OpMetadata":
        pairs = (("op_type", op_type), ("op_name", op_name),
                 ("source_file", source_file), ("source_line", source_line))
        return OpMetadata(tuple((k, v) for k, v in pairs if v is not None))


@dataclass(frozen=True)
class StrMap:
    """A ``{key="value",...}`` map such as ``frontend_attributes``."""

    items: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ProgramShape:
    """``entry_computation_layout={(params...)->result}``."""

    parameters: tuple[ShapeLike, ...]
    result: ShapeLike


class Attrs(Mapping[str, Any]):
    """Immutable insertion-ordered attribute mapping; equality and hash ignore order."""

    __slots__ = ("_items", "_dict")

    def __init__(self, items=()):
        if isinstance(items, Mapping):
            items = items.items()
        pairs = tuple((str(k), v) for k, v in items)
        self._items = pairs
        self._dict = dict(pairs)
        if len(self._dict) != len(pairs):
            dup = first_duplicate(k for k, _ in pairs)
            raise ValueError(f"duplicate attribute {dup!r}")

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:
        if isinstance(other, Attrs):
            return self._dict == other._dict
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._dict.items()))

    def __repr__(self) -> str:
        return f"Attrs({dict(self._items)!r})"

    def set(self, key: str, value) -> "Attrs":
        """A copy with ``key`` set (kept in place if present, appended otherwise)."""
        if key in self._dict:
            return Attrs((k, value if k == key else v) for k, v in self._items)
        return Attrs(self._items + ((key, value),))

    def remove(self, key: str) -> "Attrs":
        return Attrs((k, v) for k, v in self._items if k != key)
