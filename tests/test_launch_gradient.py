"""The ``TfxlaLaunch`` gradient reads everything it needs from the launch op (``tfxla_plugin/gradient.py``).

Two clusters that compile to the SAME kernel but differ as TF graphs (``tf.stop_gradient(x) * y`` and
``x * y``: StopGradient lowers to nothing) must keep their own gradients; so must a function compiled
twice or called in a graph. The old kernel-hash table let the last compiled cluster's graph answer for
both. Gradients are compared exactly with TF's (one multiply: the same float32 products).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfxla_plugin
from tfxla_plugin.gradient import GRADIENT_ATTRS

X = tf.constant([[1.5, -2.0], [0.25, 3.0]])
Y = tf.constant([[2.0, 0.5], [-1.0, 4.0]])


def _plain(x, y):
    return x * y


def _stopped(x, y):
    return tf.stop_gradient(x) * y


def _tape_grads(f, x, y):
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        out = f(x, y)
    return [g.numpy() if g is not None else None for g in tape.gradient(out, [x, y])]


def test_two_clusters_with_one_kernel_keep_their_own_gradients() -> None:
    plain, stopped = tfxla_plugin.function(_plain), tfxla_plugin.function(_stopped)
    np.testing.assert_array_equal(plain(X, Y).numpy(), (X * Y).numpy())
    np.testing.assert_array_equal(stopped(X, Y).numpy(), (X * Y).numpy())  # compiled last
    kernels = [f.compiled_graph(X, Y).clusters[0].kernel_hash for f in (plain, stopped)]
    assert kernels[0] == kernels[1]  # one kernel for both
    assert all(f.compiled_graph(X, Y)._fast is not None for f in (plain, stopped))  # eager launches

    gx, gy = _tape_grads(plain, X, Y)
    np.testing.assert_array_equal(gx, Y.numpy())  # the old table answered with _stopped's graph: zeros
    np.testing.assert_array_equal(gy, X.numpy())
    gx, gy = _tape_grads(stopped, X, Y)
    np.testing.assert_array_equal(gx, np.zeros_like(X.numpy()))
    np.testing.assert_array_equal(gy, X.numpy())


def test_gradient_in_a_graph_and_after_compiling_again() -> None:
    first, again = tfxla_plugin.function(_plain), tfxla_plugin.function(_plain)
    first(X, Y)
    again(X, Y)

    @tf.function
    def outer(x, y):  # the compiled function runs inside a graph, differentiated by tf.gradients
        return tf.gradients(first(x, y), [x, y])

    def check(f) -> None:
        gx, gy = f(X, Y)
        np.testing.assert_array_equal(np.asarray(gx), Y.numpy())
        np.testing.assert_array_equal(np.asarray(gy), X.numpy())

    check(outer)
    tfxla_plugin.function(lambda x, y: tf.stop_gradient(x) * y)(X, Y)  # same kernel, other graph, compiled last
    check(outer)
    for f in (first, again):
        check(lambda x, y, f=f: _tape_grads(f, x, y))


def test_the_launch_carries_its_cluster_graph() -> None:
    f = tfxla_plugin.function(_stopped)
    f(X, Y)
    concrete = f.compiled_graph(X, Y)
    launch = concrete.rewritten.launches["cluster_0"]
    node = next(n for n in concrete.rewritten.graph_def.node if n.name == launch.node)
    assert node.op == "TfxlaLaunch"
    for key in GRADIENT_ATTRS:
        assert node.attr[key].s, key
    assert b"StopGradient" in node.attr["cluster_graph"].s
