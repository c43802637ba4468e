"""The fuzzer's op table: one row per op kind, with how it draws its operands and attributes.

A row's ``apply(builder)`` picks operands among the builder's values (or makes new inputs and
constants of the shapes it needs), draws its attributes, emits one line of TF source and returns
the new value, or returns None when the graph so far has nothing it can take. Undefined or
eager-raising cases are never drawn where a kernel cannot raise at run time: integer division and
modulo get a divisor with ``|y| >= 2``, float-to-int casts get a NaN/inf/range guard, integer powers
get exponents in [0, 3], top_k's NaN become 0 (README.md lists each, with what TF eager does).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import numpy as np

F, I, B = ("float32", "float64"), ("int32",), ("bool",)
FI = F + I


@dataclasses.dataclass(frozen=True)
class OpRow:
    name: str
    family: str
    weight: float
    dtypes: tuple[str, ...]  # operand dtypes the row takes
    apply: Callable  # (Builder) -> Value | None


ROWS: list[OpRow] = []


def row(name: str, family: str, weight: float, dtypes: tuple[str, ...]):
    def register(fn):
        ROWS.append(OpRow(name, family, weight, dtypes, fn))
        return fn
    return register


def draw_row(rng: np.random.Generator) -> OpRow:
    w = np.array([r.weight for r in ROWS])
    return ROWS[int(rng.choice(len(ROWS), p=w / w.sum()))]


def _axis(b, rank: int) -> int:
    """An axis in [-rank, rank), negative half the time."""
    a = int(b.rng.integers(rank))
    return a - rank if b.rng.random() < 0.3 else a


# --- elementwise ---------------------------------------------------------------------------
# huge finite arguments of periodic functions replaced by 0 (NaN and +-inf kept)
PERIODIC_ARG = "tf.where(tf.math.logical_and(tf.math.is_finite({x}), tf.math.abs({x}) > 1e4), tf.zeros_like({x}), {x})"
# name: (template, dtypes, keeps exactness, needs exact float operand, result dtype or None)
UNARY = {
    "negative": ("tf.math.negative({x})", FI, True, False, None),
    "abs": ("tf.math.abs({x})", FI, True, False, None),
    "square": ("tf.math.square({x})", FI, False, False, None),
    "sign": ("tf.math.sign({x})", FI, True, True, None),
    "relu": ("tf.nn.relu({x})", F, True, False, None),
    "relu6": ("tf.nn.relu6({x})", F, True, False, None),
    "exp": ("tf.math.exp({x})", F, False, False, None),
    "log": ("tf.math.log({x})", F, False, False, None),
    "sqrt": ("tf.math.sqrt({x})", F, False, False, None),
    "rsqrt": ("tf.math.rsqrt({x})", F, False, False, None),
    "tanh": ("tf.math.tanh({x})", F, False, False, None),
    "sigmoid": ("tf.math.sigmoid({x})", F, False, False, None),
    # sin/cos of a huge finite argument depend on its last bits (condition number |x|): one ulp of
    # difference upstream (TF's Eigen expm1 is not correctly rounded, ours is) changes them completely
    "sin": (f"tf.math.sin({PERIODIC_ARG})", F, False, False, None),
    "cos": (f"tf.math.cos({PERIODIC_ARG})", F, False, False, None),
    "reciprocal": ("tf.math.reciprocal({x})", F, False, False, None),
    "log1p": ("tf.math.log1p({x})", F, False, False, None),
    "expm1": ("tf.math.expm1({x})", F, False, False, None),
    "erf": ("tf.math.erf({x})", F, False, False, None),
    "softplus": ("tf.math.softplus({x})", F, False, False, None),
    "elu": ("tf.nn.elu({x})", F, False, False, None),
    "selu": ("tf.nn.selu({x})", F, False, False, None),
    "leaky_relu": ("tf.nn.leaky_relu({x}, alpha=0.2)", F, False, False, None),
    "floor": ("tf.math.floor({x})", F, True, True, None),
    "ceil": ("tf.math.ceil({x})", F, True, True, None),
    "round": ("tf.math.round({x})", F, True, True, None),
    "rint": ("tf.math.rint({x})", F, True, True, None),
    "is_nan": ("tf.math.is_nan({x})", F, True, False, "bool"),
    "is_inf": ("tf.math.is_inf({x})", F, True, False, "bool"),
    "is_finite": ("tf.math.is_finite({x})", F, True, False, "bool"),
    "logical_not": ("tf.math.logical_not({x})", B, True, False, None),
}

# name: (template, dtypes, keeps exactness, needs exact float operands, result dtype or None)
SAFE_DIVISOR = "tf.where(tf.math.abs({y}) < 2, 2, {y})"
BINARY = {
    "add": ("tf.math.add({x}, {y})", FI, False, False, None),
    "subtract": ("tf.math.subtract({x}, {y})", FI, False, False, None),
    "multiply": ("tf.math.multiply({x}, {y})", FI, False, False, None),
    "truediv": ("tf.math.truediv({x}, {y})", F, False, False, None),
    "maximum": ("tf.math.maximum({x}, {y})", FI, True, False, None),
    "minimum": ("tf.math.minimum({x}, {y})", FI, True, False, None),
    "pow": ("tf.math.pow({x}, {y})", F, False, False, None),
    "pow_int": ("tf.math.pow({x}, tf.math.floormod({y}, 4))", I, True, False, None),
    "squared_difference": ("tf.math.squared_difference({x}, {y})", FI, False, False, None),
    "atan2": ("tf.math.atan2({x}, {y})", F, False, False, None),
    "div_no_nan": ("tf.math.divide_no_nan({x}, {y})", F, False, False, None),
    "floordiv": ("tf.math.floordiv({x}, {y})", F, False, True, None),
    "floormod": ("tf.math.floormod({x}, {y})", F, False, True, None),
    "floordiv_int": ("tf.math.floordiv({x}, %s)" % SAFE_DIVISOR, I, True, False, None),
    "floormod_int": ("tf.math.floormod({x}, %s)" % SAFE_DIVISOR, I, True, False, None),
    "truncatediv_int": ("tf.truncatediv({x}, %s)" % SAFE_DIVISOR, I, True, False, None),
    "truncatemod_int": ("tf.truncatemod({x}, %s)" % SAFE_DIVISOR, I, True, False, None),
    "logical_and": ("tf.math.logical_and({x}, {y})", B, True, False, None),
    "logical_or": ("tf.math.logical_or({x}, {y})", B, True, False, None),
    **{name: (f"tf.math.{name}({{x}}, {{y}})", FI + B, True, True, "bool") for name in ("equal", "not_equal")},
    **{name: (f"tf.math.{name}({{x}}, {{y}})", FI, True, True, "bool")
       for name in ("less", "less_equal", "greater", "greater_equal")},
}


def partner_shape(b, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape``: itself, a suffix, some dims 1, or more leading dims."""
    r = b.rng.random()
    if r < 0.35:
        return shape
    if r < 0.5:
        return shape[int(b.rng.integers(len(shape) + 1)):]
    if r < 0.8:
        return tuple(1 if b.rng.random() < 0.5 else d for d in shape)
    lead = tuple(b.dim() for _ in range(int(b.rng.integers(1, 3))))
    return (lead + tuple(1 if b.rng.random() < 0.3 else d for d in shape))[-4:]


