"""Parser for XLA's HLO text format: ``parse_module(text) -> HloModule``.

Reads real XLA dumps: shaped or unshaped operands, metadata, frontend
attributes, backend configs, layouts, comments. Attribute values are read by
the codecs in ``attr_codecs``; unknown attributes are kept verbatim. Every
error is an ``HloParseError`` with line:column and what was expected.
"""

from __future__ import annotations

import numpy as np

from hlo.attributes import Attrs
from hlo.dtypes import PrimitiveType
from hlo.errors import HloParseError
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import Literal
from hlo.opcodes import Opcode
from hlo.shapes import Layout, Shape, ShapeLike, TupleShape
from hlo.text.attr_codecs import read_value
from hlo.text.scanner import NAME_CHARS, Scanner

_MAX_DEPTH = 64  # nesting limit for tuple shapes and literals


def read_shape(s: Scanner, depth: int = 0) -> ShapeLike:
    """``f32[2,3]{1,0}``, ``pred[]``, ``token[]``, ``(f32[], s32[4])``."""
    if depth > _MAX_DEPTH:
        raise s.error("less deeply nested shape")
    if s.accept("("):
        elems: list[ShapeLike] = []
        if not s.accept(")"):
            while True:
                elems.append(read_shape(s, depth + 1))
                if s.accept(")"):
                    break
                s.expect(",", "',' or ')' in tuple shape")
        return TupleShape(tuple(elems))
    pos = s.mark()
    word = s.word("a shape such as f32[2,3]")
    try:
        dtype = PrimitiveType.from_text(word)
    except ValueError:
        raise s.error("an element type (pred, s32, f32, ...)", pos) from None
    if s.peek_raw() != "[":
        raise s.error("'[' after element type")
    s.pos += 1
    dims: list[int] = []
    dynamic: list[bool] = []
    if not s.accept("]"):
        while True:
            dynamic.append(s.accept("<="))
            dims.append(s.integer("a dimension size"))
            if dims[-1] < 0:
                raise s.error("a non-negative dimension size")
            if s.accept("]"):
                break
            s.expect(",", "',' or ']' in dimensions")
    if dtype is PrimitiveType.TOKEN:
        if dims:
            raise s.error("token[] (a token has no dimensions)", pos)
        return Shape(dtype)
    layout = None
    if s.peek_raw() == "{":
        layout = _read_layout(s, len(dims))
    return Shape(dtype, tuple(dims), layout, tuple(dynamic) if any(dynamic) else None)


def _read_layout(s: Scanner, rank: int) -> Layout:
    start = s.pos
    s.expect("{")
    m2m: list[int] = []
    extra = ""
    while s.peek() not in ("}", ":", ""):
        m2m.append(s.integer("a layout dimension"))
        if not s.accept(","):
            break
    if s.accept(":"):
        begin = s.pos
        depth = 0
        while s.pos < len(s.text) and (s.text[s.pos] != "}" or depth):
            depth += {"(": 1, ")": -1}.get(s.text[s.pos], 0)
            s.pos += 1
        extra = s.text[begin:s.pos].strip()
    s.expect("}", "'}' closing layout")
    if len(m2m) not in (0, rank) or sorted(m2m) != list(range(len(m2m))):
        raise s.error(f"a layout permuting {rank} dims", start)
    return Layout(tuple(m2m), extra)


# --- literals -----------------------------------------------------------------


def _read_scalar_token(s: Scanner, dtype: PrimitiveType):
    pos = s.mark()
    if dtype.is_complex:
        s.expect("(")
        re = _read_scalar_token(s, PrimitiveType.F64)
        s.expect(",")
        im = _read_scalar_token(s, PrimitiveType.F64)
        s.expect(")")
        return complex(re, im)
    s.skip_ws()
    start = s.pos
    while s.pos < len(s.text) and (s.text[s.pos] in NAME_CHARS or s.text[s.pos] in "+"):
        s.pos += 1
    tok = s.text[start:s.pos]
    if s.peek_raw() == "(" and tok.lstrip("-") == "nan":  # nan(0x7fc00001) payloads
        s.balanced()
    if not tok:
        raise s.error("a literal value", pos)
    if dtype is PrimitiveType.PRED:
        if tok in ("true", "false"):
            return tok == "true"
        if tok in ("0", "1"):
            return tok == "1"
        raise s.error("true or false", pos)
    try:
        if dtype.is_integral:
            return int(tok, 0)
        value = float(tok)
        return value
    except ValueError:
        raise s.error(f"a {dtype.value} value", pos) from None


