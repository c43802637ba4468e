"""The warm eager call of a compiled function (``CompiledFunction._runs``): after a call compiles or
finds a signature, later calls with eager tensors of the same dtypes and shapes look up one prebuilt
runner (the launch with its attrs and inputs planned once, then the outputs packed) and skip
``_compiled``. These tests check that it changes nothing a call can see: results equal TF's (matmuls
accumulate in another order: rtol/atol 1e-4; elementwise 1e-6), output structures are TF's, a new
shape or dtype still traces, an input_signature mismatch still raises the same error, a tape still
records the call, assigned variables are read at their new values, --max_specializations still holds.
"""

from __future__ import annotations

import cProfile
import pstats

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tfxla_plugin.api import CompiledFunction

RNG = np.random.default_rng(0)
W1 = tf.constant(RNG.standard_normal((16, 32)).astype(np.float32) / 4)
W2 = tf.constant(RNG.standard_normal((32, 4)).astype(np.float32) / 4)


def _mlp(x, b):
    return tf.matmul(tf.nn.relu(tf.matmul(x, W1) + b), W2)


def _t(*shape) -> tf.Tensor:
    return tf.constant(RNG.standard_normal(shape).astype(np.float32))


def _no_slow_path(monkeypatch, f: CompiledFunction) -> None:
    """Make ``f``'s lookup-and-compile path fail: a call that still takes it raises."""
    def fail(*args, **kwargs):
        raise AssertionError("the warm call went through _compiled")
    monkeypatch.setattr(f, "_compiled", fail)


def test_warm_calls_take_the_runner_and_match_tf(monkeypatch) -> None:
    f = tfxla_plugin.function(_mlp)
    x, b = _t(8, 16), _t(32)
    np.testing.assert_allclose(f(x, b), _mlp(x, b), rtol=1e-4, atol=1e-4)
    assert len(f._runs) == 1
    _no_slow_path(monkeypatch, f)
    for _ in range(3):
        x = _t(8, 16)
        np.testing.assert_allclose(f(x, b), _mlp(x, b), rtol=1e-4, atol=1e-4)


def test_a_warm_call_is_a_handful_of_python_calls() -> None:
    """cProfile over warm calls: the lookup, the context check, the launch, the packing (was 29 for x+1)."""
    f = tfxla_plugin.function(lambda x: x + 1.0)
    x = tf.constant(1.5)
    assert float(f(x)) == 2.5
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        f(x)
    profile.disable()
    calls = pstats.Stats(profile).total_calls / 100
    assert calls <= 12, calls


@pytest.mark.parametrize("structure", ["tuple", "list", "dict", "nested"])
def test_output_structures_are_tf_functions(structure) -> None:
    def fn(x, b):
        y = _mlp(x, b)
        return {"tuple": lambda: (y, y * 2.0), "list": lambda: [y * 2.0, y],
                "dict": lambda: {"z": y, "a": y * 2.0, "m": y + 1.0},
                "nested": lambda: {"p": (y, [y * 2.0]), "q": None}}[structure]()

    f = tfxla_plugin.function(fn)
    x, b = _t(4, 16), _t(32)
    want = tf.function(fn)(x, b)
    for _ in range(2):  # the first call packs through _compiled's path, the second through the runner
        got = f(x, b)
        assert tf.nest.map_structure(lambda t: None, got) == tf.nest.map_structure(lambda t: None, want)
        if isinstance(want, dict):
            assert list(got) == list(want)  # the function's own key order, as TF packs it
        for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
            if w is None:
                assert g is None
            else:
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_a_new_shape_or_dtype_still_traces() -> None:
    f = tfxla_plugin.function(lambda x: x * 2.0 + 1.0)
    for _ in range(2):
        np.testing.assert_allclose(f(tf.constant([1.0, 2.0])), [3.0, 5.0], rtol=1e-6)
    assert f.experimental_get_tracing_count() == 1
    np.testing.assert_allclose(f(tf.constant([1.0, 2.0, 3.0])), [3.0, 5.0, 7.0], rtol=1e-6)
    np.testing.assert_allclose(f(tf.constant([1.0, 2.0], tf.float64)), [3.0, 5.0], rtol=1e-12)
    assert f.experimental_get_tracing_count() == 3
    assert f(tf.constant([1.0, 2.0], tf.float64)).dtype == tf.float64


