"""Input shapes beyond a None batch: ``[None, None]`` signatures and batch-reducing clusters.

A ``[None, None]`` input_signature (batch and sequence length unknown) and a ``None`` batch whose
clusters reduce over the batch (a loss) compile once, with symbolic dims (``tfxla_plugin/symbolic_dims.py``).
Calls without an input_signature compile per concrete input shape, a bounded number of them
(``--max_specializations``); past the bound, new shapes run in TensorFlow after one WARNING. Compiles
are counted by the logger's "compiled cluster" lines (one per cluster compiled); results are compared
with TF eager.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

RTOL, ATOL = 1e-5, 1e-6  # gather + mean + tanh in f32: a few ulps
LENGTHS = (3, 7, 1, 12, 5)


def _compiles(caplog) -> int:
    return sum(1 for r in caplog.records if r.getMessage().startswith("compiled cluster "))


def _text_model():
    """Embedding lookup, mean over the sequence, a dense layer: a text classifier's forward pass."""
    rng = np.random.default_rng(0)
    table = tf.Variable(rng.standard_normal((50, 8)).astype(np.float32))
    dense = tf.Variable(rng.standard_normal((8, 3)).astype(np.float32))

    def classify(ids):
        x = tf.gather(tf.identity(table), ids)  # [batch, length, 8]
        return tf.tanh(tf.matmul(tf.reduce_mean(x, axis=1), tf.identity(dense)) + 0.5)
    return classify


def _ids(batch: int, length: int) -> tf.Tensor:
    return tf.constant(np.random.default_rng(length).integers(0, 50, size=(batch, length)), tf.int32)


@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_unknown_batch_and_length_compile_once(jit_compile, caplog) -> None:
    classify = _text_model()
    spec = tf.TensorSpec([None, None], tf.int32, name="ids")
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        f = tfxla_plugin.function(classify, jit_compile=jit_compile, input_signature=[spec])
        for length in LENGTHS:
            ids = _ids(4, length)
            np.testing.assert_allclose(f(ids).numpy(), classify(ids).numpy(), rtol=RTOL, atol=ATOL)
        ids = _ids(2, 3)  # a new batch size too
        np.testing.assert_allclose(f(ids).numpy(), classify(ids).numpy(), rtol=RTOL, atol=ATOL)
        assert _compiles(caplog) == 1  # one cluster, compiled once with symbolic dims
    assert "1 cluster(s) built" in f.explain(ids)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_past_max_specializations_new_shapes_run_in_tensorflow_with_one_warning(monkeypatch, caplog) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", "--max_specializations=2")
    classify = _text_model()
    f = tfxla_plugin.function(classify)  # no input_signature: compiled per call shape
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for length in LENGTHS:
            ids = _ids(4, length)
            np.testing.assert_allclose(f(ids).numpy(), classify(ids).numpy(), rtol=RTOL, atol=ATOL)
        assert _compiles(caplog) == 2  # lengths 3 and 7; 1, 12 and 5 ran in TensorFlow
        ids = _ids(4, LENGTHS[0])  # a compiled shape still runs its kernel
        np.testing.assert_allclose(f(ids).numpy(), classify(ids).numpy(), rtol=RTOL, atol=ATOL)
    assert _compiles(caplog) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("classify: 2 input shapes compiled (--max_specializations=2); calls with a new "
                                  "shape run in TensorFlow uncompiled from now on (first: int32[4, 1])")


def test_auto_with_a_batch_reducing_loss_compiles_once(caplog) -> None:
    w = tf.Variable(np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32))

    def loss(x):
        h = tf.tanh(tf.matmul(x, tf.identity(w)) + 1.0)
        return tf.reduce_mean(tf.square(h - 0.5))  # reduces over the batch: no batch tiling

    f = tfxla_plugin.function(loss, jit_compile="auto", input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for batch in (4, 6, 4):
            x = tf.constant(np.random.default_rng(batch).standard_normal((batch, 5)).astype(np.float32))
            np.testing.assert_allclose(f(x).numpy(), loss(x).numpy(), rtol=RTOL, atol=ATOL)
    assert _compiles(caplog) == 1  # no batch tiles (it reduces over the batch): symbolic dims
    assert "compiling per input shape" not in caplog.text
    assert f.explain(x).startswith("Clustering summary: 1 cluster(s) built")


def test_a_trace_with_unknown_dims_compiles_symbolic_kernels(caplog) -> None:
    # get_concrete_function / saving trace from the TensorSpec itself: symbolic dims serve every shape
    f = tfxla_plugin.function(lambda z: tf.tanh(z) * 2.0, input_signature=[tf.TensorSpec([None, None], tf.float32)])
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        cf = f.get_concrete_function()
    assert _compiles(caplog) == 1
    for shape in ((3, 4), (1, 9)):
        z = tf.constant(np.linspace(-2, 2, shape[0] * shape[1], dtype=np.float32).reshape(shape))
        np.testing.assert_allclose(cf(z).numpy(), (tf.tanh(z) * 2.0).numpy(), rtol=RTOL, atol=ATOL)


def test_a_trace_with_an_unknown_rank_says_why_it_compiles_nothing(caplog) -> None:
    from tfxla_plugin.errors import UnsupportedGraphError

    spec = [tf.TensorSpec(None, tf.float32, name="z")]
    why = ("input(s) z (unknown rank) have unknown dims that no kernel serves: batch tiles need a None leading dim "
           "alone, symbolic dims a known rank and clusters whose sizes generalize (the INFO log says why one did "
           "not)")
    must = tfxla_plugin.function(lambda z: tf.tanh(z) * 2.0, input_signature=spec)
    with pytest.raises(UnsupportedGraphError, match=r"Tanh 'Tanh': dynamic shape: 'z:0' has shape <unknown rank>") as e:
        must.get_concrete_function()
    assert f"\nWhy: {why}. Call <lambda> eagerly" in str(e.value)
    auto = tfxla_plugin.function(lambda z: tf.tanh(z) * 2.0, jit_compile="auto", input_signature=spec)
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        cf = auto.get_concrete_function()
    assert f"<lambda>: this trace compiles no cluster and runs in TensorFlow: {why}" in caplog.text
    z = tf.constant(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_allclose(cf(z).numpy(), (tf.tanh(z) * 2.0).numpy(), rtol=RTOL, atol=ATOL)
