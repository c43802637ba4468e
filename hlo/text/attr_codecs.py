"""Attribute codecs: how each ``key=value`` of XLA's text is read and printed.

``PARSERS`` maps an attribute key to the function that reads its value from
a ``Scanner``; keys not listed are kept as ``Raw`` text. The kernel-shape
annotations of the backends' own passes (``row_program=``, ``post_ops=``,
``column_reduce=``) have their codecs in ``annotation_codecs.py``. ``format_value``
prints any typed value back, dispatching on its Python type, so printing
needs no key table and cannot drift from parsing.
"""

from __future__ import annotations

import enum
from typing import Any, Callable

from hlo.attributes import (
    CompRef, ComparisonDirection, ComparisonType, ConvDimLabels, FftType, FusionKind, Ident, IndexCheck, InstRef,
    OpMetadata, PadDim, ProgramShape, Raw, SliceDim, StrMap, Window, WindowDim,
)
from hlo.opcodes import CALLED_COMPUTATION_ATTRS
from hlo.shapes import INT64_MAX, INT64_MIN, join_indexed
from hlo.text import annotation_codecs
from hlo.text.scanner import DIGITS, Scanner, quote

# --- readers --------------------------------------------------------------


def _read_list(s: Scanner, item: Callable[[Scanner], Any]) -> tuple:
    s.expect("{")
    items: list = []
    if not s.accept("}"):
        while True:
            items.append(item(s))
            if s.accept("}"):
                break
            s.expect(",", "',' or '}'")
    return tuple(items)


def read_int_list(s: Scanner) -> tuple[int, ...]:
    return _read_list(s, Scanner.integer)


def read_comp_ref(s: Scanner) -> CompRef:
    return CompRef(s.name("a computation name"))


def read_comp_refs(s: Scanner):
    if s.peek() == "{":
        return _read_list(s, read_comp_ref)
    return read_comp_ref(s)


def _read_enum(enum_type: type[enum.Enum], what: str):
    def read(s: Scanner):
        pos = s.mark()
        word = s.word(what)
        try:
            return enum_type(word)
        except ValueError:
            raise s.error(what, pos) from None
    return read


def read_ident(s: Scanner) -> Ident:
    return Ident(s.word())


def read_string_or_raw(s: Scanner):
    if s.peek() == '"':
        return s.string()
    return Raw(s.balanced())


def read_slice(s: Scanner) -> tuple[SliceDim, ...]:
    def dim(s: Scanner) -> SliceDim:
        s.expect("[")
        start = s.integer()
        s.expect(":")
        limit = s.integer()
        stride = s.integer() if s.accept(":") else 1
        s.expect("]")
        return SliceDim(start, limit, stride)
    return _read_list(s, dim)


def _split_x(s: Scanner, what: str) -> list[str]:
    pos = s.mark()
    text = s.word(what)
    parts = text.split("x")
    if not all(parts):
        raise s.error(what, pos)
    return parts


def _ints(s: Scanner, parts: list[str], sep: str, what: str, pos: int) -> list[list[int]]:
    """Split ``1_2x3_4`` into int64s (signed ASCII decimals only, as XLA reads them)."""
    try:
        out = [[_int64(v) for v in p.split(sep)] for p in parts]
    except ValueError:
        raise s.error(f"{what} (int64 values)", pos) from None
    return out


def _int64(text: str) -> int:
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not set(digits) <= DIGITS:  # int() would also take "1_0" and " 1"
        raise ValueError(text)
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(text)
    return value


def read_padding(s: Scanner) -> tuple[PadDim, ...]:
    s.skip_ws()
    pos = s.mark()
    what = "padding like 0_0x1_1_0"
    parts = _split_x(s, what)
    out = []
    for vals in _ints(s, parts, "_", what, pos):
        if len(vals) not in (2, 3):
            raise s.error(what, pos)
        out.append(PadDim(*vals))
    return tuple(out)


