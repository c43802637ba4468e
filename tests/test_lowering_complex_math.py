"""Complex ``Expm1``, ``Log1p`` and ``Pow`` (hlo/lowering/ops/complex_math.py), in the evaluator and compiled
for the CPU, on values from 1e-12 to 1e2 in both parts: ``Expm1`` and ``Pow`` against TF eager (rtol
2e-6 for c64, 1e-12 for c128); ``Log1p`` against TF's XLA (``jit_compile=True``), because TF's CPU kernel
is less accurate than both (relative errors to 2e-4 in c64 near ``|z| = 1e-4``, checked here too)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
import tfxla_plugin
from tests.lowering_harness import lower_fn

RTOL = {np.complex64: 2e-6, np.complex128: 1e-12}


def _values(dtype, n: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mag = lambda: rng.normal(size=n) * np.exp(rng.uniform(-27, 4.6, n))  # noqa: E731
    z = mag() + 1j * mag()
    z[:6] = [0, -0.5, 1j, -1 + 1j, 1e-8 + 1e-3j, 3 - 2j]
    return z.astype(dtype)


def _close(got, want, dtype) -> None:
    got, want = np.asarray(got).astype(np.complex128), np.asarray(want).astype(np.complex128)
    scale = np.maximum(np.abs(want), 1e-300)
    err = np.abs(got - want) / scale
    assert np.max(err) <= RTOL[dtype], f"max relative error {np.max(err):.3g} at {np.argmax(err)}"


def _evaluated(fn, *args):
    return hlo.evaluate(lower_fn(fn, *args), *args)[0]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_expm1_and_pow_match_tf_eager(dtype) -> None:
    z, w = _values(dtype), _values(dtype, seed=1) * 0.1
    _close(_evaluated(tf.math.expm1, z), tf.math.expm1(z).numpy(), dtype)
    x, y = z[6:], w[6:]  # (no zero base: 0**w is an edge of its own)
    _close(_evaluated(tf.pow, x, y), tf.pow(x, y).numpy(), dtype)
    _close(_evaluated(tf.pow, x, y[:1]), tf.pow(x, y[:1]).numpy(), dtype)  # broadcast


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_log1p_matches_xla(dtype) -> None:
    z = _values(dtype)
    want = tf.function(tf.math.log1p, jit_compile=True)(z).numpy()
    _close(_evaluated(tf.math.log1p, z), want, dtype)


def test_tf_eager_complex_log1p_is_the_inaccurate_one() -> None:
    z = np.array([1.2352636e-05 + 0.0003350453j], np.complex64)
    exact = np.log1p(z.astype(np.complex128))  # NumPy's c128 log1p is accurate here
    eager = tf.math.log1p(z).numpy()
    ours = _evaluated(tf.math.log1p, z)
    assert abs(eager - exact)[0] / abs(exact)[0] > 1e-4
    assert abs(ours - exact)[0] / abs(exact)[0] < 1e-6


def test_compiled_for_the_cpu() -> None:
    z = _values(np.complex64)
    fn = lambda a, b: (tf.math.expm1(a), tf.pow(a[6:], b[6:]), tf.math.log1p(a))  # noqa: E731
    w = _values(np.complex64, seed=1) * 0.1
    got = tfxla_plugin.function(fn, jit_compile=True)(z, w)
    want = (tf.math.expm1(z), tf.pow(z[6:], w[6:]), tf.function(tf.math.log1p, jit_compile=True)(z))
    for g, e in zip(got, want):
        _close(g.numpy(), e.numpy(), np.complex64)
    assert np.isnan(tfxla_plugin.function(tf.pow, jit_compile=True)(np.zeros(1, np.complex64),
                                                                      np.zeros(1, np.complex64)).numpy()).all()
