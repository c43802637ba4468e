"""Random graphs for the differential fuzzer, deterministic from ``(seed, index)``; no TensorFlow here.

A graph is a list of Python assignment lines ``vN = tf....(...)`` over inputs ``x0..x2`` (NumPy
arrays) and the names it returns. The ``Builder`` tracks each value's static shape, dtype and
whether it is *exact* (computed from the inputs by ops that round nothing: data movement, neg,
abs, max/min, select, casts of small ints). Ops with a discontinuity (comparisons, floor, casts
to int, argmax, ...) take only exact float operands, so a last-ULP difference between two
correct implementations cannot flip their result (see README.md, "Tolerances").
"""

from __future__ import annotations

import dataclasses
import linecache
import math

import numpy as np

from tests.fuzz import ops as op_table

DTYPES = ("float32", "float64", "int32")
FLOATS = ("float32", "float64")
MAX_INPUTS = 3
MAX_ELEMENTS = 240  # per value: keeps repros short and kernels quick to compile


@dataclasses.dataclass(frozen=True)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "float64", "int32" or "bool"
    exact: bool

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass
class Graph:
    seed: int
    index: int
    inputs: list[tuple[str, np.ndarray]]
    lines: list[str]
    outputs: list[str]
    op_kinds: list[str]  # the op table rows used, in order (tolerances and counts read them)
    float_dtypes: tuple[str, ...] = ()  # float dtypes of any value in the graph (tolerances read them)
    values: dict[str, tuple[tuple[int, ...], str]] = dataclasses.field(default_factory=dict)  # name: (shape, dtype)

    def function_source(self) -> str:
        args = ", ".join(name for name, _ in self.inputs)
        body = [f"    {line}" for line in self.lines] or ["    pass"]
        ret = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "")
        return "\n".join([f"def f({args}):", *body, f"    return ({ret})"]) + "\n"

    def repro(self) -> str:
        """A self-contained script: the function, its inputs, and the three calls compared."""
        inputs = "\n".join(f"{name} = tf.constant({array_literal(a)})" for name, a in self.inputs)
        args = ", ".join(name for name, _ in self.inputs)
        return (f"# tests.fuzz graph seed={self.seed} index={self.index} ops={','.join(self.op_kinds)}\n"
                "import numpy as np\nimport tensorflow as tf\nimport tfxla_plugin\n\n"
                f"{self.function_source()}\n{inputs}\n"
                f"print(f({args}))\n"
                f"print(tfxla_plugin.function(f, jit_compile=True)({args}))\n"
                f"print(tfxla_plugin.function(f, jit_compile=\"auto\")({args}))\n")

    def make_function(self, tf_module=None):
        """The graph as a Python function; ``tf_module`` replaces ``tf`` in it (check.py's reference with
        the documented deliberate differences)."""
        source, filename = self.function_source(), f"<tests.fuzz graph {self.seed}:{self.index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for tracebacks
        scope = {"tf": tf_module or __import__("tensorflow"), "np": np}
        exec(compile(source, filename, "exec"), scope)
        return scope["f"]


def _scalar_literal(v, dtype: str) -> str:
    if dtype == "bool":
        return "True" if v else "False"
    if dtype == "int32":
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(v)


def nested_literal(a: np.ndarray) -> str:
    dtype = str(a.dtype)
    if a.ndim == 0:
        return _scalar_literal(a.item(), dtype)
    return "[" + ", ".join(nested_literal(x) for x in a) + "]" if a.shape[0] else "[]"


def constant_source(a: np.ndarray) -> str:
    """``tf.constant`` source for ``a`` (``tf.zeros`` when empty: a nested ``[]`` loses the shape)."""
    if a.size == 0:
        return f"tf.zeros({list(a.shape)}, tf.{a.dtype})"
    return f"tf.constant({nested_literal(a)}, tf.{a.dtype})"


def array_literal(a: np.ndarray) -> str:
    """``np.array(...)`` source that rebuilds ``a`` exactly (shape, dtype, NaN/inf, -0.0)."""
    flat = ", ".join(_scalar_literal(x, str(a.dtype)) for x in a.reshape(-1).tolist())
    return f"np.array([{flat}], np.{a.dtype}).reshape({tuple(a.shape)})"