def _read_nested(s: Scanner, dtype: PrimitiveType, depth: int):
    if depth > _MAX_DEPTH:
        raise s.error("less deeply nested literal")
    if s.accept("{"):
        items = []
        if not s.accept("}"):
            while True:
                items.append(_read_nested(s, dtype, depth + 1))
                if s.accept("}"):
                    break
                s.expect(",", "',' or '}' in literal")
        return items
    return _read_scalar_token(s, dtype)


def _flatten(value, dims: tuple[int, ...], s: Scanner, pos: int) -> list:
    if not dims:
        if isinstance(value, list):
            if len(value) == 1 and not isinstance(value[0], list):
                return value
            raise s.error("a scalar literal", pos)
        return [value]
    if not isinstance(value, list) or len(value) != dims[0]:
        raise s.error(f"a literal with {dims[0]} elements in this dimension (dims {list(dims)})", pos)
    out: list = []
    for v in value:
        out.extend(_flatten(v, dims[1:], s, pos))
    return out


def read_literal(s: Scanner, shape: ShapeLike, depth: int = 0) -> Literal:
    if isinstance(shape, TupleShape):
        s.expect("(", "'(' starting a tuple literal")
        elems = []
        for i, sub in enumerate(shape.elements):
            if i:
                s.expect(",")
            elems.append(read_literal(s, sub, depth + 1))
        s.expect(")")
        return Literal(shape, elements=tuple(elems))
    s.skip_ws()
    pos = s.mark()
    if s.accept("{...}"):
        return Literal.elided(shape)
    nested = _read_nested(s, shape.dtype, depth)
    if shape.num_elements == 0:
        return Literal(shape, np.zeros(shape.dims, shape.dtype.numpy))
    flat = _flatten(nested, shape.dims, s, pos)
    try:
        if shape.dtype.is_float or shape.dtype.is_complex:
            wide = np.array(flat, dtype=np.complex128 if shape.dtype.is_complex else np.float64)
            with np.errstate(over="ignore", invalid="ignore"):
                arr = wide.astype(shape.dtype.numpy)
            if np.any(~np.isfinite(arr.astype(wide.dtype)) & np.isfinite(wide)):  # XLA: "out of range"
                raise OverflowError
        else:
            arr = np.array(flat, dtype=shape.dtype.numpy)
    except (OverflowError, ValueError):
        raise s.error(f"values that fit in {shape.dtype.value}", pos) from None
    return Literal(shape, arr)


# --- instructions, computations, modules ---------------------------------------


def _check_constant_shape(s: Scanner, shape: ShapeLike, pos: int) -> None:
    """A literal needs array leaves that NumPy can hold: no token, no size beyond int64."""
    for leaf in shape.leaves():
        if not leaf.dtype.is_array_type:
            raise s.error(f"a constant of array type ({leaf} has no literal value; tokens come from after-all)",
                          pos)
        if not leaf.size_fits_int64:
            raise s.error(f"a constant whose byte size fits in int64 ({leaf} is too large)", pos)


def _read_attrs(s: Scanner) -> Attrs:
    items = []
    seen = set()
    while s.peek() == ",":
        save = s.pos
        s.accept(",")
        key_pos = s.mark()
        s.skip_ws()
        key_pos = s.mark()
        key = s.word("an attribute name")
        if not s.accept("="):
            s.pos = save
            break
        if key in seen:
            raise s.error(f"no duplicate attribute {key!r}", key_pos)
        seen.add(key)
        items.append((key, read_value(key, s)))
    return Attrs(items)