def _broadcast(a, c):
    try:
        return tuple(np.broadcast_shapes(a, c))
    except ValueError:
        return None


def _fits(shape) -> bool:
    return math.prod(shape) <= 240


def broadcast_partner(b, x, dtype: str, exact: bool):
    """An operand of ``dtype`` broadcasting with ``x``: an existing value, a new input or a constant."""
    cands = [v for v in b.values if v.dtype == dtype and v is not x and _broadcast(v.shape, x.shape)
             and _fits(_broadcast(v.shape, x.shape)) and (v.exact or not exact or dtype not in F)]
    if cands and b.rng.random() < 0.5:
        return b.pick(cands)
    shape = partner_shape(b, x.shape)
    if not _fits(_broadcast(shape, x.shape)):
        shape = x.shape
    if b.rng.random() < 0.15:
        shape = ()
    return b.operand(shape, dtype, exact)


def _unary(name, b):
    tmpl, dtypes, keeps, needs_exact, out = UNARY[name]
    x = b.choose(dtypes, exact=needs_exact)
    if x is None:
        return None
    return b.emit(tmpl.format(x=x.name), x.shape, out or x.dtype, keeps and x.exact, [x])


def _binary(name, b):
    tmpl, dtypes, keeps, needs_exact, out = BINARY[name]
    x = b.choose(dtypes, exact=needs_exact)
    if x is None:
        return None
    y = broadcast_partner(b, x, x.dtype, needs_exact)
    if b.rng.random() < 0.5:
        x, y = y, x
    shape = _broadcast(x.shape, y.shape)
    exact = (keeps or x.dtype in I + B) and x.exact and y.exact
    return b.emit(tmpl.format(x=x.name, y=y.name), shape, out or x.dtype, exact, [x, y])


