"""Symbolic dimensions: one kernel source for every value of some input dims, found by probing.

A cluster whose inputs have unknown dims is generated at several *probe* values of its symbols
(``s0, s1, ...``: the unknown dims, each bound to one input dim) through the ordinary pipeline, in
*probe mode* (``probing``): every scratch allocation gets a slot of its own whose offset the kernel
computes at run time (``tfxla_off[k]``), and the ABI pieces that name dims (``abi.emit_run_checks``,
``abi.emit_exports``) write markers instead. ``generalize`` then reads the probe sources side by side:

1. the sources must be the same text but for numeric literals (and comments); a string literal, an
   identifier, a loop unrolled per size or any other structure that differs refuses the cluster;
2. each literal that differs is fitted, on a grid of two values per symbol, by the unique multilinear
   polynomial in the symbols (``1, s0, s1, s0*s1, ...``) with integer coefficients: a size, a bound, a
   stride or an offset (where that fails, ``NotPolynomial``, on a grid of three values per symbol with
   squares: ``s1*s1`` of a ``[B, T, T]`` attention matrix). A float literal must be such a polynomial
   (``(float)(s1)``, a mean's divisor) or its reciprocal; anything else (a literal inside a static or
   stack array, a poisoned scratch offset used in arithmetic) refuses;
3. **the safety net**: the fitted source, evaluated at held-out *verify* points (values the grid did not
   use, ordered differently), must give every literal that the verify probes' own sources hold. A
   decision that changes with the size (an unrolled loop, a reuse that fits only at some sizes, a
   special case) shows up as a differing literal or text, and the cluster falls back to static shapes.

The kernel (``tfxla_abi_version`` 3) binds its symbols from ``in_dims`` at the start of every call
(``tfxla_bind``: checks every input dim against its expression, the status ``STATUS_INVALID_ARGUMENT``
naming the input; computes the scratch slots' offsets), exports ``tfxla_shapes(in_dims, out_dims,
&scratch_bytes, err, errlen)`` for its caller to allocate outputs and scratch, and runs serially (its
symbols are thread-local; ``rt`` is ignored). Its signature has ``-1`` for each symbolic dim, the dims'
expressions in ``dim_exprs`` and the symbols' bindings in ``symbols``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterator, Sequence

import numpy as np

from backends.codegen import abi as abi_module
from backends.codegen.abi import STATUS_INVALID_ARGUMENT
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.buffer_assignment import PROBE_SLOTS

SYMBOLIC_ABI_VERSION = 3
RUN_CHECKS_MARKER = "/*@tfxla_run_checks@*/"
EXPORTS_MARKER = "/*@tfxla_exports@*/"
STATE_ANCHOR = "typedef struct tfxla_state"
_POISON = 1 << 40  # a slot's int value: any arithmetic on it prints a literal this large, which is refused


class NotSymbolic(ValueError):
    """The probes' sources cannot be generalized; the message says where (the first differing line)."""


class NotPolynomial(NotSymbolic):
    """A literal or dim is no polynomial of the degree fitted: a grid of higher degree may fit it."""


class Slot(int):
    """A probe's scratch offset: prints as the kernel's run-time ``tfxla_off[k]``."""

    k: int

    def __new__(cls, k: int) -> "Slot":
        slot = super().__new__(cls, _POISON + (k << 20))
        slot.k = k
        return slot

    def __str__(self) -> str:
        return f"tfxla_off[{self.k}]"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return str(self)


@dataclass
class Slots:
    """The scratch allocations of one probe generation, in order: their sizes in bytes."""

    sizes: list[int] = field(default_factory=list)

    def new(self, nbytes: int) -> Slot:
        self.sizes.append(int(nbytes))
        return Slot(len(self.sizes) - 1)


@contextlib.contextmanager
def probing() -> Iterator[Slots]:
    """Generate code in probe mode (see the module docstring); yields the generation's slots."""
    slots = Slots()
    token, marker = PROBE_SLOTS.set(slots), abi_module.PROBING.set(True)
    try:
        yield slots
    finally:
        PROBE_SLOTS.reset(token)
        abi_module.PROBING.reset(marker)


# --- polynomials over the symbols -------------------------------------------------------------------------
Point = tuple[int, ...]  # a value per symbol