@pytest.mark.parametrize("spec", [[None, 16], [8, 16]], ids=["batch-tiled", "static"])
def test_an_input_signature_mismatch_still_raises_after_warm_calls(spec) -> None:
    f = tfxla_plugin.function(_mlp, input_signature=[tf.TensorSpec(spec, tf.float32), tf.TensorSpec([32], tf.float32)])
    b = _t(32)
    for batch in ([8, 8, 3, 3] if spec[0] is None else [8, 8]):
        x = _t(batch, 16)
        np.testing.assert_allclose(f(x, b), _mlp(x, b), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match=r"argument 0 is TensorSpec\(shape=\(8, 15\).*not compatible with input_signature"):
        f(_t(8, 15), b)
    with pytest.raises(TypeError, match=r"argument 1 is TensorSpec\(shape=\(32,\), dtype=tf.float64.*not compatible"):
        f(_t(8, 16), tf.constant(RNG.standard_normal(32)))


def test_a_tape_still_records_a_warm_function() -> None:
    f = tfxla_plugin.function(_mlp)
    x, b = _t(8, 16), _t(32)
    f(x, b), f(x, b)
    with tf.GradientTape() as tape:
        tape.watch(b)
        loss = tf.reduce_sum(f(x, b) ** 2)
    with tf.GradientTape() as want_tape:
        want_tape.watch(b)
        want = tf.reduce_sum(_mlp(x, b) ** 2)
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    np.testing.assert_allclose(tape.gradient(loss, b), want_tape.gradient(want, b), rtol=1e-4, atol=1e-4)


def test_a_keras_model_reads_its_variables_at_their_new_values() -> None:
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    f = tfxla_plugin.function(model.__call__)
    x = _t(8, 16)
    for _ in range(2):
        np.testing.assert_allclose(f(x), model(x), rtol=1e-4, atol=1e-4)
    model.layers[0].kernel.assign(model.layers[0].kernel * 2.0)
    model.layers[1].bias.assign(tf.fill([4], 0.5))
    np.testing.assert_allclose(f(x), model(x), rtol=1e-4, atol=1e-4)


