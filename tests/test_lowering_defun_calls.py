"""A loop body calling a function as an op of its own type (v1 ``Defun`` style: the ``While`` bodies of
``tf.nn.ctc_loss``'s dense path, Keras ``CTC``): marked through the callee's body (graph_passes/mark.py)
and lowered as the ``PartitionedCall`` of it (``_function_body.calls_as_partitioned``). The compiled loss
and its gradient match TF eager within rtol 1e-5 (float32 log-sum-exp recurrences)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import keras
import tfxla_plugin
from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze_function


def _data():
    rng = np.random.default_rng(3)
    labels = tf.constant([[1, 2, 0], [3, 3, 1]], tf.int32)
    logits = tf.constant(rng.normal(size=(2, 6, 5)).astype(np.float32))
    return labels, logits


def _loss_and_grad(labels, logits):
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = keras.losses.CTC(reduction=None)(labels, tf.nn.softmax(logits))
    return loss, tape.gradient(loss, logits)


def test_ctc_loss_loop_bodies_are_compiled() -> None:
    cf = tf.function(_loss_and_grad).get_concrete_function(*_data())
    result = analyze_function(cf, ClusterOptions(must_compile=True))
    assert not result.unsupported()
    loops = [n for n in result.graph_def.node if n.op in ("While", "StatelessWhile")]
    assert loops and all(result.cluster_of(n.name) for n in loops)


def test_ctc_loss_and_gradient_match_tf() -> None:
    args = _data()
    got = tfxla_plugin.function(_loss_and_grad, jit_compile=True)(*args)
    want = _loss_and_grad(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