@dataclass(frozen=True)
class Poly:
    """An integer polynomial: monomial (a sorted tuple of symbol indices, ``(1, 1)`` is ``s1*s1``) -> coefficient."""

    terms: tuple[tuple[tuple[int, ...], int], ...]

    def __call__(self, point: Point) -> int:
        return sum(c * math.prod(point[i] for i in mono) for mono, c in self.terms)

    @property
    def symbols(self) -> set[int]:
        return {i for mono, _ in self.terms for i in mono}

    @property
    def symbol(self) -> int | None:
        """``j`` when the polynomial is exactly ``s_j``."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            return self.terms[0][0][0]
        return None

    def c(self) -> str:
        """C text (int64 arithmetic), parenthesized."""
        parts = []
        for mono, coef in self.terms:
            factors = [f"tfxla_sym[{i}]" for i in mono]
            if not factors:
                parts.append(f"INT64_C({coef})")
            else:
                parts.append("*".join(([f"INT64_C({coef})"] if coef != 1 else []) + factors))
        return "(" + (" + ".join(parts) if parts else "INT64_C(0)") + ")"

    def text(self, names: Sequence[str]) -> str:
        """Readable text (``s0*s1*4``) for signatures and messages."""
        parts = []
        for mono, coef in self.terms:
            f = [names[i] for i in mono] + ([str(coef)] if coef != 1 or not mono else [])
            parts.append("*".join(f))
        return " + ".join(parts) or "0"


def _monomials(k: int, degree: int) -> list[tuple[int, ...]]:
    """Every monomial with each symbol's power at most ``degree``, lowest total degree first."""
    monos = [tuple(i for i in range(k) for _ in range(e[i])) for e in itertools.product(range(degree + 1), repeat=k)]
    return sorted(monos, key=lambda m: (len(m), m))


