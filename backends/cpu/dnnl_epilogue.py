"""Matching the elementwise epilogue of an output fusion to oneDNN post-ops.

``match_epilogue(comp, hero)`` finds, for the fused computation ``comp`` whose
dot/convolution is ``hero``, the latest instruction ``cut`` that equals
``post_ops(hero)`` EXACTLY (up to float rounding of constants) and through which
every path from the root to the hero passes. ``cut == comp.root_name`` is a full
match; otherwise the backend computes ``cut`` with oneDNN and the rest of the
epilogue with the elemental emitter (``cut == hero`` when nothing matches).
The ``DnnlEpilogues`` pass (``dnnl_epilogues.py``) writes the match into the
HLO as the fusion's ``post_ops=`` annotation; ``kernels_dnnl`` reads it there.

Recognised, bottom-up from the hero (each step must keep the hero's dims and type):
* a binary op with a side input: ``+ - * /`` of a fusion parameter or constant,
  full-shape or broadcast (bias, residual, per-channel scale, scalar parameter), or the broadcast
  of a small value computed from them alone (a batch norm's per-channel scale and shift, which the
  backend computes into scratch first);
* ``x*c``, ``x+c``, ``x-c``, ``c-x``, ``-x`` with a scalar constant (oneDNN ``linear``);
* ``tanh``, ``logistic``, ``abs``, ``sqrt``, ``log``, ``x*x``,
  ``x*logistic(k*x)`` (swish, tf.nn.silu), ``elu`` (select on ``x<0`` of ``expm1(x)``), and gelu in its tanh form
  ``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))`` and erf form ``0.5*x*(1+erf(x/sqrt(2)))``, with
  products and sums in any order and grouping (patterns below; commutative operands permuted);
* ``select(k < x, x, k)`` (``clip``): the one max-like form whose NaN result, ``k``, is also oneDNN's;
* with ``exact_nan=False`` only, ``select(x != x, k, x)`` and ``select(x == x, x, k)`` (NaN replaced by a
  constant, as TF's MaxPool lowering does before the pool): nothing, the accumulator being no NaN.

NaN is kept exactly as the evaluator keeps it. oneDNN's ``relu``, ``clip`` and binary ``max``/``min``
(x86: ``maxps``/``minps`` with the constant or side operand second) return the bound or the side value
for a NaN accumulator, where HLO ``maximum``/``minimum``/``clamp`` and TF's select lowering of Relu and
Relu6 propagate it (as TF eager and XLA do), and oneDNN's ``exp`` returns +inf for NaN. No chain of
cheap post-ops can tell a NaN from -inf (both would have to leave ``maxps``'s bound), so those ops are
not post-ops: the cut stops before them and the backend's own loop applies them, in place when it
may (``tail_in_place``). With ``exact_nan=False`` they are (``NAN_MASKING``): the fast primitive that
``dnnl_guard`` runs only when the call's inputs prove the accumulator finite.
Known deviation: oneDNN's ``gelu_erf`` returns NaN for +inf (the evaluator: +inf).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Union

from hlo.annotations import PostOp
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode as O
from hlo.shapes import Shape

INF = math.inf


def _eltwise(alg: str, alpha: float = 0.0, beta: float = 0.0) -> PostOp:
    """An elementwise post-op ``dnnl_eltwise_<alg>``."""
    return PostOp(alg, alpha, beta)


def _binary(alg: str, operand: str, dim_map: tuple[int | None, ...]) -> PostOp:
    """A binary post-op ``dnnl_binary_<alg>`` whose second operand is ``operand`` (a parameter or constant
    of the fused computation, or a small value computed from them); ``dim_map[d]`` is the operand dim
    read at output dim ``d`` (None: broadcast)."""
    return PostOp(alg, operand=operand, dims=dim_map)


@dataclass(frozen=True)
class EpilogueMatch:
    cut: str
    ops: tuple[PostOp, ...]


# --- patterns ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pat:
    op: O | str  # an opcode, "less" (compare LT/LE, GT/GE with swapped operands), "isnan"/"notnan" (x != x, x == x)
    children: tuple = ()


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Capture:
    key: str  # a scalar constant bound by name (equal wherever it recurs)


X = "X"


def p(op, *children) -> Pat:
    return Pat(op, tuple(Const(float(c)) if isinstance(c, (int, float)) else c for c in children))


K, LO, HI = Capture("k"), Capture("lo"), Capture("hi")
_ASSOC = (O.ADD, O.MULTIPLY)


def _clip(lo, hi):
    return lambda b: (_eltwise("clip", lo(b), hi(b)),)


_GELU_TANH = p(O.MULTIPLY, 0.5, X, p(O.ADD, 1, p(O.TANH, p(O.MULTIPLY, math.sqrt(2 / math.pi),
                                                            p(O.ADD, X, p(O.MULTIPLY, 0.044715, X, X, X))))))
_GELU_ERF = p(O.MULTIPLY, 0.5, X, p(O.ADD, 1, p(O.ERF, p(O.MULTIPLY, X, 1 / math.sqrt(2)))))

# Keyed by the opcode of the instruction matched; each maps a binding to the post-ops it stands for.
TEMPLATES: dict[O, list[tuple[Pat, object]]] = {
    O.MULTIPLY: [(_GELU_TANH, lambda b: (_eltwise("gelu_tanh"),)),
                 (_GELU_ERF, lambda b: (_eltwise("gelu_erf"),)),
                 (p(O.MULTIPLY, X, p(O.LOGISTIC, X)), lambda b: (_eltwise("swish", 1.0),)),
                 (p(O.MULTIPLY, X, p(O.LOGISTIC, p(O.MULTIPLY, K, X))), lambda b: (_eltwise("swish", b["k"]),)),
                 (p(O.MULTIPLY, X, X), lambda b: (_eltwise("square"),)),
                 (p(O.MULTIPLY, X, K), lambda b: (_eltwise("linear", b["k"], 0.0),))],
    O.ADD: [(p(O.ADD, X, K), lambda b: (_eltwise("linear", 1.0, b["k"]),))],
    O.SUBTRACT: [(p(O.SUBTRACT, X, K), lambda b: (_eltwise("linear", 1.0, -b["k"]),)),
                 (p(O.SUBTRACT, K, X), lambda b: (_eltwise("linear", -1.0, b["k"]),))],
    O.DIVIDE: [(p(O.DIVIDE, X, K), lambda b: (_eltwise("linear", 1.0 / b["k"], 0.0),))],
    O.NEGATE: [(p(O.NEGATE, X), lambda b: (_eltwise("linear", -1.0, 0.0),))],
    O.TANH: [(p(O.TANH, X), lambda b: (_eltwise("tanh"),))],
    O.LOGISTIC: [(p(O.LOGISTIC, X), lambda b: (_eltwise("logistic"),))],
    O.ABS: [(p(O.ABS, X), lambda b: (_eltwise("abs"),))],
    O.SQRT: [(p(O.SQRT, X), lambda b: (_eltwise("sqrt"),))],
    O.LOG: [(p(O.LOG, X), lambda b: (_eltwise("log"),))],
    O.SELECT: [
        # TF's std::max/std::min lowering of Relu and Relu6 (select(x < k, k, x), select(k < x, k, x)),
        # maximum, minimum and clamp pass NaN on; oneDNN's clip maps it to its lower bound, so only
        # select(k < x, x, k), whose NaN result is k, is a clip (see the module docstring).
        (p(O.SELECT, p("less", K, X), X, K), _clip(lambda b: b["k"], lambda b: INF)),
        (p(O.SELECT, p("less", X, 0), p(O.EXPONENTIAL_MINUS_ONE, X), X), lambda b: (_eltwise("elu", 1.0),)),
        (p(O.SELECT, p("less", 0, X), X, p(O.EXPONENTIAL_MINUS_ONE, X)), lambda b: (_eltwise("elu", 1.0),)),
    ],
}

# Binary post-ops with a side input: opcode -> (oneDNN algorithm, commutative). Not max/min: oneDNN's
# return the side value where the accumulator is NaN.
BINARY = {O.ADD: ("add", True), O.MULTIPLY: ("mul", True), O.SUBTRACT: ("sub", False),
          O.DIVIDE: ("div", False)}

# The post-ops that are exact only while the accumulator is not NaN (oneDNN returns the bound, the side
# value, or +inf for exp): matched with ``exact_nan=False`` for the fast primitive that ``dnnl_guard``
# runs when the call's inputs are proven to keep every intermediate finite.
NAN_MASKING: dict[O, list[tuple[Pat, object]]] = {
    O.EXPONENTIAL: [(p(O.EXPONENTIAL, X), lambda b: (_eltwise("exp"),))],
    O.MAXIMUM: [(p(O.MAXIMUM, X, K), _clip(lambda b: b["k"], lambda b: INF))],
    O.MINIMUM: [(p(O.MINIMUM, X, K), _clip(lambda b: -INF, lambda b: b["k"]))],
    O.CLAMP: [(p(O.CLAMP, LO, X, HI), _clip(lambda b: b["lo"], lambda b: b["hi"]))],
    O.SELECT: [(p(O.SELECT, p("less", X, K), K, X), _clip(lambda b: b["k"], lambda b: INF)),
               (p(O.SELECT, p("less", K, X), K, X), _clip(lambda b: -INF, lambda b: b["k"])),
               (p(O.SELECT, p("less", X, K), X, K), _clip(lambda b: -INF, lambda b: b["k"])),
               # NaN replaced by a constant (TF's MaxPool lowering: select(x != x, lowest, x)): no post-op
               # at all once the accumulator is known not to be NaN
               (p(O.SELECT, p("isnan", X), K, X), lambda b: ()),
               (p(O.SELECT, p("notnan", X), X, K), lambda b: ())],
}
NAN_MASKING_BINARY = {O.MAXIMUM: ("max", True), O.MINIMUM: ("min", True)}


# --- matching --------------------------------------------------------------------------------------

Term = Union[str, float]  # an instruction name, or a constant made by rewriting x/c as x*(1/c)


class _Matcher:
    def __init__(self, comp: HloComputation, hero: str | None = None):
        self.comp = comp
        self.hero = hero
        self.users = {k: len(v) for k, v in comp.users().items()}

    def scalar(self, term: Term) -> float | None:
        """The value of a scalar constant, or of a broadcast of one."""
        if isinstance(term, float):
            return term
        inst = self.comp[term]
        while inst.opcode is O.BROADCAST:
            inst = self.comp[inst.operands[0]]
        if inst.opcode is O.CONSTANT and isinstance(inst.shape, Shape) and inst.shape.num_elements == 1 \
                and inst.literal is not None and not inst.literal.is_elided and inst.shape.dtype.is_float:
            return float(inst.literal.to_numpy().reshape(-1)[0])
        return None

    def _parts(self, name: str, op: O) -> list[Term] | None:
        """The operands of ``name`` as a sum/product, or None when it is not one."""
        inst = self.comp[name]
        if inst.opcode is op:
            return list(inst.operands)
        if op is O.MULTIPLY and inst.opcode is O.DIVIDE:
            c = self.scalar(inst.operands[1])
            return [inst.operands[0], 1.0 / c] if c else None
        if op is O.MULTIPLY and inst.opcode is O.POWER and self.scalar(inst.operands[1]) == 3.0:
            return [inst.operands[0]] * 3
        return None

    def term_lists(self, name: str, op: O) -> Iterator[list[Term]]:
        """Every way of reading ``name`` as a flat sum/product (single-use inner nodes may be opened)."""
        parts = self._parts(name, op)
        if parts is None:
            return

        def options(t: Term) -> list[list[Term]]:
            out = [[t]]
            if isinstance(t, str) and self.users.get(t, 0) == 1:
                out += list(self.term_lists(t, op))
            return out
        for combo in itertools.islice(itertools.product(*(options(t) for t in parts)), 64):
            yield [t for group in combo for t in group]

    def match(self, pat, term: Term, bind: dict) -> Iterator[dict]:
        if pat == X:
            if isinstance(term, str) and bind.get(X, term) == term:
                yield {**bind, X: term}
            return
        if isinstance(pat, (Const, Capture)):
            v = self.scalar(term)
            if v is None:
                return
            want = pat.value if isinstance(pat, Const) else bind.get(pat.key, v)
            if _close(v, want):
                yield bind if isinstance(pat, Const) else {**bind, pat.key: v}
            return
        if isinstance(term, float):
            return
        inst = self.comp[term]
        if pat.op in _ASSOC:
            for terms in self.term_lists(term, pat.op):
                if len(terms) == len(pat.children):
                    for perm in itertools.permutations(terms):
                        yield from self._match_all(pat.children, perm, bind)
            return
        if pat.op in ("isnan", "notnan"):  # compare(x, x) NE / EQ
            if inst.opcode is O.COMPARE and inst.operands[0] == inst.operands[1] \
                    and inst.attr("direction").value == ("NE" if pat.op == "isnan" else "EQ"):
                yield from self.match(pat.children[0], inst.operands[0], bind)
            return
        if pat.op == "less":
            if inst.opcode is not O.COMPARE:
                return
            direction = inst.attr("direction").value
            operands = {"LT": inst.operands, "LE": inst.operands, "GT": inst.operands[::-1],
                        "GE": inst.operands[::-1]}.get(direction)
            if operands is not None:
                yield from self._match_all(pat.children, operands, bind)
            return
        if inst.opcode is not pat.op or len(inst.operands) != len(pat.children):
            return
        orders = itertools.permutations(inst.operands) if pat.op.is_commutative else [inst.operands]
        for order in orders:
            yield from self._match_all(pat.children, order, bind)

    def _match_all(self, pats, terms, bind: dict) -> Iterator[dict]:
        if not pats:
            yield bind
            return
        for b in self.match(pats[0], terms[0], bind):
            yield from self._match_all(pats[1:], terms[1:], b)

    def side(self, name: str, dims: tuple[int, ...]) -> tuple[str, tuple[int | None, ...]] | None:
        """A second operand for a binary post-op: a parameter or constant, possibly broadcast, or the
        broadcast of a small value computed from them (``computed_side``)."""
        inst = self.comp[name]
        if inst.opcode in (O.PARAMETER, O.CONSTANT):
            return (name, tuple(range(len(dims)))) if inst.shape.dims == dims else None
        if inst.opcode is O.BROADCAST:
            src = self.comp[inst.operands[0]]
            if (src.opcode in (O.PARAMETER, O.CONSTANT) or self.computed_side(src.name)) \
                    and self.scalar(src.name) is None:
                dim_map: list[int | None] = [None] * len(dims)
                for k, d in enumerate(inst.attr("dimensions", ())):
                    dim_map[d] = k
                return src.name, tuple(dim_map)
            if src.opcode is O.PARAMETER and src.shape.num_elements == 1:  # a scalar parameter
                return src.name, (None,) * len(dims)
        return None


    def computed_side(self, name: str) -> bool:
        """A value of at most SIDE_ELEMENTS elements that does not depend on the hero (a batch norm's
        per-channel scale ``gamma * rsqrt(var + eps)`` or shift): the backend computes it into scratch
        before the primitive runs."""
        inst = self.comp[name]
        return (self.hero is not None and isinstance(inst.shape, Shape) and inst.shape.dtype.is_float
                and 1 < inst.shape.num_elements <= SIDE_ELEMENTS
                and not _reaches(self.comp, name, self.hero, stop=""))


SIDE_ELEMENTS = 4096


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))


def match_epilogue(comp: HloComputation, hero: str, exact_nan: bool = True) -> EpilogueMatch:
    """The longest exact post-op prefix of ``hero``'s epilogue; with ``exact_nan=False`` also the post-ops
    that are exact only for a non-NaN accumulator (``NAN_MASKING``)."""
    m = _Matcher(comp, hero)
    shape = comp[hero].shape
    best: dict[str, tuple[PostOp, ...]] = {hero: ()}
    for inst in comp.instructions:
        if inst.name in best or not isinstance(inst.shape, Shape) or inst.shape.dtype != shape.dtype \
                or inst.shape.dims != shape.dims:
            continue
        found = _step(m, inst, best, shape.dims, exact_nan)
        if found is not None:
            best[inst.name] = found
    for name in reversed([i.name for i in comp.instructions]):
        if name in best and not _reaches(comp, comp.root_name, hero, name):
            return EpilogueMatch(name, _merge_clips(best[name]))
    raise AssertionError("unreachable: the hero itself is always a cut")


def _step(m: _Matcher, inst: HloInstruction, best: dict, dims, exact_nan: bool) -> tuple[PostOp, ...] | None:
    templates = TEMPLATES.get(inst.opcode, [])
    binary = BINARY if exact_nan else {**BINARY, **NAN_MASKING_BINARY}
    for pat, make in templates if exact_nan else templates + NAN_MASKING.get(inst.opcode, []):
        for bind in m.match(pat, inst.name, {}):
            if bind[X] in best:
                return best[bind[X]] + make(bind)
    if inst.opcode in binary:
        alg, commutative = binary[inst.opcode]
        a, b = inst.operands
        for x, s in ((a, b), (b, a)) if commutative else ((a, b),):
            side = m.side(s, dims) if x in best else None
            if side is not None:
                return best[x] + (_binary(alg, *side),)
    return None


def _reaches(comp: HloComputation, start: str, target: str, stop: str) -> bool:
    """Whether ``target`` is an operand-ancestor of ``start`` along a path avoiding ``stop``."""
    seen, work = set(), [start]
    while work:
        name = work.pop()
        if name == stop or name in seen:
            continue
        if name == target:
            return True
        seen.add(name)
        work.extend(comp[name].operands)
    return False


def _merge_clips(ops: tuple[PostOp, ...]) -> tuple[PostOp, ...]:
    """Adjacent clips compose into one (relu then min 6 is relu6); clip(0, inf) is relu."""
    out: list[PostOp] = []
    for op in ops:
        prev = out[-1] if out else None
        if not op.is_binary and op.alg == "clip" and prev is not None and not prev.is_binary and prev.alg == "clip" \
                and max(prev.alpha, op.alpha) <= min(prev.beta, op.beta):
            out[-1] = _eltwise("clip", max(prev.alpha, op.alpha), min(prev.beta, op.beta))
        else:
            out.append(op)
    return tuple(_eltwise("relu") if not o.is_binary and o.alg == "clip" and o.alpha == 0 and o.beta == INF
                 else o for o in out)
