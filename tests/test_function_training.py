"""Training through ``tfxla_plugin.function``: a compiled Keras train step, outer-tape gradients, auto mode.

1. A Keras model's train step (GradientTape, Keras Adam, training-mode BatchNormalization) compiled
   with ``tfxla_plugin.function`` trains three epochs on 64 synthetic samples (batch 16, 12 steps)
   with every loss, weight, batch-norm statistic and Adam's counter equal to the uncompiled
   ``tf.function`` run from the same initial weights (``set_weights``) and optimizer state.
2. Gradients of a compiled Keras forward taken by an OUTER ``GradientTape`` (through the registered
   ``TfxlaLaunch`` gradient) equal TF's, for the model's variables and the input: on the eager
   single-launch path (few variables) and on the rewritten-graph path (more variables).
3. ``jit_compile="auto"`` on a function mixing compilable math with ``tf.strings.as_string`` and
   ``tf.random.uniform`` runs correctly, with those nodes left in TF and ``explain`` giving why.

Tolerances (float32): over 12 Adam steps the rounding differences between our kernels and TF's
oneDNN matmuls stay near 1e-7 here (Adam divides by sqrt(v), which can amplify them for tiny
gradients), so losses and weights (O(0.1-1)) are compared with rtol 1e-5 and atol 1e-5; gradients with
rtol 1e-4 and atol 1e-5 x max(1, max |TF gradient|).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tfxla_plugin
from bench.models import keras_train_step

import keras  # noqa: E402  (installed with TensorFlow)

RNG = np.random.default_rng(0)


def _close(got, want, rtol=1e-4, atol=1e-4, what=""):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol, err_msg=what)


# --- 1. three epochs of a compiled Keras train step -----------------------------------------------

def classifier():
    return keras.Sequential([
        keras.Input((12,)),
        keras.layers.Dense(32, use_bias=False),
        keras.layers.BatchNormalization(),
        keras.layers.Activation("relu"),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(4),
    ])


def train(compile_fn, initial_weights, x, y, epochs=3, batch=16):
    """Three epochs with ``compile_fn(train_step)``; returns (losses, weights, iterations, step)."""
    keras.utils.set_random_seed(0)
    model = classifier()
    model.set_weights(initial_weights)
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    train_step = keras_train_step(model, optimizer)

    step = compile_fn(train_step)
    losses = []
    for _ in range(epochs):
        for i in range(0, len(x), batch):
            losses.append(float(step(tf.constant(x[i:i + batch]), tf.constant(y[i:i + batch]))))
    weights = model.get_weights()  # kernels, biases, gamma/beta and the moving statistics
    return losses, weights, int(optimizer.iterations.numpy()), step


@pytest.mark.slow
def test_keras_adam_train_step_three_epochs_matches_tf() -> None:
    x = RNG.normal(size=(64, 12)).astype(np.float32)
    y = (np.argmax(x[:, :4] + 0.3 * RNG.normal(size=(64, 4)), axis=1)).astype(np.int32)  # learnable labels
    keras.utils.set_random_seed(0)
    initial = classifier().get_weights()

    want_losses, want_weights, want_iters, _ = train(tf.function, initial, x, y)
    got_losses, got_weights, got_iters, step = train(tfxla_plugin.function, initial, x, y)

    assert got_iters == want_iters == 12
    assert want_losses[-1] < want_losses[0], "the data set is learnable: the loss goes down"
    _close(got_losses, want_losses, rtol=1e-5, atol=1e-5, what="losses")
    assert len(got_weights) == len(want_weights)
    for k, (g, w) in enumerate(zip(got_weights, want_weights)):
        _close(g, w, rtol=1e-5, atol=1e-5, what=f"weight {k} {w.shape}")
    # the whole step (forward, backward, Adam and batch-norm statistics) is one compiled cluster
    args = (tf.constant(x[:16]), tf.constant(y[:16]))
    compiled = step.compiled_graph(*args)
    assert len(compiled.clusters) == 1 and not compiled.analysis.unsupported()
    graph = step.experimental_get_compiler_ir(*args)(stage="graph")
    assert graph.count('op: "TfxlaLaunch"') == 1
    for op in ("MatMul", "SparseSoftmaxCrossEntropyWithLogits", "ReluGrad", "Sqrt"):
        assert f'op: "{op}"' not in graph


# --- 2. an outer tape through a compiled Keras forward ---------------------------------------------

def dense_stack(layers: int):
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((10,))] + [keras.layers.Dense(12, activation="tanh") for _ in range(layers)]
                            + [keras.layers.Dense(3)])


@pytest.mark.parametrize("layers,eager", [(2, True), (9, False)], ids=["eager_launch", "graph_launch"])
def test_outer_tape_gradients_of_a_keras_forward_equal_tf(layers: int, eager: bool, monkeypatch) -> None:
    from tfxla_plugin import compiled_graph

    if not eager:  # a variable budget of 0 keeps this one on the rewritten graph
        monkeypatch.setattr(compiled_graph, "_MAX_EAGER_READS", 0)
    model = dense_stack(layers)

    def forward(x):
        return tf.nn.softmax(model(x, training=False))

    f = tfxla_plugin.function(forward)
    x = tf.constant(RNG.normal(size=(5, 10)).astype(np.float32))
    assert (f.compiled_graph(x)._fast is not None) == eager  # which call path is under test
    weights = tf.constant(RNG.normal(size=(5, 3)).astype(np.float32))
    results = {}
    for name, fn in (("ours", f), ("tf", forward)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x) * weights)
        results[name] = (loss, *tape.gradient(loss, [x] + model.trainable_variables))
    assert all(g is not None for g in results["ours"]), "the tape saw every variable through the launch"
    for k, (g, w) in enumerate(zip(results["ours"], results["tf"])):
        scale = max(1.0, float(np.max(np.abs(w))))
        _close(g, w, atol=1e-5 * scale, what=f"gradient {k}")


def test_eager_single_launch_reads_live_variables_and_side_effects_keep_the_graph() -> None:
    """Regression: a Keras forward is one launch on the input and variable reads. tf.function makes its
    output wait on a NoOp over those reads (a control edge that clustering moves onto the launch) and
    lists the reads as control outputs; neither may push the call onto the slower graph path. A
    function that writes a variable and reads it back gives TF's values (its assign-add and the read
    compile into the launch, whose result is assigned after it; see test_function_eager_step.py for
    a read after a write that keeps the graph path)."""
    model = dense_stack(2)
    f = tfxla_plugin.function(lambda x: model(x, training=False))
    x = tf.constant(RNG.normal(size=(4, 10)).astype(np.float32))
    assert f.compiled_graph(x)._fast is not None
    _close(f(x), model(x, training=False), rtol=1e-5, atol=1e-6)
    kernel = model.layers[0].kernel
    kernel.assign(kernel * -0.5)  # the eager path reads the variables at every call
    _close(f(x), model(x, training=False), rtol=1e-5, atol=1e-6)

    counter = tf.Variable(0.0)

    def scaled(x):
        counter.assign_add(1.0)
        return x * 2.0 + counter.read_value()

    g = tfxla_plugin.function(scaled)
    y = tf.constant([1.0, 2.0])
    assert g.compiled_graph(y)._fast is not None  # read, launch (new count and result), assign
    _close(g(y), [3.0, 5.0], rtol=0, atol=0)  # the read after the write sees it, as in TF
    _close(g(y), [4.0, 6.0], rtol=0, atol=0)
    assert float(counter.numpy()) == 2.0
    _close(tf.function(scaled)(y), [5.0, 7.0], rtol=0, atol=0)


def test_an_update_step_runs_eagerly_and_writes_the_variables_as_tf_does() -> None:
    """An optimizer-style step (reads, one launch, the launch's results assigned back) takes the eager
    path: reads before the launch, assigns after it, as the graph orders them. Variables, the step
    counter and the returned loss equal a plain TF run step by step."""
    def make():
        w = tf.Variable(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3))
        b = tf.Variable(np.zeros(3, np.float32))
        step = tf.Variable(0, dtype=tf.int64)
        return w, b, step

    def train(w, b, step):
        def fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            step.assign_add(1)
            return loss
        return fn

    ours_vars, tf_vars = make(), make()
    f = tfxla_plugin.function(train(*ours_vars))
    g = tf.function(train(*tf_vars))
    x = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
    y = tf.constant(RNG.normal(size=(8, 3)).astype(np.float32))
    fast = f.compiled_graph(x, y)._fast
    assert fast is not None and len(fast.assigns) == 3, "reads, one launch, three assigns of its results"
    for _ in range(4):
        _close(f(x, y), g(x, y), rtol=1e-5, atol=1e-6, what="loss")
    with tf.GradientTape():  # a recording tape: the launch goes through its wrapper, reads and assigns too
        _close(f(x, y), g(x, y), rtol=1e-5, atol=1e-6, what="loss under a tape")
    for mine, theirs in zip(ours_vars, tf_vars):
        _close(mine, theirs, rtol=1e-5, atol=1e-6, what=mine.name)
    assert int(ours_vars[2].numpy()) == 5


# --- 3. auto clustering around a string op and a stateful random op -------------------------------

def test_auto_leaves_string_and_random_ops_in_tf_and_explains_why() -> None:
    def fn(x, w):
        h = tf.tanh(tf.matmul(x, w) * 0.5 + 1.0)  # compilable
        total = tf.reduce_sum(h * h, axis=1)
        label = tf.strings.as_string(total, precision=3)  # string op: stays in TF
        r = tf.random.uniform(tf.shape(h))  # stateful random: stays in TF
        noisy = tf.nn.relu(h + 0.1 * r) * 2.0 - tf.exp(-h)  # compilable, fed by the random op
        return label, r, noisy, total

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = tf.constant(RNG.normal(size=(6, 4)).astype(np.float32))
    w = tf.constant(RNG.normal(size=(4, 5)).astype(np.float32))
    label, r, noisy, total = f(x, w)

    h = tf.tanh(tf.matmul(x, w) * 0.5 + 1.0)
    want_total = tf.reduce_sum(h * h, axis=1)
    _close(total, want_total, rtol=1e-5, atol=1e-6)
    assert [s.decode() for s in label.numpy()] == [s.decode() for s in tf.strings.as_string(total, precision=3).numpy()]
    assert r.shape == (6, 5) and 0.0 <= float(tf.reduce_min(r)) and float(tf.reduce_max(r)) < 1.0
    _close(noisy, tf.nn.relu(h + 0.1 * r) * 2.0 - tf.exp(-h), rtol=1e-5, atol=1e-6)  # with the r TF drew
    _, r2, _, _ = f(x, w)
    assert not np.array_equal(r.numpy(), r2.numpy()), "the random op runs in TF on every call"

    gd = text_format.Parse(f.experimental_get_compiler_ir(x, w)(stage="graph"), tf.compat.v1.GraphDef())
    ops = [n.op for n in gd.node]
    assert ops.count("TfxlaLaunch") >= 1
    assert "AsString" in ops and "RandomUniform" in ops
    assert "Tanh" not in ops and "MatMul" not in ops and "Exp" not in ops

    text = f.explain(x, w)
    excluded = {line.split()[0]: line for line in text.splitlines()[text.splitlines().index(
        next(s for s in text.splitlines() if s.startswith("Nodes left in TensorFlow"))) + 1:] if line.strip()}
    assert "string" in excluded["AsString"].lower(), excluded["AsString"]
    assert "stateful random op" in excluded["RandomUniform"], excluded["RandomUniform"]
    assert "cluster_0" in text