for _name, _spec in UNARY.items():
    _w = 0.4 if _spec[1] == FI else 0.25
    row(_name, "unary", _w, _spec[1])(functools.partial(_unary, _name))
for _name, _spec in BINARY.items():
    row(_name, "compare" if _spec[4] == "bool" else "binary", 0.5, _spec[1])(functools.partial(_binary, _name))


@row("where", "select", 1.5, FI + B)
def _where(b):
    x = b.choose(FI + B)
    if x is None:
        return None
    cond = broadcast_partner(b, x, "bool", False)
    y = broadcast_partner(b, x, x.dtype, False)
    shape = _broadcast(_broadcast(x.shape, y.shape) or x.shape, cond.shape)
    if shape is None or _broadcast(x.shape, y.shape) is None:
        return None
    args = [cond, x, y] if b.rng.random() < 0.5 else [cond, y, x]
    return b.emit(f"tf.where({args[0].name}, {args[1].name}, {args[2].name})", shape, x.dtype,
                  x.exact and y.exact, args)


@row("clip_by_value", "elementwise", 0.6, FI)
def _clip(b):
    x = b.choose(FI)
    if x is None:
        return None
    lo, hi = sorted(int(v) for v in b.rng.integers(-3, 4, 2))
    lo_s, hi_s = (str(lo), str(hi)) if x.dtype in I else (f"{lo - 0.5}", f"{hi + 0.5}")
    return b.emit(f"tf.clip_by_value({x.name}, {lo_s}, {hi_s})", x.shape, x.dtype, x.exact, [x])


@row("add_n", "elementwise", 0.4, FI)
def _add_n(b):
    x = b.choose(FI)
    if x is None:
        return None
    parts = [x] + [b.operand(x.shape, x.dtype) for _ in range(int(b.rng.integers(1, 3)))]
    return b.emit(f"tf.math.add_n([{', '.join(p.name for p in parts)}])", x.shape, x.dtype,
                  x.dtype in I, parts)


# --- casts -------------------------------------------------------------------------------
@row("cast", "cast", 2.0, FI + B)
def _cast(b):
    x = b.choose(FI + B)
    if x is None:
        return None
    to = str(b.rng.choice([d for d in ("float32", "float64", "int32", "bool") if d != x.dtype]))
    if x.dtype in F and to in I + B and not x.exact:
        return None  # a cast to int or bool of a rounded value flips on the last ULP
    src = x.name
    if x.dtype in F and to == "int32":  # TF eager gives INT_MIN for NaN/inf/out of range (UB in C++)
        src = f"tf.clip_by_value(tf.where(tf.math.is_nan({src}), tf.zeros_like({src}), {src}), -1e6, 1e6)"
    exact = x.exact and not (x.dtype == "float64" and to == "float32")
    return b.emit(f"tf.cast({src}, tf.{to})", x.shape, to, exact, [x])


# --- reductions ----------------------------------------------------------------------------
REDUCE = {"reduce_sum": FI, "reduce_mean": FI, "reduce_max": FI, "reduce_min": FI, "reduce_prod": FI,
          "reduce_any": B, "reduce_all": B}


