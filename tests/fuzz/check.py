"""Run one fuzz graph eagerly and compiled (``jit_compile=True`` and ``"auto"``) and classify it.

Outcomes, worst first: ``mismatch`` (a number differs beyond the tolerance table, NaN masks or
inf signs differ, or we returned values where TF eager raised), ``unclear`` (we raised where TF
did not, or a different error class), ``unsupported`` (``jit_compile=True`` raised
``UnsupportedGraphError`` naming the nodes: a clear error), ``xla_semantics`` (a number differs
from TF eager but equals TF's own XLA, ``tf.function(jit_compile=True)``: a TF-eager quirk such as
softmax of a row holding NaN), ``tf_differs`` (equals plain ``tf.function``, which differs from
eager), ``ok``. ``crash`` (a dead process or
timeout) is decided by the driver, which sees the process die.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

import tfxla_plugin
from tests.fuzz.generator import Graph

# Relative tolerance per dtype: the error of one correctly rounded op is 0.5 ULP (f32 6e-8,
# f64 1.1e-16); a graph chains up to 8 ops, and the compiled kernels may contract a*b+c into an
# FMA. Integers and booleans are compared exactly.
DTYPE_RTOL = {"float32": 2e-6, "float64": 1e-13, "int32": 0.0, "bool": 0.0}

# Factor on the dtype's tolerance for graphs containing the op kind (the largest factor wins):
# transcendental functions differ by a few ULP between our vectorized math (backends/cpu/vmath.py)
# and Eigen's, and amplify input error by their condition number (exp(x): |x|); reductions,
# matmul and softmax sum in a different order (error ~ n * eps * sum|x|, against the output's scale).
OP_FACTOR = {
    **{k: 50.0 for k in ("exp", "log", "tanh", "sigmoid", "sin", "cos", "log1p", "expm1", "erf",
                         "softplus", "elu", "selu", "atan", "atan2", "pow", "rsqrt", "sqrt")},
    **{k: 50.0 for k in ("reduce_sum", "reduce_mean", "reduce_prod", "cumsum", "cumprod", "matmul", "einsum",
                         "add_n", "softmax", "reduce_logsumexp", "dense", "squared_difference", "bias_add")},
}
DEFAULT_FACTOR = 8.0  # elementwise arithmetic: a few roundings, maybe an FMA


def _softmax_by_definition(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) with a max that NaN and +inf reach: a row holding NaN or +inf is
    NaN (TF's eager kernel gives NaN only there and 0 elsewhere; XLA and we give the definition)."""
    m = tf.math.reduce_max(x, axis=axis, keepdims=True)
    m = tf.where(tf.math.reduce_any(tf.math.is_nan(x), axis=axis, keepdims=True), tf.constant(np.nan, x.dtype), m)
    e = tf.math.exp(x - m)
    return e / tf.math.reduce_sum(e, axis=axis, keepdims=True)


def _erf_at_inf(x):
    """erf(+-inf) = +-1 (TF's eager f64 kernel gives NaN; its f32 kernel, XLA and we give +-1)."""
    return tf.where(tf.math.is_inf(x), tf.math.sign(x), tf.math.erf(x))


class _Namespace:
    """``tf`` (or ``tf.nn``/``tf.math``) with some functions replaced."""

    def __init__(self, base, **replaced):
        self._base, self._replaced = base, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._base, name)


# The deliberate differences from TF eager (README.md): the reference a mismatch is checked against
# again, op by op, before it counts. Each row: the op kind and its replacement in the eager reference.
DELIBERATE = {"softmax": "tf.nn.softmax by its definition", "erf": "tf.math.erf(+-inf) = +-1"}
_TF_DELIBERATE = _Namespace(tf, nn=_Namespace(tf.nn, softmax=_softmax_by_definition),
                            math=_Namespace(tf.math, erf=_erf_at_inf))


@dataclasses.dataclass
class Outcome:
    status: str  # one of SEVERITY but "crash" (the driver's)
    detail: str = ""


SEVERITY = ["ok", "tf_differs", "xla_semantics", "unsupported", "unclear", "mismatch", "crash"]


def tolerance(graph: Graph, dtype: str) -> float:
    """The output's rtol: its dtype's, or the loosest float dtype the graph computes in (an f64 output
    of an f32 sigmoid carries f32 error), times the largest op factor."""
    if DTYPE_RTOL[dtype] == 0.0:
        return 0.0
    factor = max([OP_FACTOR.get(k, DEFAULT_FACTOR) for k in graph.op_kinds] or [1.0])
    return max(DTYPE_RTOL[d] for d in (dtype, *graph.float_dtypes)) * factor


def compare(ref: np.ndarray, got: np.ndarray, rtol: float) -> str | None:
    """None when ``got`` matches ``ref``, else a one-line description of the first difference."""
    if ref.dtype != got.dtype or ref.shape != got.shape:
        return f"dtype/shape {got.dtype}{list(got.shape)} != TF {ref.dtype}{list(ref.shape)}"
    if ref.dtype.kind not in "fc":
        bad = np.argwhere(ref != got)
        return None if not bad.size else _first(bad, ref, got, "value")
    nan_r, nan_g = np.isnan(ref), np.isnan(got)
    if (nan_r != nan_g).any():
        return _first(np.argwhere(nan_r != nan_g), ref, got, "NaN mask")
    inf_r, inf_g = np.isinf(ref), np.isinf(got)
    if (inf_r != inf_g).any() or (ref[inf_r] != got[inf_r]).any():
        return _first(np.argwhere((inf_r != inf_g) | (inf_r & (ref != got))), ref, got, "inf")
    fin = ~(nan_r | inf_r)
    scale = max(1.0, float(np.abs(ref[fin]).max())) if fin.any() else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(fin, np.abs(ref.astype(np.float64) - got.astype(np.float64)), 0.0)
    bad = np.argwhere(err > rtol * np.abs(ref.astype(np.float64)) + rtol * scale)
    return None if not bad.size else _first(bad, ref, got, f"value (rtol={rtol:g}, scale={scale:g})")