def test_an_optimizer_step_still_assigns_on_warm_calls() -> None:
    w = tf.Variable(RNG.standard_normal((16, 4)).astype(np.float32))

    @tfxla_plugin.function
    def step(x):
        w.assign_sub(0.1 * tf.matmul(tf.transpose(x), tf.matmul(x, w)))
        return tf.reduce_sum(w)

    x = _t(8, 16) / 4
    want = w.numpy()
    for _ in range(3):
        want = want - 0.1 * x.numpy().T @ (x.numpy() @ want)
        np.testing.assert_allclose(step(x), want.sum(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-4)


def test_calls_past_max_specializations_are_not_kept(monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", "--max_specializations=1")
    f = tfxla_plugin.function(lambda x: x * 3.0)
    for n in (2, 2, 3, 3):
        np.testing.assert_allclose(f(tf.ones([n])), np.full(n, 3.0), rtol=1e-6)
    assert list(f._runs) == [((tf.float32.as_datatype_enum, (2,)),)]


@pytest.mark.parametrize("fn", [lambda x, unused: x * 2.0 + 1.0, lambda unused, x: x * 2.0 + 1.0,
                                lambda x, y: x * 2.0 + y],
                         ids=["unused-last", "unused-first", "both"])
def test_the_launch_takes_the_arguments_it_reads(fn) -> None:
    f = tfxla_plugin.function(fn)
    for _ in range(3):
        x, y = _t(5), _t(5)
        np.testing.assert_allclose(f(x, y), fn(x, y), rtol=1e-6)


def _around_python(x, b):
    """One cluster and a numpy_function TensorFlow runs: calls take the rewritten graph, not one launch."""
    y = tf.nn.relu(tf.matmul(x, W1) + b) * 2.0
    y = tf.numpy_function(lambda a: a * 3.0, [y], tf.float32, stateful=False)
    y.set_shape(x.shape[:1] + [32])
    return tf.nn.relu(y) * 2.0 + 1.0


def test_the_graph_path_warm_and_under_a_tape(monkeypatch) -> None:
    f = tfxla_plugin.function(_around_python, jit_compile="auto")
    x, b = _t(8, 16), _t(32)
    np.testing.assert_allclose(f(x, b), _around_python(x, b), rtol=1e-4, atol=1e-4)
    assert f.compiled_graph(x, b)._fast is None and len(f.compiled_graph(x, b).clusters) == 1
    with tf.GradientTape() as tape:  # a tape: _compiled and the graph's flat call, which records it
        tape.watch(x)
        loss = tf.reduce_sum(f(x, b))
    with tf.GradientTape() as want_tape:
        want_tape.watch(x)
        want = tf.reduce_sum(_around_python(x, b))
    np.testing.assert_allclose(loss, want, rtol=1e-4)
    assert tape.gradient(loss, x) is None  # numpy_function has no gradient, in TF as here
    assert want_tape.gradient(want, x) is None
    _no_slow_path(monkeypatch, f)
    x = _t(8, 16)
    np.testing.assert_allclose(f(x, b), _around_python(x, b), rtol=1e-4, atol=1e-4)


def test_keyword_and_python_arguments_are_keyed_by_value(monkeypatch) -> None:
    def fn(x, scale, b=None, relu=False):
        y = _mlp(x, b) * scale
        return tf.nn.relu(y) if relu else y

    f = tfxla_plugin.function(fn)
    x, b = _t(8, 16), _t(32)
    calls = [((x, 2.0), {"b": b}), ((x, 2.0), {"b": b, "relu": True}), ((x, 3), {"relu": True, "b": b}),
             ((x,), {"scale": 2.0, "b": b})]
    for args, kwargs in calls * 2:
        np.testing.assert_allclose(f(*args, **kwargs), fn(*args, **kwargs), rtol=1e-4, atol=1e-4)
    assert len(f._runs) == 4
    traced = f.experimental_get_tracing_count()
    _no_slow_path(monkeypatch, f)
    x = _t(8, 16)
    for args, kwargs in [((x, 2.0), {"b": b}), ((x, 3), {"relu": True, "b": b})]:
        np.testing.assert_allclose(f(*args, **kwargs), fn(*args, **kwargs), rtol=1e-4, atol=1e-4)
    monkeypatch.undo()
    np.testing.assert_allclose(f(x, 2.5, b=b), fn(x, 2.5, b=b), rtol=1e-4, atol=1e-4)  # a new value: traced
    np.testing.assert_allclose(f(x, 2, b=b), fn(x, 2, b=b), rtol=1e-4, atol=1e-4)  # 2 is not 2.0: kept apart
    assert f.experimental_get_tracing_count() == traced + 1  # tf.function's trace for 2.0 takes 2
    assert len(f._runs) == 6


def test_a_keras_models_decorated_call_with_training_warm() -> None:
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf.keras.layers.Dense(8)
            self.norm = tf.keras.layers.BatchNormalization()

        @tfxla_plugin.function
        def call(self, x, training=False):
            return tf.nn.relu(self.norm(self.dense(x), training=training))

    net = Net()
    x = _t(4, 3)
    net(x)
    ref = tf.nn.relu(net.norm(net.dense(x), training=False))
    for _ in range(3):
        np.testing.assert_allclose(net(x, training=False), ref, rtol=1e-4, atol=1e-5)
    mean = net.norm.moving_mean.numpy()
    for _ in range(2):  # training: batch statistics, the moving mean moves on every call
        y = net.dense(x)
        m = tf.reduce_mean(y, 0)
        want = tf.nn.relu((y - m) / tf.sqrt(tf.math.reduce_variance(y, 0) + net.norm.epsilon) * net.norm.gamma
                          + net.norm.beta)
        np.testing.assert_allclose(net(x, training=True), want, rtol=1e-4, atol=1e-4)
        mean = mean * net.norm.momentum + m.numpy() * (1 - net.norm.momentum)
        np.testing.assert_allclose(net.norm.moving_mean.numpy(), mean, rtol=1e-5, atol=1e-6)


def test_variable_arguments_take_the_compiled_path_each_call() -> None:
    f = tfxla_plugin.function(_mlp)
    x = _t(8, 16)
    u, v = tf.Variable(_t(32)), tf.Variable(_t(32))
    for var in (u, v, u):
        np.testing.assert_allclose(f(x, var), _mlp(x, var), rtol=1e-4, atol=1e-4)
    u.assign(u * -1.0)
    np.testing.assert_allclose(f(x, u), _mlp(x, u), rtol=1e-4, atol=1e-4)
    assert not f._runs  # keyed by dtype, shape and aliasing in _compiled, never held by a warm key


def test_a_graph_path_function_returning_none_assigns_on_warm_calls() -> None:
    v = tf.Variable(tf.zeros([4]))

    def fn(x):
        y = tf.numpy_function(lambda a: a * 3.0, [x * 2.0 + 1.0], tf.float32, stateful=False)
        y.set_shape([4])
        v.assign(tf.nn.relu(y) + 1.0)

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = tf.constant([1.0, -2.0, 3.0, 4.0])
    for i in range(3):
        assert f(x + i) is None
        np.testing.assert_allclose(v.numpy(), np.maximum((x.numpy() + i) * 6.0 + 3.0, 0.0) + 1.0, rtol=1e-6)
    assert f.compiled_graph(x)._fast is None and len(f._runs) == 1