_WINDOW_FIELDS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def read_window(s: Scanner) -> Window:
    s.expect("{")
    fields: dict[str, list] = {}
    while not s.accept("}"):
        pos = s.mark()
        key = s.word("a window field")
        if key not in _WINDOW_FIELDS:
            raise s.error("one of " + ", ".join(_WINDOW_FIELDS), pos)
        s.expect("=")
        vpos = s.mark()
        parts = _split_x(s, f"window {key} value")
        if key == "pad":
            pads = _ints(s, parts, "_", "pad like 0_1x1_1", vpos)
            if any(len(p) != 2 for p in pads):
                raise s.error("pad like 0_1x1_1", vpos)
            fields[key] = pads
        else:
            fields[key] = [v[0] for v in _ints(s, parts, "_", f"window {key} value", vpos)]
    rank = len(fields.get("size", []))
    for key, vals in fields.items():
        if len(vals) != rank:
            raise s.error(f"window {key} with {rank} dims")
    dims = []
    for i in range(rank):
        pad = fields.get("pad", [[0, 0]] * rank)[i]
        dims.append(WindowDim(
            size=fields["size"][i],
            stride=fields.get("stride", [1] * rank)[i],
            pad_low=pad[0], pad_high=pad[1],
            lhs_dilate=fields.get("lhs_dilate", [1] * rank)[i],
            rhs_dilate=fields.get("rhs_dilate", [1] * rank)[i],
            reversal=bool(fields.get("rhs_reversal", [0] * rank)[i]),
        ))
    return Window(tuple(dims))


_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def read_dim_labels(s: Scanner) -> ConvDimLabels:
    s.skip_ws()
    pos = s.mark()
    what = "dim_labels like b01f_01io->b01f"
    lhs = s.chars(_LABEL_CHARS, what)
    s.expect("->", what)
    out = s.chars(_LABEL_CHARS, what)
    if "_" not in lhs:
        raise s.error(what, pos)
    inp, ker = lhs.split("_", 1)
    try:
        return _labels_to_dims(inp, ker, out)
    except ValueError:
        raise s.error(what, pos) from None


def _labels_to_dims(inp: str, ker: str, out: str) -> ConvDimLabels:
    n = len(inp) - 2
    if n < 0 or len(ker) != n + 2 or len(out) != n + 2:
        raise ValueError("rank mismatch")

    def spatial(labels: str) -> tuple[int, ...]:
        return tuple(labels.index(str(d)) for d in range(n))

    return ConvDimLabels(
        inp.index("b"), inp.index("f"), spatial(inp),
        ker.index("i"), ker.index("o"), spatial(ker),
        out.index("b"), out.index("f"), spatial(out),
    )


def format_dim_labels(d: ConvDimLabels) -> str:
    def render(rank: int, named: dict[int, str], spatial: tuple[int, ...]) -> str:
        chars = ["?"] * rank
        for idx, ch in named.items():
            chars[idx] = ch
        for k, idx in enumerate(spatial):
            chars[idx] = str(k)
        return "".join(chars)

    r = d.num_spatial + 2
    return (render(r, {d.input_batch: "b", d.input_feature: "f"}, d.input_spatial) + "_"
            + render(r, {d.kernel_input_feature: "i", d.kernel_output_feature: "o"}, d.kernel_spatial) + "->"
            + render(r, {d.output_batch: "b", d.output_feature: "f"}, d.output_spatial))


def read_metadata(s: Scanner) -> OpMetadata:
    s.expect("{")
    fields: list[tuple[str, str | int | Raw | Ident]] = []
    while not s.accept("}"):
        key = s.word("a metadata key")
        s.expect("=")
        if s.peek() == '"':
            fields.append((key, s.string()))
        elif s.peek() == "{":
            fields.append((key, Raw(s.balanced())))
        else:
            pos = s.mark()
            word = s.word("a metadata value")
            try:
                fields.append((key, int(word)))
            except ValueError:
                s.pos = pos
                fields.append((key, Ident(s.word())))
        s.accept(",")
    return OpMetadata(tuple(fields))


def read_str_map(s: Scanner) -> StrMap:
    s.expect("{")
    items = []
    while not s.accept("}"):
        key = s.word("a key")
        s.expect("=")
        items.append((key, s.string() if s.peek() == '"' else s.balanced()))
        s.accept(",")
    return StrMap(tuple(items))


def read_bool_list(s: Scanner) -> tuple[bool, ...]:
    return _read_list(s, Scanner.boolean)


def read_ident_list(s: Scanner) -> tuple[Ident, ...]:
    return _read_list(s, read_ident)


def read_inst_refs(s: Scanner) -> tuple[InstRef, ...]:
    return _read_list(s, lambda sc: InstRef(sc.name("an instruction name")))


def read_int(s: Scanner) -> int:
    return s.integer()


def read_bool(s: Scanner) -> bool:
    return s.boolean()


def read_program_shape(s: Scanner) -> ProgramShape:
    from hlo.text.parser import read_shape  # shapes live with the parser

    s.expect("{")
    s.expect("(")
    params = []
    if not s.accept(")"):
        while True:
            params.append(read_shape(s))
            if s.accept(")"):
                break
            s.expect(",", "',' or ')'")
    s.expect("->")
    result = read_shape(s)
    s.expect("}")
    return ProgramShape(tuple(params), result)