def _first(bad, ref, got, what: str) -> str:
    i = tuple(int(v) for v in bad[0])
    return f"{what}: {len(bad)} element(s) differ, first at {list(i)}: got {got[i]!r}, TF {ref[i]!r}"


def _run(fn, args):
    out = fn(*args)
    return [np.asarray(t) for t in out]


def _names_nodes(e: Exception) -> bool:
    nodes = getattr(e, "nodes", None)
    return bool(nodes) and all(str(n[1]) in str(e) for n in nodes)


def _error_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def check(graph: Graph, modes=(True, "auto")) -> Outcome:
    """Worst outcome of ``graph`` over the compile modes, with what differed."""
    fn = graph.make_function()
    args = [tf.constant(a) for _, a in graph.inputs]
    ref_err = None
    try:
        ref = _run(fn, args)
    except tf.errors.OpError as e:
        ref_err = e
    worst = Outcome("ok")
    for mode in modes:
        o = _check_mode(graph, fn, args, mode, ref, ref_err) if ref_err is None else \
            _check_error_mode(fn, args, mode, ref_err)
        if SEVERITY.index(o.status) > SEVERITY.index(worst.status):
            worst = Outcome(o.status, f"jit_compile={mode!r}: {o.detail}")
    return worst


def _plain_raises(fn, args, cls) -> bool:
    """Whether plain ``tf.function`` (graph mode, no compiler) raises ``cls`` on these arguments too."""
    try:
        _run(tf.function(fn, autograph=False), args)
    except cls:
        return True
    except Exception:  # noqa: BLE001 - any other outcome means "no"
        return False
    return False


def _check_mode(graph, fn, args, mode, ref, _ref_err) -> Outcome:
    try:
        got = _run(tfxla_plugin.function(fn, jit_compile=mode, autograph=False), args)
    except tfxla_plugin.UnsupportedGraphError as e:
        if mode is True and _names_nodes(e):
            return Outcome("unsupported", _error_line(e) + " | " + "; ".join(f"{n[0]}: {n[2]}" for n in e.nodes))
        return Outcome("unclear", _error_line(e))
    except Exception as e:  # noqa: BLE001 - classifying everything is the point
        if _plain_raises(fn, args, type(e)):
            return Outcome("ok", "tf.function raises the same: " + _error_line(e))
        return Outcome("unclear", _error_line(e))
    diff = _differ(graph, ref, got)
    if diff is None:
        return Outcome("ok")
    try:  # TF's own graph mode (grappler) can disagree with eager: matching it is not our bug
        plain = _run(tf.function(fn, autograph=False), args)
    except Exception:  # noqa: BLE001
        plain = None
    if plain is not None and _differ(graph, plain, got) is None and _differ(graph, ref, plain) is not None:
        return Outcome("tf_differs", f"tf.function differs from TF eager, we match tf.function: {diff}")
    if any(k in DELIBERATE for k in graph.op_kinds):
        try:
            deliberate = _run(graph.make_function(_TF_DELIBERATE), args)
        except Exception:  # noqa: BLE001
            deliberate = None
        if deliberate is not None and _differ(graph, deliberate, got) is None:
            return Outcome("xla_semantics", f"a documented difference (DELIBERATE): {diff}")
    try:  # TF's own XLA (what jit_compile=True means in TF): a TF-eager quirk XLA does not share
        xla = _run(tf.function(fn, jit_compile=True, autograph=False), args)
    except Exception:  # noqa: BLE001
        xla = None
    if xla is not None and _differ(graph, xla, got) is None:
        return Outcome("xla_semantics", f"TF eager differs, we match TF's XLA: {diff}")
    return Outcome("mismatch", diff)


def _differ(graph, ref, got) -> str | None:
    if len(got) != len(ref):
        return f"{len(got)} outputs, TF {len(ref)}"
    for k, (r, g) in enumerate(zip(ref, got)):
        dtype = str(r.dtype)
        diff = compare(r, g, tolerance(graph, dtype) if dtype in DTYPE_RTOL else 0.0)
        if diff:
            return f"output {k} ({graph.outputs[k]}): {diff}"
    return None


def _check_error_mode(fn, args, mode, ref_err) -> Outcome:
    try:
        _run(tfxla_plugin.function(fn, jit_compile=mode, autograph=False), args)
    except type(ref_err):
        return Outcome("ok")
    except Exception as e:  # noqa: BLE001
        if _plain_raises(fn, args, type(e)):
            return Outcome("ok")
        return Outcome("unclear", f"TF eager raised {_error_line(ref_err)}; we raised {_error_line(e)}")
    try:  # tf.function prunes an op nothing uses; eager runs (and fails in) every op
        _run(tf.function(fn, autograph=False), args)
    except Exception:  # noqa: BLE001
        return Outcome("mismatch", f"returned values where TF eager raised {_error_line(ref_err)}")
    return Outcome("tf_differs", f"tf.function returns values too, TF eager raised {_error_line(ref_err)}")

