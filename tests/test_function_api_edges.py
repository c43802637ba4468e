"""tfxla_plugin.function on the edges of its API, in both jit_compile=True and "auto": a dead cluster,
captured eager tensors of every size, ``tf.Variable`` arguments (read and assigned), a Keras model's
decorated ``call`` (method binding, ``training=``), and a loaded SavedModel signature whose loaded object
is gone. Results are compared with TF eager: elementwise 1e-5 relative, 1e-6 absolute; a matmul or a
batch norm (other summation orders) 1e-4 / 1e-5.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

RNG = np.random.default_rng(0)
MODES = [True, "auto"]


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def _vec(n: int) -> tf.Tensor:
    return tf.constant(RNG.standard_normal(n).astype(np.float32))


# --- a cluster nothing reads -------------------------------------------------------------------------
def test_a_dead_cluster_is_dropped_not_compiled_and_explained() -> None:
    def fn(x):
        tf.exp(tf.sin(x) * 2.0 + tf.cos(x))  # nothing reads it
        return tf.strings.as_string(x), x * 3.0

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = _vec(5)
    got, want = f(x), fn(x)
    assert got[0].numpy().tolist() == want[0].numpy().tolist()
    _close(got[1], want[1])
    graph = f.compiled_graph(x)
    assert not graph.clusters and [d.name for d in graph.analysis.dead] == ["cluster_0"]
    assert "Dead code removed (1 cluster(s): no output, control output or stateful op needs them; not compiled):" \
           "\n  cluster_0: " in f.explain(x)
    assert not any(n.op in ("Sin", "Cos", "Exp") for n in graph.rewritten.graph_def.node)


def test_a_dead_cluster_beside_a_live_one_leaves_one_eager_launch() -> None:
    def fn(x):
        tf.exp(tf.sin(x) * 2.0 + tf.cos(x))  # dead: its own cluster in auto (nothing connects it)
        return tf.tanh(x) * 2.0 + tf.abs(x) - 1.0

    for mode in MODES:
        f = tfxla_plugin.function(fn, jit_compile=mode)
        x = _vec(6)
        _close(f(x), fn(x))
        assert f.compiled_graph(x)._fast is not None, mode


@pytest.mark.parametrize("mode", MODES)
def test_none_among_the_outputs_stays_none(mode) -> None:
    def fn(x):
        return x * 2.0, None, {"a": tf.sin(x) + 1.0}

    x = _vec(3)
    want = fn(x)
    for f in (tfxla_plugin.function(fn, jit_compile=mode),
              tfxla_plugin.function(tf.function(fn).get_concrete_function(x), jit_compile=mode)):
        got = f(x)
        assert got[1] is None and set(got[2]) == {"a"}
        _close(got[0], want[0])
        _close(got[2]["a"], want[2]["a"])


def test_a_cluster_only_dead_tf_ops_read_is_dead_and_so_are_they() -> None:
    def fn(x):
        tf.strings.as_string(tf.exp(tf.sin(x) * 2.0 + tf.cos(x)))  # a cluster whose only reader is dead
        return tf.strings.as_string(x), x * 3.0

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = _vec(5)
    got, want = f(x), fn(x)
    assert got[0].numpy().tolist() == want[0].numpy().tolist()
    _close(got[1], want[1])
    graph = f.compiled_graph(x)
    assert not graph.clusters and len(graph.analysis.dead) == 1
    assert [n.op for n in graph.rewritten.graph_def.node].count("AsString") == 1  # the live one


def test_must_compile_does_not_refuse_dead_code_it_cannot_compile() -> None:
    def fn(x):
        tf.strings.as_string(x * 2.0)  # dead: TF prunes it
        return tf.tanh(x) + 1.0

    f = tfxla_plugin.function(fn, jit_compile=True)
    x = _vec(4)
    _close(f(x), fn(x))
    assert f.compiled_graph(x)._fast is not None


# --- captured eager tensors ----------------------------------------------------------------------------
# 3 elements: TF traces it as a Const (under its 128-element threshold) yet lists it as a capture; 500: a
# captured placeholder that a cluster copies in (``SMALL_CONSTANT_ELEMENTS``); 3000: a cluster input
@pytest.mark.parametrize("size", [3, 500, 3000])
@pytest.mark.parametrize("left_in_tf", [False, True])
def test_captured_eager_tensors_map_on_every_path(size: int, left_in_tf: bool) -> None:
    c = _vec(size)
    small = _vec(3)

    def fn(x):
        y = tf.reduce_sum(c * 0.5) + x * small + 1.0
        return (tf.strings.as_string(y), y * 2.0) if left_in_tf else y * 2.0

    x = _vec(3)
    want = fn(x)
    for mode in ["auto"] if left_in_tf else MODES:
        f = tfxla_plugin.function(fn, jit_compile=mode)
        got = f(x)
        if left_in_tf:
            assert got[0].shape == want[0].shape
            _close(got[1], want[1], rtol=1e-5, atol=1e-4)
            assert f.compiled_graph(x)._fast is None  # a TF op is left: the graph path
        else:
            _close(got, want, rtol=1e-5, atol=1e-4)
            assert f.compiled_graph(x)._fast is not None  # one launch: the eager path


def test_a_captured_tensor_under_a_tape_gives_tf_gradients() -> None:
    c = _vec(2000)

    def fn(x):
        return tf.reduce_sum(tf.sin(x * c))

    f = tfxla_plugin.function(fn)
    x = _vec(2000)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, theirs = f(x), fn(x)
    _close(ours, theirs, rtol=1e-4, atol=1e-4)
    _close(tape.gradient(ours, x), tape.gradient(theirs, x), rtol=1e-5, atol=1e-5)


# --- tf.Variable arguments --------------------------------------------------------------------------------
def _read(var, x):
    return var * x + 1.0


def _assign_then_read(var, x):
    var.assign_add(x)
    return tf.exp(var * 0.5) + x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [_read, _assign_then_read])
def test_variable_arguments_read_and_assign_like_tf(mode, fn) -> None:
    f = tfxla_plugin.function(fn, jit_compile=mode)
    start = RNG.standard_normal(4).astype(np.float32)
    ours, theirs = tf.Variable(start), tf.Variable(start)
    other_ours, other_theirs = tf.Variable(start * 3), tf.Variable(start * 3)
    for var, twin in [(ours, theirs), (other_ours, other_theirs), (ours, theirs)]:  # one compile serves both
        x = _vec(4)
        _close(f(var, x), fn(twin, x))
        _close(var, twin)
    assert len(f._cache) == 1


@pytest.mark.parametrize("mode", MODES)
def test_variable_arguments_in_a_structure_and_aliased(mode) -> None:
    def fn(params, x):
        params["w"].assign(params["w"] * 2.0)
        return params["w"] * x + params["b"]

    f = tfxla_plugin.function(fn, jit_compile=mode)
    w0, b0 = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    ours = {"w": tf.Variable(w0), "b": tf.Variable(b0)}
    theirs = {"w": tf.Variable(w0), "b": tf.Variable(b0)}
    x = _vec(3)
    _close(f(ours, x), fn(theirs, x))
    _close(ours["w"], theirs["w"])
    # the same variable twice: one resource input, as tf.function traces it
    same_ours, same_theirs = tf.Variable(w0), tf.Variable(w0)
    _close(f({"w": same_ours, "b": same_ours}, x), fn({"w": same_theirs, "b": same_theirs}, x))
    _close(same_ours, same_theirs)


@pytest.mark.parametrize("mode", MODES)
def test_a_variable_argument_under_a_tape_gives_tf_gradients(mode) -> None:
    def fn(var, x):
        return tf.reduce_sum(tf.tanh(var * x))

    f = tfxla_plugin.function(fn, jit_compile=mode)
    var, x = tf.Variable(_vec(8)), _vec(8)
    with tf.GradientTape(persistent=True) as tape:
        ours, theirs = f(var, x), fn(var, x)
    _close(ours, theirs)
    _close(tape.gradient(ours, var), tape.gradient(theirs, var))


# --- a Keras subclassed model -----------------------------------------------------------------------------
class KerasNet(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(8)
        self.norm = tf.keras.layers.BatchNormalization()
        self.dense.build((None, 3))
        self.norm.build((None, 8))

    def call(self, x, training=False):
        return tf.nn.relu(self.norm(self.dense(x), training=training))


def _compiled_net(mode):
    class CompiledKerasNet(KerasNet):
        @tfxla_plugin.function(jit_compile=mode)
        def call(self, x, training=False):
            return tf.nn.relu(self.norm(self.dense(x), training=training))

    return CompiledKerasNet


@pytest.mark.parametrize("mode", MODES)
def test_a_keras_models_decorated_call_binds_per_instance_with_training(mode) -> None:
    CompiledKerasNet = _compiled_net(mode)  # noqa: N806 - a class
    ref, ours = KerasNet(), CompiledKerasNet()
    ours.set_weights(ref.get_weights())
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    for training in (True, True, False):  # training: batch statistics, and the moving averages move
        _close(ours(x, training=training), ref(x, training=training), rtol=1e-4, atol=1e-5)
        for a, b in zip(ours.get_weights(), ref.get_weights()):
            _close(a, b, rtol=1e-5, atol=1e-6)
    _close(ours.call(x), ref.call(x), rtol=1e-4, atol=1e-5)  # training defaults to False
    assert ours.call is ours.call
    other = CompiledKerasNet()
    other.set_weights([w * 2.0 for w in ref.get_weights()])
    doubled = KerasNet()
    doubled.set_weights([w * 2.0 for w in ref.get_weights()])
    _close(other(x), doubled(x), rtol=1e-4, atol=1e-5)  # its own variables, not the first instance's
    gone = weakref.ref(other)
    del other
    gc.collect()
    assert gone() is None  # the per-instance binding holds its model weakly


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["model", "call"])
def test_function_of_a_keras_model_or_its_call(target, mode) -> None:
    ref = KerasNet()
    f = tfxla_plugin.function(ref if target == "model" else ref.call, jit_compile=mode)
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    _close(f(x, training=False), ref(x, training=False), rtol=1e-4, atol=1e-5)


# --- a loaded SavedModel signature outliving its loaded object -------------------------------------------------
class _Served(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(RNG.standard_normal((3, 4)).astype(np.float32))
        self.table = tf.constant(RNG.standard_normal(3000).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        y = tf.matmul(x, self.w) + tf.reduce_mean(self.table)
        return {"y": y, "text": tf.strings.as_string(y)}


@pytest.fixture(scope="module")
def served_path(tmp_path_factory):
    module = _Served()
    path = str(tmp_path_factory.mktemp("edges") / "served")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


@pytest.mark.parametrize("mode", ["auto", False])
def test_a_loaded_signature_keeps_working_once_the_loaded_object_is_gone(served_path, mode) -> None:
    kept = tf.saved_model.load(served_path)
    x = tf.constant(RNG.standard_normal((2, 3)).astype(np.float32))
    want = kept.signatures["serving_default"](x=x)
    f = tfxla_plugin.function(tf.saved_model.load(served_path).signatures["serving_default"], jit_compile=mode)
    gc.collect()  # the loaded object and its variables are gone; their values live on in the handles
    got = f(x=x)
    _close(got["y"], want["y"], rtol=1e-4, atol=1e-5)
    assert got["text"].shape == want["text"].shape


def test_a_gone_loaded_objects_signature_is_still_one_eager_launch(tmp_path) -> None:
    module = _Dense()
    path = str(tmp_path / "dense")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    x = tf.constant(RNG.standard_normal((2, 3)).astype(np.float32))
    f = tfxla_plugin.function(tf.saved_model.load(path).signatures["serving_default"])
    gc.collect()
    _close(f(x=x)["y"], module.serve(x)["y"], rtol=1e-4, atol=1e-5)
    assert f.compiled_graph(x=x)._fast is not None
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, theirs = tf.reduce_sum(f(x=x)["y"] ** 2), tf.reduce_sum(module.serve(x)["y"] ** 2)
    _close(tape.gradient(ours, x), tape.gradient(theirs, x), rtol=1e-4, atol=1e-5)


class _Dense(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(RNG.standard_normal((3, 4)).astype(np.float32))
        self.b = tf.Variable(RNG.standard_normal(4).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.tanh(tf.matmul(x, self.w) + self.b)}