_INT_LISTS = (
    "dimensions", "dynamic_slice_sizes", "slice_sizes", "offset_dims", "collapsed_slice_dims",
    "start_index_map", "operand_batching_dims", "start_indices_batching_dims", "update_window_dims",
    "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
    "scatter_indices_batching_dims", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
    "rhs_contracting_dims", "fft_length",
)
_INTS = ("index", "iota_dimension", "index_vector_dim", "feature_group_count", "batch_group_count",
         "exponent_bits", "mantissa_bits", "k")
_BOOLS = ("is_stable", "indices_are_sorted", "unique_indices", "largest", "custom_call_has_side_effect",
          "constrain_layout", "is_scheduled", "alias_passthrough_params")
_IDENTS = ("distribution", "algorithm", "api_version", "custom_call_schedule")

PARSERS: dict[str, Callable[[Scanner], Any]] = {
    **{k: read_int_list for k in _INT_LISTS},
    **{k: read_int for k in _INTS},
    **{k: read_bool for k in _BOOLS},
    **{k: read_comp_refs for k in CALLED_COMPUTATION_ATTRS},
    **{k: read_ident for k in _IDENTS},
    "direction": _read_enum(ComparisonDirection, "a comparison direction (EQ, NE, LT, LE, GT, GE)"),
    "type": _read_enum(ComparisonType, "a comparison type (FLOAT, TOTALORDER, SIGNED, UNSIGNED)"),
    "fft_type": _read_enum(FftType, "an fft type (FFT, IFFT, RFFT, IRFFT)"),
    "kind": _read_enum(FusionKind, "a fusion kind (kLoop, kInput, kOutput, kCustom)"),
    "index_check": _read_enum(IndexCheck, f"an index check ({', '.join(c.value for c in IndexCheck)})"),
    "slice": read_slice,
    "padding": read_padding,
    "window": read_window,
    "dim_labels": read_dim_labels,
    "metadata": read_metadata,
    "frontend_attributes": read_str_map,
    "custom_call_target": Scanner.string,
    "backend_config": read_string_or_raw,
    "parameter_replication": read_bool_list,
    "operand_precision": read_ident_list,
    "control-predecessors": read_inst_refs,
    "entry_computation_layout": read_program_shape,
    **annotation_codecs.READERS,
}


def read_value(key: str, s: Scanner) -> Any:
    reader = PARSERS.get(key)
    return reader(s) if reader else Raw(s.balanced())


# --- printing -------------------------------------------------------------


def _format_window(w: Window) -> str:
    dims = w.dims
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.pad_low or d.pad_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.pad_low}_{d.pad_high}" for d in dims))
    if any(d.lhs_dilate != 1 for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.lhs_dilate) for d in dims))
    if any(d.rhs_dilate != 1 for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.rhs_dilate) for d in dims))
    if any(d.reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join(str(int(d.reversal)) for d in dims))
    return "{" + " ".join(parts) + "}" if dims else "{}"


def _format_metadata(m: OpMetadata) -> str:
    parts = []
    for k, v in m.fields:
        parts.append(f"{k}={quote(v) if isinstance(v, str) else v}")
    return "{" + " ".join(parts) + "}"


def format_value(value: Any) -> str:
    """XLA text of a typed attribute value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (Raw, Ident, CompRef, InstRef)):
        return str(value)
    if isinstance(value, tuple):
        if value and isinstance(value[0], SliceDim):
            strided = any(d.stride != 1 for d in value)  # XLA prints strides for all dims or none
            return "{" + ", ".join(
                f"[{d.start}:{d.limit}" + (f":{d.stride}]" if strided else "]") for d in value) + "}"
        if value and isinstance(value[0], PadDim):
            return "x".join(f"{d.low}_{d.high}" + (f"_{d.interior}" if d.interior else "") for d in value)
        sep = ", " if value and isinstance(value[0], (CompRef, InstRef)) else ","
        return "{" + sep.join(format_value(v) for v in value) + "}"
    if isinstance(value, Window):
        return _format_window(value)
    if isinstance(value, ConvDimLabels):
        return format_dim_labels(value)
    if isinstance(value, OpMetadata):
        return _format_metadata(value)
    if isinstance(value, StrMap):
        return "{" + ",".join(f"{k}={quote(v)}" for k, v in value.items) + "}"
    if isinstance(value, ProgramShape):
        return "{(" + join_indexed(str(p) for p in value.parameters) + ")->" + str(value.result) + "}"
    formatter = annotation_codecs.FORMATTERS.get(type(value))
    if formatter is not None:
        return formatter(value)
    raise TypeError(f"cannot print attribute value of type {type(value).__name__}: {value!r}")