def fit(points: Sequence[Point], values: Sequence[int]) -> Poly | None:
    """The polynomial through ``values`` at the grid ``points`` (``grid``: ``degree + 1`` values per symbol, each
    symbol's power at most ``degree``); None if its coefficients are not integers."""
    k = len(points[0])
    levels = round(len(points) ** (1 / k)) if k else 1
    monos = _monomials(k, levels - 1)
    rows = [[Fraction(math.prod(p[i] for i in m)) for m in monos] + [Fraction(v)] for p, v in zip(points, values)]
    n = len(monos)
    for col in range(n):  # Gauss-Jordan over the rationals
        pivot = next((r for r in range(col, len(rows)) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [x / rows[col][col] for x in rows[col]]
        for r in range(len(rows)):
            if r != col and rows[r][col] != 0:
                rows[r] = [a - rows[r][col] * b for a, b in zip(rows[r], rows[col])]
    coefs = [rows[i][n] for i in range(n)]
    if any(c.denominator != 1 for c in coefs):
        return None
    poly = Poly(tuple((m, int(c)) for m, c in zip(monos, coefs) if c != 0))
    return poly if all(poly(p) == v for p, v in zip(points, values)) else None


def grid(levels: Sequence[Sequence[int]]) -> list[Point]:
    """Every point whose value for symbol ``j`` is one of ``levels[j]`` (the same number of values each)."""
    return [tuple(p) for p in itertools.product(*levels)]


# --- reading the probe sources ------------------------------------------------------------------------------
_LEX = re.compile(r'(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<com>/\*.*?\*/)'
                  r'|(?<![\w.])(?P<num>\d+\.\d+(?:e[-+]?\d+)?f?|\d+(?:\.\d+)?e[-+]?\d+f?|\d+)(?![\w.])', re.S)


_STACK_ARRAY = re.compile(r"(?:const\s+)?[A-Za-z_]\w*\s+[A-Za-z_]\w*\[[^\]]*\](?:\s*__attribute__\(\(.*\)\))?\s*;")


def _lex(source: str) -> list[tuple[str, str]]:
    """Alternating (kind, text) pieces: "txt" between tokens, then "str", "com" or "num"."""
    out, pos = [], 0
    for m in _LEX.finditer(source):
        out.append(("txt", source[pos:m.start()]))
        out.append((m.lastgroup or "txt", m.group()))
        pos = m.end()
    out.append(("txt", source[pos:]))
    return out


def _line_at(pieces: list[tuple[str, str]], index: int) -> str:
    before = "".join(t for _, t in pieces[:index])
    start = before.rfind("\n") + 1
    after = "".join(t for _, t in pieces[index:index + 40])
    return (before[start:] + after.split("\n", 1)[0]).strip()[:200]


def _float_expr(values: Sequence[float], points: Sequence[Point], is_f32: bool):
    """(kind, poly) when the float literals are a polynomial (kind "p") or its reciprocal (kind "r")."""
    cast = (lambda x: float(np.float32(x))) if is_f32 else float
    if all(float(v).is_integer() for v in values):
        poly = fit(points, [int(v) for v in values])
        if poly is not None and all(cast(poly(p)) == v for p, v in zip(points, values)):
            return "p", poly
    if all(v != 0 and abs(1 / v - round(1 / v)) < 1e-3 for v in values):
        poly = fit(points, [round(1 / v) for v in values])
        if poly is not None and all(poly(p) != 0 and cast(1.0 / poly(p)) == v for p, v in zip(points, values)):
            return "r", poly
    return None


def _float_value(text: str) -> float:
    return float(text[:-1] if text.endswith("f") else text)


@dataclass
class Template:
    """A source generalized over the symbols: pieces with, at each differing literal, its expression."""

    pieces: list  # str, or (kind, Poly, is_f32) for a literal: kind "i" int, "p" float poly, "r" reciprocal

    def symbols(self) -> set[int]:
        """The symbols the generalized source uses."""
        return {i for p in self.pieces if not isinstance(p, str) for i in p[1].symbols}

    def text(self) -> str:
        out = []
        for p in self.pieces:
            if isinstance(p, str):
                out.append(p)
                continue
            kind, poly, f32 = p
            t = "float" if f32 else "double"
            out.append(poly.c() if kind == "i" else f"(({t})({poly.c()}))" if kind == "p"
                       else f"(({t})1/({t})({poly.c()}))")
        return "".join(out)

    def check(self, point: Point, source: str) -> None:
        """Raise ``NotSymbolic`` unless this template evaluated at ``point`` gives ``source``."""
        pieces = _lex(source)
        if len(pieces) != len(self.pieces):
            raise NotSymbolic(f"at the verify point {point} the source has another structure")
        for k, (mine, (kind, text)) in enumerate(zip(self.pieces, pieces)):
            if isinstance(mine, str):
                if mine != text and kind != "com":
                    raise NotSymbolic(f"at the verify point {point} the source differs: {_line_at(pieces, k)!r}")
                continue
            want, poly, f32 = mine
            if kind != "num":
                raise NotSymbolic(f"at the verify point {point} a literal is gone: {_line_at(pieces, k)!r}")
            got = _float_value(text) if want != "i" else int(text) if text.isdigit() else None
            cast = (lambda x: float(np.float32(x))) if f32 else float
            expected = poly(point) if want == "i" else cast(poly(point)) if want == "p" else cast(1.0 / poly(point))
            if got != expected:
                raise NotPolynomial(f"at the verify point {point} a size-dependent literal is {text}, not "
                                  f"{expected}: {_line_at(pieces, k)!r}")


def generalize(points: Sequence[Point], sources: Sequence[str]) -> Template:
    """The template of ``sources`` generated at the grid ``points`` (``grid``); raises ``NotSymbolic``."""
    lexed = [_lex(s) for s in sources]
    if len({len(x) for x in lexed}) != 1:
        first = next(k for k, ps in enumerate(zip(*lexed)) if len({p for p in ps}) > 1)
        raise NotSymbolic(f"the probes' sources differ in structure near {_line_at(lexed[0], first)!r}")
    pieces: list = []
    for k, column in enumerate(zip(*lexed)):
        kinds = {kind for kind, _ in column}
        texts = [t for _, t in column]
        if len(set(texts)) == 1:
            if texts[0].isdigit() and int(texts[0]) >= _POISON:
                raise NotSymbolic(f"a scratch offset is used in arithmetic: {_line_at(lexed[0], k)!r}")
            pieces.append(texts[0])
            continue
        line = _line_at(lexed[0], k)
        if kinds == {"com"}:
            pieces.append("/* (symbolic) */")
            continue
        if kinds != {"num"}:
            raise NotSymbolic(f"the probes' sources differ at {line!r}")
        if line.startswith("static "):
            raise NotSymbolic(f"a static array depends on a symbolic dim: {line!r}")
        if _STACK_ARRAY.match(line):  # sized for the probes' small dims: at run time it may not fit the stack
            raise NotSymbolic(f"a stack array is sized by a symbolic dim: {line!r}")
        if all(t.isdigit() for t in texts):
            values = [int(t) for t in texts]
            if max(values) >= _POISON:
                raise NotSymbolic(f"a scratch offset is used in arithmetic: {line!r}")
            poly = fit(points, values)
            if poly is None:
                raise NotPolynomial(f"a literal ({', '.join(texts)} at {list(points)}) is no polynomial in the "
                                  f"symbols: {line!r}")
            pieces.append(("i", poly, False))
            continue
        f32 = all(t.endswith("f") for t in texts)
        found = _float_expr([_float_value(t) for t in texts], points, f32)
        if found is None:
            raise NotPolynomial(f"a float literal ({', '.join(texts)}) depends on the dims: {line!r}")
        pieces.append((found[0], found[1], f32))
    return Template(pieces)


# --- the symbolic kernel ABI -----------------------------------------------------------------------------
@dataclass
class SymbolicAbi:
    """What the kernel's ABI says about its dims, fitted from the probes' signatures and slots."""

    names: list[str]  # symbol names s0, s1, ...
    bindings: list[tuple[int, int] | None]  # symbol j = input bindings[j][0]'s dim bindings[j][1]; None: unused
    inputs: list[list[Poly]]  # per input, per dim
    outputs: list[list[Poly]]
    slots: list[Poly]  # scratch slot sizes in bytes
    labels: list[str]  # per input, for messages (C format text)


def fit_dims(points: Sequence[Point], per_probe: Sequence[Sequence[Sequence[int]]], what: str) -> list[list[Poly]]:
    """Fit each dim of each shape (``per_probe[p][k]`` the dims of shape ``k`` at probe ``p``)."""
    out = []
    for k, shapes in enumerate(zip(*per_probe)):
        if len({len(s) for s in shapes}) != 1:
            raise NotSymbolic(f"{what} {k} changes rank between probes")
        dims = []
        for d, values in enumerate(zip(*shapes)):
            poly = fit(points, list(values))
            if poly is None:
                raise NotPolynomial(f"{what} {k} dim {d} ({list(values)}) is no polynomial in the symbols")
            dims.append(poly)
        out.append(dims)
    return out


def bind_symbols(inputs: list[list[Poly]], n: int, used: set[int]) -> list[tuple[int, int] | None]:
    """For each symbol, the first input dim that is exactly it (None for one the kernel does not use);
    raises when a symbol it uses has none."""
    found: dict[int, tuple[int, int]] = {}
    for k, dims in enumerate(inputs):
        for d, poly in enumerate(dims):
            j = poly.symbol
            if j is not None and j not in found:
                found[j] = (k, d)
    missing = sorted(j for j in used if j not in found)
    if missing:
        raise NotSymbolic(f"symbol(s) {missing} appear in no input dim by themselves")
    return [found.get(j) for j in range(n)]


def _aligned(poly: Poly) -> str:
    e = poly.c()
    return f"((({e} > 0 ? {e} : 1) + 63) / 64 * 64)"


def emit_bind(out: IndentedBuffer, abi: SymbolicAbi) -> None:
    """Thread-local symbols and slot offsets, and ``tfxla_bind`` that sets them from ``in_dims``."""
    out.line(f"static __thread int64_t tfxla_sym[{max(len(abi.names), 1)}];")
    out.line(f"static __thread int64_t tfxla_off[{len(abi.slots) + 1}];")
    with out.block("static int tfxla_bind(const int64_t* in_dims, char* err, size_t errlen)"):
        starts, pos = [], 0
        for dims in abi.inputs:
            starts.append(pos)
            pos += len(dims)
        for j, binding in enumerate(abi.bindings):
            out.line(f"tfxla_sym[{j}] = {'0' if binding is None else f'in_dims[{starts[binding[0]] + binding[1]}]'};")
        for k, dims in enumerate(abi.inputs):
            for d, poly in enumerate(dims):
                if poly.symbol is not None and abi.bindings[poly.symbol] == (k, d):
                    continue
                used = sorted({i for m, _ in poly.terms for i in m})
                where = ", ".join(f"{abi.names[i]} is {abi.labels[b[0]]} dim {b[1]}"
                                  for i in used for b in [abi.bindings[i]] if b is not None)
                why = (f"the kernel was compiled for {poly(())}" if not used else
                       f"it must be {poly.text(abi.names)} = %lld ({where})")
                value = "" if "%lld" not in why else f", (long long){poly.c()}"
                with out.block(f"if (in_dims[{starts[k] + d}] != {poly.c()})"):
                    out.line(f'snprintf(err, errlen, "{abi.labels[k]}: dimension {d} is %lld, but {why}", '
                             f'(long long)in_dims[{starts[k] + d}]{value});')
                    out.line(f"return {STATUS_INVALID_ARGUMENT};")
        out.line("tfxla_off[0] = 0;")
        for k, size in enumerate(abi.slots):
            out.line(f"tfxla_off[{k + 1}] = tfxla_off[{k}] + {_aligned(size)};")
        out.line("(void)err; (void)errlen; (void)in_dims;")
        out.line("return 0;")


def signature(module: str, abi: SymbolicAbi, inputs: Sequence[dict], outputs: Sequence[dict]) -> dict:
    """The v3 signature: the probes' entries with ``-1`` for symbolic dims and their expressions."""
    def entries(base: Sequence[dict], polys: list[list[Poly]]) -> list[dict]:
        out = []
        for e, dims in zip(base, polys):
            out.append({**e, "dims": [p(()) if not any(m for m, _ in p.terms) else -1 for p in dims],
                        "dim_exprs": [p.text(abi.names) for p in dims]})
        return out

    return {"abi_version": SYMBOLIC_ABI_VERSION, "module": module, "inputs": entries(inputs, abi.inputs),
            "outputs": entries(outputs, abi.outputs), "scratch_bytes": 0,
            "symbols": [f"{n} = input {b[0]} dim {b[1]}" for n, b in zip(abi.names, abi.bindings) if b is not None]}


def emit_exports(out: IndentedBuffer, sig: dict, abi: SymbolicAbi) -> None:
    """Version 3, the signature, and ``tfxla_shapes`` (output dims and scratch bytes for ``in_dims``)."""
    out.line(f"TFXLA_EXPORT int tfxla_abi_version(void) {{ return {SYMBOLIC_ABI_VERSION}; }}")
    out.line(f"TFXLA_EXPORT const char* tfxla_signature(void) {{ return {json.dumps(json.dumps(sig))}; }}")
    out.line("TFXLA_EXPORT int64_t tfxla_scratch_bytes(void) { return 0; }")
    with out.block("TFXLA_EXPORT int tfxla_shapes(const int64_t* in_dims, int64_t* out_dims, int64_t* scratch_bytes, "
                   "char* err, size_t errlen)"):
        out.line("const int status = tfxla_bind(in_dims, err, errlen);")
        out.line("if (status) return status;")
        pos = 0
        for dims in abi.outputs:
            for poly in dims:
                out.line(f"out_dims[{pos}] = {poly.c()};")
                pos += 1
        out.line(f"*scratch_bytes = tfxla_off[{len(abi.slots)}];")
        out.line("(void)out_dims;")
        out.line("return 0;")


def emit_run_checks(out: IndentedBuffer) -> None:
    """The start of ``tfxla_run``: state check, symbols bound from ``in_dims``, and serial execution."""
    out.line('if (!state) { snprintf(err, errlen, "tfxla_run: state is NULL (call tfxla_init first)"); return 1; }')
    out.line("{ const int status = tfxla_bind(in_dims, err, errlen); if (status) return status; }")
    out.line("rt = NULL;  /* symbols and slot offsets are this thread's */")


def assemble(template_text: str, abi: SymbolicAbi, sig: dict) -> str:
    """The final kernel source: the template with the markers replaced by the symbolic ABI."""
    if template_text.count(RUN_CHECKS_MARKER) != 1 or template_text.count(EXPORTS_MARKER) != 1 \
            or template_text.count(STATE_ANCHOR) != 1:
        raise NotSymbolic("the probe source lacks the ABI markers (a backend without symbolic support)")
    bind, exports, checks = IndentedBuffer(), IndentedBuffer(), IndentedBuffer()
    emit_bind(bind, abi)
    emit_exports(exports, sig, abi)
    emit_run_checks(checks)
    text = template_text.replace(STATE_ANCHOR, bind.getvalue() + STATE_ANCHOR, 1)
    text = _replace_line(text, EXPORTS_MARKER, exports.getvalue())
    return _replace_line(text, RUN_CHECKS_MARKER, checks.getvalue())


def _replace_line(text: str, marker: str, block: str) -> str:
    start = text.index(marker)
    indent = text[text.rfind("\n", 0, start) + 1:start]
    body = "\n".join(indent + ln if ln else ln for ln in block.rstrip("\n").split("\n"))
    return text[:start - len(indent)] + body + text[start + len(marker):]