def _reduce_axes(b, rank: int):
    """(axis source, set of reduced dims): None, one int, or a list (possibly empty)."""
    r = b.rng.random()
    if r < 0.2 or rank == 0:
        return "None", set(range(rank))
    if r < 0.6:
        a = _axis(b, rank)
        return str(a), {a % rank}
    dims = sorted(int(d) for d in b.rng.choice(rank, int(b.rng.integers(0, rank + 1)), replace=False))
    return str([d - rank if b.rng.random() < 0.2 else d for d in dims]), set(dims)


def _reduce(name, b):
    x = b.choose(REDUCE[name])
    if x is None:
        return None
    axis, dims = _reduce_axes(b, x.rank)
    keep = bool(b.rng.random() < 0.3)
    shape = tuple(1 if i in dims else d for i, d in enumerate(x.shape) if keep or i not in dims)
    exact = x.exact and (name in ("reduce_max", "reduce_min", "reduce_any", "reduce_all") or x.dtype in I)
    return b.emit(f"tf.math.{name}({x.name}, axis={axis}, keepdims={keep})", shape, x.dtype, exact, [x])


for _name in REDUCE:
    row(_name, "reduce", 0.6, REDUCE[_name])(functools.partial(_reduce, _name))


@row("argmax", "reduce", 0.8, FI)
def _argmax(b):
    x = b.choose(FI, exact=True, min_rank=1)
    if x is None:
        return None
    a = _axis(b, x.rank)
    fn = "argmax" if b.rng.random() < 0.5 else "argmin"
    shape = tuple(d for i, d in enumerate(x.shape) if i != a % x.rank)
    return b.emit(f"tf.math.{fn}({x.name}, axis={a}, output_type=tf.int32)", shape, "int32", True, [x])


@row("cumsum", "reduce", 0.6, FI)
def _cumsum(b):
    x = b.choose(FI, min_rank=1)
    if x is None:
        return None
    ex, rev = (bool(b.rng.random() < 0.3) for _ in range(2))
    return b.emit(f"tf.math.cumsum({x.name}, axis={_axis(b, x.rank)}, exclusive={ex}, reverse={rev})",
                  x.shape, x.dtype, x.dtype in I and x.exact, [x])


@row("cumprod", "reduce", 0.4, FI)
def _cumprod(b):
    x = b.choose(FI, min_rank=1)
    if x is None:
        return None
    ex, rev = (bool(b.rng.random() < 0.3) for _ in range(2))
    return b.emit(f"tf.math.cumprod({x.name}, axis={_axis(b, x.rank)}, exclusive={ex}, reverse={rev})",
                  x.shape, x.dtype, x.dtype in I and x.exact, [x])


@row("reduce_logsumexp", "reduce", 0.4, F)
def _logsumexp(b):
    x = b.choose(F)
    if x is None:
        return None
    axis, dims = _reduce_axes(b, x.rank)
    keep = bool(b.rng.random() < 0.3)
    shape = tuple(1 if i in dims else d for i, d in enumerate(x.shape) if keep or i not in dims)
    return b.emit(f"tf.math.reduce_logsumexp({x.name}, axis={axis}, keepdims={keep})", shape, x.dtype, False, [x])


@row("bias_add", "elementwise", 0.5, FI)
def _bias_add(b):
    x = b.choose(FI, min_rank=2)  # BiasAdd wants at least 2-D
    if x is None:
        return None
    bias = b.operand(x.shape[-1:], x.dtype)
    return b.emit(f"tf.nn.bias_add({x.name}, {bias.name})", x.shape, x.dtype, x.dtype in I and x.exact and bias.exact,
                  [x, bias])


# equation, operand ranks, output dims as (operand, dim) picks: matmul, batch matmul, row dots, column sums
EINSUM = {"ij,jk->ik": (2, 2), "bij,bjk->bik": (3, 3), "ij,ij->i": (2, 2), "ij->j": (2,), "ijk->ki": (3,)}


@row("einsum", "matmul", 0.6, FI)
def _einsum(b):
    eq = str(b.rng.choice(list(EINSUM)))
    ins, out = eq.split("->")
    specs = ins.split(",")
    x = b.choose(FI, min_rank=len(specs[0]))
    if x is None or x.rank != len(specs[0]):
        return None
    size = dict(zip(specs[0], x.shape))
    for letter in "".join(specs[1:]):
        size.setdefault(letter, b.dim())
    operands = [x] + [b.operand(tuple(size[c] for c in spec), x.dtype) for spec in specs[1:]]
    shape = tuple(size[c] for c in out)
    if not _fits(shape):
        return None
    exact = x.dtype in I and all(o.exact for o in operands)
    args = ", ".join(o.name for o in operands)
    return b.emit(f"tf.einsum(\"{eq}\", {args})", shape, x.dtype, exact, operands)


