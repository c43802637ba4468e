"""Under jit_compile="auto", a cluster that lowering or the backend refuses at compile time (a size a
rule does not take, which marking cannot see) stays in TensorFlow with one WARNING naming it and why;
under jit_compile=True the refusal is the error. The refused size: MaxPoolGradGrad's window, unrolled up
to 64 elements (a 9x9 window is refused, 2x2 compiles)."""

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from hlo.lowering.errors import LoweringError


def _image() -> tf.Tensor:
    return tf.constant(np.random.default_rng(0).standard_normal((1, 12, 12, 2)).astype(np.float32))


def _pool_grad_grad(k: int):
    def fn(x):
        x = x * 1.0 + 0.0
        y = tf.nn.max_pool2d(x, k, 1, "VALID")
        return tf.raw_ops.MaxPoolGradGrad(orig_input=x, orig_output=y, grad=x * 2.0, ksize=[1, k, k, 1],
                                          strides=[1, 1, 1, 1], padding="VALID") * 2.0 + 1.0
    return fn


def test_auto_leaves_a_refused_cluster_in_tensorflow_with_one_warning(caplog):
    x, fn = _image(), _pool_grad_grad(9)  # 81 window elements: refused while lowering
    f = tfxla_plugin.function(fn, jit_compile="auto")
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        got = f(x)
    np.testing.assert_array_equal(got.numpy(), fn(x).numpy())
    warnings = [r.getMessage() for r in caplog.records if "stays in TensorFlow" in r.getMessage()]
    assert len(warnings) == 1 and "MaxPoolGradGrad with a window of 81 elements is not supported" in warnings[0]
    compiled = f.compiled_graph(x)
    assert not compiled.clusters
    assert "not compiled: " in compiled.analysis.excluded["MaxPoolGradGrad"]


def test_auto_still_compiles_the_size_the_rule_takes():
    x, fn = _image(), _pool_grad_grad(2)
    f = tfxla_plugin.function(fn, jit_compile="auto")
    np.testing.assert_array_equal(f(x).numpy(), fn(x).numpy())
    assert len(f.compiled_graph(x).clusters) == 1


def test_must_compile_raises_the_refusal():
    f = tfxla_plugin.function(_pool_grad_grad(9), jit_compile=True)
    with pytest.raises(LoweringError, match=r"node 'MaxPoolGradGrad' \(MaxPoolGradGrad\).*MaxPoolGradGrad with a "
                                            r"window of 81 elements is not supported: it is unrolled over the window, "
                                            r"up to 64"):
        f(_image())
