"""Test helper: lower a TF function through hlo.lowering, evaluate it, compare with TF eager.

``check_lowering`` compares with TF eager on the same inputs. ``check_lowering_rounded`` is for sums
(convolutions and their gradients) in f16/bf16, where TF's own CPU kernels differ by machine: oneDNN
accumulates in f32 where the CPU computes the type natively (AVX512-FP16, AVX512-BF16), TF's Eigen
fallback accumulates in the narrow type elsewhere (several ulp off in f16). What is specified is the
sum rounded once to the narrow type, so the oracle there is TF eager on the same values widened to f64,
rounded to the result type; the default tolerances of that type (a couple of ulp) then hold on every CPU.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hlo  # noqa: E402
from hlo.lowering.tf_function import lower_concrete_function  # noqa: E402

# Default tolerances per output dtype (rtol, atol).
TOLERANCES = {
    np.dtype(np.float16): (2e-3, 2e-3),
    np.dtype(hlo.PrimitiveType.BF16.numpy): (2e-2, 2e-2),
    np.dtype(np.float32): (2e-5, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-13),
}


def lower_fn(fn, *args) -> hlo.HloModule:
    specs = [tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args]
    cf = tf.function(fn, autograph=False).get_concrete_function(*specs)
    return lower_concrete_function(cf)


def _flatten(result) -> list[np.ndarray]:
    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(result)]  # rank-0 bf16


def check_lowering(fn, *args, rtol: float | None = None, atol: float | None = None) -> hlo.HloModule:
    """Assert that the lowered HLO of ``fn`` evaluates to ``fn``'s eager TF result on ``args``."""
    args = [np.asarray(a) for a in args]
    module = lower_fn(fn, *args)
    got = hlo.evaluate(module, *args)
    want = _flatten(fn(*[tf.constant(a) for a in args]))
    assert len(got) == len(want), f"{len(got)} results, TF returned {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"result {i}: dims {g.shape} != TF {w.shape}"
        assert g.dtype == w.dtype, f"result {i}: dtype {g.dtype} != TF {w.dtype}"
        if w.dtype in TOLERANCES:
            r, a = TOLERANCES[w.dtype]
            r, a = max(r, rtol or 0), max(a, atol or 0)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=r, atol=a,
                                       equal_nan=True, err_msg=f"result {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"result {i}")
    return module


NARROW_FLOATS = (np.dtype(np.float16), np.dtype(hlo.PrimitiveType.BF16.numpy))


def check_lowering_rounded(fn, *args, rtol: float | None = None, atol: float | None = None) -> hlo.HloModule:
    """Like ``check_lowering``, against ``fn`` computed in f64 on the (exactly widened) f16/bf16 inputs
    and rounded once to each result's type (see the module docstring)."""
    args = [np.asarray(a) for a in args]
    module = lower_fn(fn, *args)
    got = hlo.evaluate(module, *args)
    wide = [a.astype(np.float64) if a.dtype in NARROW_FLOATS else a for a in args]
    want = _flatten(fn(*[tf.constant(a) for a in wide]))
    assert len(got) == len(want), f"{len(got)} results, TF returned {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype in NARROW_FLOATS, f"result {i}: {g.dtype} is not a narrow float type"
        assert g.shape == w.shape, f"result {i}: dims {g.shape} != TF {w.shape}"
        r, a = TOLERANCES[g.dtype]
        r, a = max(r, rtol or 0), max(a, atol or 0)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(g.dtype).astype(np.float64), rtol=r, atol=a,
                                   equal_nan=True, err_msg=f"result {i}")
    return module