def _read_operands(s: Scanner) -> tuple[str, ...]:
    s.expect("(")
    names: list[str] = []
    if s.accept(")"):
        return ()
    while True:
        s.skip_ws()
        c = s.peek_raw()
        if c == "(":
            read_shape(s)  # tuple-shaped operand annotation
        elif c != "%":
            save = s.pos
            s.word("an operand")
            is_shape = s.peek_raw() == "["
            s.pos = save
            if is_shape:
                read_shape(s)
        names.append(s.name("an operand name"))
        if s.accept(")"):
            return tuple(names)
        s.expect(",", "',' or ')' in operand list")


def _read_instruction(s: Scanner) -> tuple[HloInstruction, bool]:
    is_root = s.accept_word("ROOT")
    name = s.name("an instruction name")
    s.expect("=", "'=' after instruction name")
    shape_pos = s.mark()
    shape = read_shape(s)
    pos = s.mark()
    op_text = s.word("an opcode")
    try:
        opcode = Opcode.from_text(op_text)
    except ValueError:
        raise s.error("a known opcode", pos) from None
    param_no = literal = None
    operands: tuple[str, ...] = ()
    if opcode is Opcode.PARAMETER:
        s.expect("(")
        param_no = s.integer("a parameter number")
        if param_no < 0:
            raise s.error("a non-negative parameter number")
        s.expect(")")
    elif opcode is Opcode.CONSTANT:
        _check_constant_shape(s, shape, shape_pos)
        s.expect("(")
        literal = read_literal(s, shape)
        s.expect(")", "')' closing constant")
    else:
        operands = _read_operands(s)
    attrs = _read_attrs(s)
    inst = HloInstruction(name, opcode, shape, operands, attrs, param_no, literal)
    return inst, is_root


def _skip_signature(s: Scanner) -> None:
    s.expect("(")
    if not s.accept(")"):
        while True:
            s.name("a parameter name")
            s.expect(":")
            read_shape(s)
            if s.accept(")"):
                break
            s.expect(",", "',' or ')' in computation signature")
    s.expect("->", "'->' in computation signature")
    read_shape(s)


def _read_computation(s: Scanner) -> tuple[HloComputation, bool]:
    is_entry = s.accept_word("ENTRY")
    name_pos = s.mark()
    name = s.name("a computation name")
    if s.peek() == "(":
        _skip_signature(s)
    s.expect("{", "'{' opening computation body")
    instructions: list[HloInstruction] = []
    seen: set[str] = set()
    root = None
    while not s.accept("}"):
        if s.at_end():
            raise s.error(f"'}}' closing computation %{name}")
        pos = s.mark()
        inst, is_root = _read_instruction(s)
        if inst.name in seen:
            raise s.error(f"a unique instruction name (%{inst.name} is defined twice)", pos)
        seen.add(inst.name)
        if is_root:
            if root is not None:
                raise s.error(f"one ROOT in computation %{name}", pos)
            root = inst.name
        instructions.append(inst)
    if not instructions:
        raise s.error(f"at least one instruction in computation %{name}", name_pos)
    attrs = _read_attrs(s)
    return HloComputation(name, tuple(instructions), root or instructions[-1].name, attrs), is_entry


def parse_module(text: str) -> HloModule:
    """Parse XLA HLO text into an ``HloModule`` (raises ``HloParseError``)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_module expects str, got {type(text).__name__}")
    s = Scanner(text)
    if not s.accept_word("HloModule"):
        raise s.error("'HloModule' header")
    name = s.name("a module name")
    attrs = _read_attrs(s)
    comps: list[HloComputation] = []
    entry = None
    names: set[str] = set()
    while not s.at_end():
        pos = s.mark()
        comp, is_entry = _read_computation(s)
        if comp.name in names:
            raise s.error(f"a unique computation name (%{comp.name} is defined twice)", pos)
        names.add(comp.name)
        if is_entry:
            if entry is not None:
                raise s.error("only one ENTRY computation", pos)
            entry = comp.name
        comps.append(comp)
    if not comps:
        raise s.error("at least one computation")
    return HloModule(name, tuple(comps), entry or comps[-1].name, attrs)


def parse_shape(text: str) -> ShapeLike:
    s = Scanner(text)
    shape = read_shape(s)
    if not s.at_end():
        raise s.error("end of shape")
    return shape


__all__ = ["parse_module", "parse_shape", "read_shape", "HloParseError"]
