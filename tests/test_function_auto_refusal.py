"""Under jit_compile="auto", a cluster that lowering or the backend refuses at compile time (a size a
rule does not take, which marking cannot see) stays in TensorFlow with one WARNING naming it and why;
under jit_compile=True the refusal is the error."""

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from hlo.lowering.errors import LoweringError


def _spd(n: int) -> tf.Tensor:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    return tf.constant(a @ a.T + n * np.eye(n, dtype=np.float32))


def _fn(x):
    return tf.linalg.cholesky(x * 1.0 + 0.0) * 2.0 + 1.0


def test_auto_leaves_a_refused_cluster_in_tensorflow_with_one_warning(caplog):
    x = _spd(100)  # Cholesky is unrolled up to 64 rows: 100 is refused while lowering
    f = tfxla_plugin.function(_fn, jit_compile="auto")
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        got = f(x)
    np.testing.assert_allclose(got.numpy(), _fn(x).numpy(), rtol=1e-5, atol=1e-5)
    warnings = [r.getMessage() for r in caplog.records if "stays in TensorFlow" in r.getMessage()]
    assert len(warnings) == 1 and "Cholesky of 100x100 matrices is not supported" in warnings[0]
    compiled = f.compiled_graph(x)
    assert not compiled.clusters
    assert "not compiled: " in compiled.analysis.excluded["Cholesky"]


def test_auto_still_compiles_the_size_the_rule_takes():
    x = _spd(8)
    f = tfxla_plugin.function(_fn, jit_compile="auto")
    np.testing.assert_allclose(f(x).numpy(), _fn(x).numpy(), rtol=1e-4, atol=1e-4)
    assert len(f.compiled_graph(x).clusters) == 1


def test_must_compile_raises_the_refusal():
    f = tfxla_plugin.function(_fn, jit_compile=True)
    with pytest.raises(LoweringError, match=r"node 'Cholesky' \(Cholesky\).*Cholesky of 100x100 matrices is not "
                                            r"supported: it is unrolled over the rows, up to 64"):
        f(_spd(100))
