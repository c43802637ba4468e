"""graph_passes/fold_shapes.py: BroadcastGradientArgs/BroadcastArgs of known shapes and empty-range
clamps become constants (values equal to TF's kernels on the same shapes), the graph still runs with
TF's results, and the gradients of batched matmuls with broadcast batch dims (Keras attention) and
``tf.math.bincount`` with ``minlength == maxlength`` become fully compilable."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from graph_passes.fold_shapes import broadcast_gradient_args, fold_shapes
from graph_passes.mark import analysis_graph
from graph_passes.pipeline import analyze_function
from tests.graph_passes_util import run_graph

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("s0,s1", [([2, 3, 4], [4]), ([1, 5], [3, 1]), ([2, 1, 4], [2, 1, 4]), ([], [3, 2]),
                                   ([1], [1, 1]), ([3, 1, 1], [1, 1])])
def test_broadcast_gradient_args_equal_tf(s0, s1) -> None:
    want = [t.numpy().tolist() for t in tf.raw_ops.BroadcastGradientArgs(s0=tf.constant(s0, tf.int32),
                                                                          s1=tf.constant(s1, tf.int32))]
    assert list(broadcast_gradient_args(s0, s1)) == want


def _graph(fn, *specs):
    return tf.function(fn).get_concrete_function(*specs).graph.as_graph_def()


def test_folds_and_the_graph_still_runs() -> None:
    def fn(x, y):
        r0, r1 = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(x)[:-2], s1=tf.shape(y)[:-2])
        size = tf.minimum(6.0, tf.maximum(6.0, tf.reduce_max(x) + 1.0))  # an empty-range clamp
        other = tf.minimum(6.0, tf.maximum(2.0, tf.reduce_max(x)))  # a real clamp: kept
        return tf.reduce_sum(x, r0), tf.reduce_sum(y, r1), size, other
    gd = _graph(fn, tf.TensorSpec((2, 3, 4, 5), tf.float32), tf.TensorSpec((1, 3, 5, 4), tf.float32))
    folded = fold_shapes(gd, analysis_graph(gd))
    assert sorted(folded.folded.values()) == ["BroadcastGradientArgs", "Minimum"]
    x, y = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32), RNG.normal(size=(1, 3, 5, 4)).astype(np.float32)
    outs = [n.name for n in gd.node if n.op == "Identity"]
    want = [np.asarray(v) for v in fn(tf.constant(x), tf.constant(y))]
    got = run_graph(folded.graph_def, [f"{o}:0" for o in outs[:4]], {"x:0": x, "y:0": y})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    graph = analysis_graph(folded.graph_def)
    shapes = [graph.get_tensor_by_name(f"{o}:0").shape.as_list() for o in outs[:2]]
    assert shapes == [[2, 3, 4, 5], [3, 5, 4]], "the Sums after the folded node have static shapes now"


def test_attention_training_step_is_fully_compilable() -> None:
    x = tf.constant(RNG.normal(size=(2, 3, 4)).astype(np.float32))
    w = tf.Variable(RNG.normal(size=(4, 2, 3)).astype(np.float32))

    def step(a):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.einsum("btd,dhk->bthk", a, w) ** 2)
        return tape.gradient(loss, w), tf.math.bincount(tf.cast(a > 0, tf.int32), minlength=3, maxlength=3)
    result = analyze_function(tf.function(step).get_concrete_function(x))
    assert not result.unsupported(), result.unsupported()
