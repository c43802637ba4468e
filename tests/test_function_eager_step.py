"""Which calls take the single-launch eager path (``CompiledGraph._fast``) when a function calls other
functions: a nested ``tf.function`` and a loaded SavedModel's signature.

Both put Identity / IdentityN / NoOp chains around the clustered body (outputs ordered after the call,
the call after the variable reads). Those chains change nothing an eager launch leaves out, so the call
is still one launch on the inputs and the variables (before: the graph path, at about twice the
latency for a small model). Under a GradientTape the step reads the variables itself so the tape
records the launch; the gradient equals TF's. A read ordered after an assign the launch cannot absorb
keeps the graph path. Results are compared with TF (the dense layer's matmul accumulates in another
order than TF's: rtol 1e-4, atol 1e-4; elementwise: 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

RNG = np.random.default_rng(0)


class _Dense(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(RNG.standard_normal((16, 32)).astype(np.float32) / 4)
        self.b = tf.Variable(RNG.standard_normal(32).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w) + self.b))}


def test_a_nested_tf_function_is_still_one_eager_launch() -> None:
    inner = _Dense()

    def outer(x):
        return inner.serve(x)["y"] * 2.0

    f = tfxla_plugin.function(outer)
    for batch in (1, 5):
        x = tf.constant(RNG.standard_normal((batch, 16)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), outer(x).numpy(), rtol=1e-4, atol=1e-4)
        step = f.compiled_graph(x)._fast
        assert step is not None and {kind for kind, _ in step.sources} == {"arg", "var"}
    inner.b.assign_add(tf.ones(32))  # still live variables, read by the launch on each call
    np.testing.assert_allclose(f(x).numpy(), outer(x).numpy(), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    module = _Dense()
    path = tmp_path_factory.mktemp("eager_step") / "dense"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return tf.saved_model.load(str(path))


def test_a_loaded_signature_is_one_eager_launch_reading_its_variables(loaded) -> None:
    sig = loaded.signatures["serving_default"]
    f = tfxla_plugin.function(sig)
    for batch in (1, 3, 8):
        x = tf.constant(RNG.standard_normal((batch, 16)).astype(np.float32))
        np.testing.assert_allclose(f(x=x)["y"].numpy(), sig(x=x)["y"].numpy(), rtol=1e-4, atol=1e-4)
    step = f.compiled_graph(x=x)._fast
    assert step is not None
    loaded.b.assign(tf.zeros(32))  # the launch reads the variables' current values
    np.testing.assert_allclose(f(x=x)["y"].numpy(), sig(x=x)["y"].numpy(), rtol=1e-4, atol=1e-4)


def test_under_a_tape_a_loaded_signature_gives_tf_gradients(loaded) -> None:
    sig = loaded.signatures["serving_default"]
    f = tfxla_plugin.function(sig)
    x = tf.constant(RNG.standard_normal((4, 16)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = tf.reduce_sum(f(x=x)["y"] * tf.range(32, dtype=tf.float32))
        theirs = tf.reduce_sum(sig(x=x)["y"] * tf.range(32, dtype=tf.float32))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), tape.gradient(theirs, x).numpy(), rtol=1e-4, atol=1e-5)
    assert f.compiled_graph(x=x)._fast is not None


def test_a_read_ordered_after_an_assign_keeps_the_graph_path() -> None:
    v = tf.Variable(np.ones(8, np.float32))

    def fn(x):
        v.assign(x * 3.0)
        return tf.exp(v.read_value()) + x

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = tf.constant(RNG.standard_normal(8).astype(np.float32))
    got = f(x).numpy()
    v.assign(np.ones(8, np.float32))
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-5, atol=1e-5)
    assert f.compiled_graph(x)._fast is None