class Builder:
    """The state one graph is drawn in: the values so far, the inputs, the emitted lines."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.values: list[Value] = []
        self.inputs: list[tuple[str, np.ndarray]] = []
        self.lines: list[str] = []
        self.consumed: set[str] = set()
        self.specials = rng.random() < 0.4  # this graph's float inputs hold NaN/inf/-0.0
        self.ties = rng.random() < 0.3      # ...or values drawn from a small set (ties for argmax, ==)

    # --- drawing shapes and data -------------------------------------------------------
    def dim(self) -> int:
        r = self.rng.random()
        return 0 if r < 0.06 else 1 if r < 0.3 else int(self.rng.integers(2, 6))

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = int(self.rng.choice([0, 1, 2, 2, 3, 3, 4])) if rank is None else rank
        for _ in range(10):
            s = tuple(self.dim() for _ in range(rank))
            if math.prod(s) <= MAX_ELEMENTS:
                return s
        return (1,) * rank

    def data(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        rng, n = self.rng, math.prod(shape)
        if dtype == "bool":
            return (rng.random(n) < 0.5).reshape(shape)
        if dtype == "int32":
            hi = 1000 if rng.random() < 0.2 else 10
            a = rng.integers(-hi, hi + 1, n).astype(np.int32)
            return a.reshape(shape)
        if self.ties:
            a = rng.choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], n)
        else:
            a = rng.standard_normal(n) * rng.choice([1.0, 1.0, 4.0])
        if self.specials:
            pick = rng.random(n)
            specials = rng.choice([np.nan, np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30], n)
            a = np.where(pick < 0.15, specials, a)
        return a.astype(dtype).reshape(shape)

    # --- values ------------------------------------------------------------------------
    def new_name(self) -> str:
        return f"v{len(self.lines)}"

    def add_input(self, shape: tuple[int, ...], dtype: str) -> Value:
        return self.add_input_data(self.data(shape, dtype))

    def add_input_data(self, data: np.ndarray) -> Value:
        name = f"x{len(self.inputs)}"
        self.inputs.append((name, data))
        v = Value(name, tuple(data.shape), str(data.dtype), True)
        self.values.append(v)
        return v

    def constant(self, shape: tuple[int, ...], dtype: str) -> Value:
        """An inline ``tf.constant`` (its value is part of the expression, not of ``values``)."""
        return Value(constant_source(self.data(shape, dtype)), shape, dtype, True)

    def operand(self, shape: tuple[int, ...], dtype: str, exact: bool = False) -> Value:
        """A value of exactly this shape and dtype: an existing one, a new input, or a constant."""
        same = [v for v in self.values if v.shape == shape and v.dtype == dtype and (v.exact or not exact)]
        if same and self.rng.random() < 0.5:
            return self.pick(same)
        if len(self.inputs) < MAX_INPUTS and self.rng.random() < 0.7:
            return self.add_input(shape, dtype)
        return self.constant(shape, dtype)

    def pick(self, candidates: list[Value]) -> Value:
        """Prefer recent values (deeper graphs), but any may be chosen."""
        weights = np.arange(1, len(candidates) + 1, dtype=np.float64) ** 2
        return candidates[int(self.rng.choice(len(candidates), p=weights / weights.sum()))]

    def choose(self, dtypes=None, *, exact=False, min_rank=0, nonempty=False) -> Value | None:
        cands = [v for v in self.values if (dtypes is None or v.dtype in dtypes) and v.rank >= min_rank
                 and (v.exact or not exact or v.dtype in ("int32", "bool")) and (v.size or not nonempty)]
        return self.pick(cands) if cands else None

    def emit(self, expr: str, shape: tuple[int, ...], dtype: str, exact: bool, operands) -> Value:
        name = self.new_name()
        self.lines.append(f"{name} = {expr}")
        for o in operands:
            self.consumed.add(o.name)
        v = Value(name, tuple(shape), dtype, exact)
        self.values.append(v)
        return v


def generate(seed: int, index: int) -> Graph:
    """The graph number ``index`` of the run seeded ``seed`` (the same on every machine)."""
    rng = np.random.default_rng([seed, index])
    b = Builder(rng)
    first_dtype = str(rng.choice(DTYPES))
    b.add_input(b.shape(), first_dtype)
    if rng.random() < 0.5:
        b.add_input(b.shape(), first_dtype if rng.random() < 0.7 else str(rng.choice(DTYPES)))
    kinds: list[str] = []
    n_ops = int(rng.integers(1, 9))
    attempts = 0
    while len(kinds) < n_ops and attempts < 200:
        attempts += 1
        row = op_table.draw_row(rng)
        if row.apply(b) is not None:
            kinds.append(row.name)
    produced = [v for v in b.values if v.name.startswith("v")]
    outputs = [produced[-1].name] if produced else [b.values[-1].name]
    dangling = [v.name for v in produced[:-1] if v.name not in b.consumed]
    for name in dangling[-2:]:  # a value nothing consumed is an output too (else it is dead code)
        if rng.random() < 0.7:
            outputs.append(name)
    floats = tuple(sorted({v.dtype for v in b.values if v.dtype in FLOATS}))
    return Graph(seed, index, b.inputs, b.lines, outputs, kinds, floats,
                 {v.name: (v.shape, v.dtype) for v in b.values})