@row("softmax", "softmax", 1.2, F)
def _softmax(b):
    x = b.choose(F, min_rank=1)
    if x is None:
        return None
    fn = "softmax" if b.rng.random() < 0.6 else "log_softmax"
    axis = -1 if b.rng.random() < 0.6 else _axis(b, x.rank)
    return b.emit(f"tf.nn.{fn}({x.name}, axis={axis})", x.shape, x.dtype, False, [x])


@row("matmul", "matmul", 2.0, FI)
def _matmul(b):
    a = b.choose(FI, min_rank=2)
    if a is None or a.rank > 3:
        return None
    ta, tb = (bool(b.rng.random() < 0.3) for _ in range(2))
    m, k = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    n = b.dim()
    batch = a.shape[:-2]
    if batch and b.rng.random() < 0.3:
        batch = (1,) if b.rng.random() < 0.5 else ()
    elif not batch and b.rng.random() < 0.2:
        batch = (b.dim(),)
    bshape = batch + ((n, k) if tb else (k, n))
    other = b.operand(bshape, a.dtype)
    out = _broadcast(a.shape[:-2], batch) + (m, n)
    if not _fits(out):
        return None
    return b.emit(f"tf.linalg.matmul({a.name}, {other.name}, transpose_a={ta}, transpose_b={tb})", out,
                  a.dtype, a.dtype in I and a.exact and other.exact, [a, other])


ACTIVATIONS = ("tf.nn.relu({x})", "tf.nn.relu6({x})", "tf.math.maximum({x}, 0.5)", "tf.math.minimum({x}, -0.5)",
               "tf.clip_by_value({x}, -1.0, 1.0)", "tf.nn.leaky_relu({x}, alpha=0.2)", "tf.nn.elu({x})",
               "tf.math.sigmoid({x})", "tf.math.tanh({x})", "{x}")


@row("dense", "matmul", 2.0, F)
def _dense(b):
    """A layer: matmul, maybe a bias, an activation (the oneDNN epilogue shapes: NaN must pass through)."""
    x = b.choose(F, min_rank=2)
    if x is None or x.rank > 3:
        return None
    n = b.dim() or 1
    w = b.operand((x.shape[-1], n), x.dtype)
    shape = x.shape[:-1] + (n,)
    if not _fits(shape):
        return None
    y = b.emit(f"tf.linalg.matmul({x.name}, {w.name})", shape, x.dtype, False, [x, w])
    if b.rng.random() < 0.5:
        bias = b.operand((n,), x.dtype)
        y = b.emit(f"tf.nn.bias_add({y.name}, {bias.name})" if y.rank >= 2 else f"{y.name} + {bias.name}",
                   shape, x.dtype, False, [y, bias])
    act = str(b.rng.choice(ACTIVATIONS))
    return b.emit(act.format(x=y.name), shape, x.dtype, False, [y]) if act != "{x}" else y


@row("top_k", "sort", 0.5, FI)
def _top_k(b):
    x = b.choose(FI, exact=True, min_rank=1)
    if x is None:
        return None
    k = int(b.rng.integers(0, x.shape[-1] + 1))
    # NaN has no place in TF eager's order (its comparator is no strict weak order with NaN): guarded
    src = f"tf.where(tf.math.is_nan({x.name}), tf.zeros_like({x.name}), {x.name})" if x.dtype in F else x.name
    if b.rng.random() < 0.5:
        return b.emit(f"tf.math.top_k({src}, k={k}).values", x.shape[:-1] + (k,), x.dtype, x.exact, [x])
    return b.emit(f"tf.math.top_k({src}, k={k}).indices", x.shape[:-1] + (k,), "int32", True, [x])


from tests.fuzz import ops_movement  # noqa: E402,F401  (registers the data-movement rows)
