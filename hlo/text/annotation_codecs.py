"""Text codecs of the kernel-shape annotations (``hlo/annotations.py``).

``READERS`` (attribute key -> reader) joins ``attr_codecs.PARSERS``; ``FORMATTERS``
(value type -> printer) is what ``attr_codecs.format_value`` uses for these
types, so ``parse_module(module.to_text()) == module`` holds for them as for
every other attribute. Floats print as Python's shortest round-tripping
``repr`` (``inf``, ``-inf`` included).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from hlo.annotations import COLUMN_REDUCE, POST_OPS, ROW_PROGRAM, PostOp, PostOpChain, RowProgram, RowRole
from hlo.text.scanner import Scanner

_FLOAT_CHARS = frozenset("0123456789.eE+-infa")


def _fields(s: Scanner, read: dict[str, Callable[[Scanner], Any]], what: str) -> dict[str, Any]:
    """``{key=value,...}`` with keys from ``read``, each at most once."""
    s.expect("{")
    out: dict[str, Any] = {}
    while not s.accept("}"):
        if out:
            s.expect(",", "',' or '}'")
        pos = s.mark()
        key = s.word(f"a {what} field")
        if key not in read or key in out:
            raise s.error(f"one of {', '.join(k for k in read if k not in out)}", pos)
        s.expect("=")
        out[key] = read[key](s)
    return out


def _float(s: Scanner) -> float:
    pos = s.mark()
    text = s.chars(_FLOAT_CHARS, "a number")
    try:
        value = float(text)
    except ValueError:
        raise s.error("a number", pos) from None
    if math.isnan(value):
        raise s.error("a number that is not NaN", pos)
    return value


def _plus_zero(value: float) -> bool:
    return value == 0 and math.copysign(1.0, value) > 0


def _fmt_float(value: float) -> str:
    return repr(float(value))


def read_row_program(s: Scanner) -> RowProgram:
    pos = s.mark()

    def role(sc: Scanner) -> RowRole:
        p = sc.mark()
        word = sc.word("a row role")
        try:
            return RowRole(word)
        except ValueError:
            raise sc.error(f"a row role ({', '.join(r.value for r in RowRole)})", p) from None

    f = _fields(s, {"group": Scanner.integer, "role": role, "rows": Scanner.integer, "cols": Scanner.integer,
                    "reduce": lambda sc: sc.name("an instruction name")}, "row_program")
    missing = [k for k in ("group", "role", "rows", "cols") if k not in f]
    if missing:
        raise s.error(f"row_program with {', '.join(missing)}", pos)
    return RowProgram(f["group"], f["role"], f["rows"], f["cols"], f.get("reduce"))


def format_row_program(v: RowProgram) -> str:
    reduce = f",reduce=%{v.reduce}" if v.reduce is not None else ""
    return f"{{group={v.group},role={v.role.value},rows={v.rows},cols={v.cols}{reduce}}}"


def _read_dims(s: Scanner) -> tuple[int | None, ...]:
    s.expect("{")
    dims: list[int | None] = []
    while not s.accept("}"):
        if dims:
            s.expect(",", "',' or '}'")
        dims.append(None if s.accept("_") else s.integer("a dim or _"))
    return tuple(dims)


def _read_post_op(s: Scanner) -> PostOp:
    alg = s.word("a post-op algorithm")
    if not s.accept("("):
        return PostOp(alg)
    if s.peek() == "%":
        operand = s.name("an instruction name")
        s.expect(",")
        s.expect("dims")
        s.expect("=")
        dims = _read_dims(s)
        s.expect(")")
        return PostOp(alg, operand=operand, dims=dims)
    alpha = _float(s)
    s.expect(",")
    beta = _float(s)
    s.expect(")")
    return PostOp(alg, alpha, beta)


def _read_post_op_list(s: Scanner) -> tuple[PostOp, ...]:
    s.expect("{")
    ops: list[PostOp] = []
    while not s.accept("}"):
        if ops:
            s.expect(",", "',' or '}'")
        ops.append(_read_post_op(s))
    return tuple(ops)


def _format_post_op(op: PostOp) -> str:
    if op.operand is not None:
        dims = ",".join("_" if d is None else str(d) for d in op.dims)
        return f"{op.alg}(%{op.operand},dims={{{dims}}})"
    if _plus_zero(op.alpha) and _plus_zero(op.beta):
        return op.alg
    return f"{op.alg}({_fmt_float(op.alpha)},{_fmt_float(op.beta)})"


def _format_post_op_list(ops: tuple[PostOp, ...]) -> str:
    return "{" + ",".join(_format_post_op(op) for op in ops) + "}"


def read_post_op_chain(s: Scanner) -> PostOpChain:
    pos = s.mark()
    f = _fields(s, {"cut": lambda sc: sc.name("an instruction name"), "ops": _read_post_op_list,
                    "fast": _read_post_op_list}, "post_ops")
    if "cut" not in f:
        raise s.error("post_ops with a cut", pos)
    return PostOpChain(f["cut"], f.get("ops", ()), f.get("fast"))


def format_post_op_chain(v: PostOpChain) -> str:
    fast = f",fast={_format_post_op_list(v.fast)}" if v.fast is not None else ""
    return f"{{cut=%{v.cut},ops={_format_post_op_list(v.ops)}{fast}}}"


READERS: dict[str, Callable[[Scanner], Any]] = {
    ROW_PROGRAM: read_row_program,
    POST_OPS: read_post_op_chain,
    COLUMN_REDUCE: Scanner.boolean,
}
FORMATTERS: dict[type, Callable[[Any], str]] = {
    RowProgram: format_row_program,
    PostOpChain: format_post_op_chain,
}
