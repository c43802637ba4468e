"""Keras recurrent models through ``tfxla_plugin.function``: the recurrent ``While`` (its TensorLists,
its variable reads hoisted by graph_passes/loop_reads.py) compiles into one cluster with its body.

1. Forward, ``jit_compile=True``: LSTM, GRU, Bidirectional(LSTM) and a masked LSTM classifier
   (``Embedding(mask_zero=True)``, padded sequences) equal Keras eager; the compiled graph is one cluster
   holding every loop.
2. One Adam train step (``bench.models.keras_train_step``): loss and every weight after the step equal
   ``tf.function``'s from the same initial weights; the backward loop (``StatelessWhile`` reading the
   forward loop's accumulator lists) is compiled in the same cluster. LSTM and GRU must compile whole; the
   Bidirectional and masked steps also need ops other lowerings provide (``InvertPermutation`` for the
   reversed sequence's gradient, ``UnsortedSegmentSum`` for the embedding's), so without those they run
   with ``jit_compile="auto"``, and the masked step's loops must still be compiled.
3. An outer ``GradientTape`` through a compiled LSTM forward gives TF's gradients.

Tolerances (float32): the compiled cell computes the same products and sums as TF's kernels in another
order, so outputs (O(0.1-1)) are compared with rtol 1e-5 and atol 1e-5; one Adam step moves each weight by
about lr * sign(gradient), so weights after it get the same tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import keras  # noqa: E402  (installed with TensorFlow)
import tfxla_plugin
from bench.models import keras_train_step
from hlo.lowering.registry import rule_for

RTOL = ATOL = 1e-5
LOOPS = ("While", "StatelessWhile")


def build(kind: str):
    keras.utils.set_random_seed(0)
    if kind == "masked":
        layers = [keras.Input((5,), dtype="int32"), keras.layers.Embedding(10, 4, mask_zero=True), keras.layers.LSTM(8)]
    else:
        rnn = {"lstm": lambda: keras.layers.LSTM(8), "gru": lambda: keras.layers.GRU(8),
               "bidi": lambda: keras.layers.Bidirectional(keras.layers.LSTM(6))}[kind]()
        layers = [keras.Input((5, 3)), rnn]
    return keras.Sequential(layers + [keras.layers.Dense(4)])


def data(kind: str):
    rng = np.random.default_rng(1)
    if kind == "masked":
        x = rng.integers(1, 10, (3, 5)).astype(np.int32)
        x[1, 3:] = 0  # padding: the mask keeps those steps out
        x[2, 1:] = 0
    else:
        x = rng.standard_normal((3, 5, 3)).astype(np.float32)
    return tf.constant(x), tf.constant([1, 2, 3], tf.int32)


def _close(got, want, what):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL, err_msg=what)


def loops_clustered(compiled) -> list[bool]:
    analysis = compiled.analysis
    return [analysis.cluster_of(n.name) is not None for n in analysis.graph_def.node if n.op in LOOPS]


@pytest.mark.parametrize("kind", ["lstm", "gru", "bidi", "masked"])
def test_forward(kind):
    model = build(kind)
    x, _ = data(kind)
    f = tfxla_plugin.function(lambda t: model(t), jit_compile=True)
    compiled = f.compiled_graph(x)
    assert len(compiled.clusters) == 1
    clustered = loops_clustered(compiled)
    assert clustered and all(clustered), clustered
    _close(f(x), model(x), f"{kind} forward")


def _needs(*ops: str) -> bool | str:
    return True if all(rule_for(op) is not None for op in ops) else "auto"


@pytest.mark.parametrize("kind, jit", [
    ("lstm", True),
    ("gru", True),
    ("bidi", _needs("InvertPermutation")),
    ("masked", _needs("InvertPermutation", "UnsortedSegmentSum")),
])
def test_adam_train_step(kind, jit):
    x, y = data(kind)
    initial = build(kind).get_weights()
    results = []
    for compile_fn in (lambda fn: tfxla_plugin.function(fn, jit_compile=jit), tf.function):
        model = build(kind)
        model.set_weights(initial)
        step = compile_fn(keras_train_step(model, keras.optimizers.Adam(learning_rate=1e-2)))
        loss = step(x, y)
        results.append((float(loss), [np.asarray(w) for w in model.get_weights()], step))
    (loss, weights, step), (want_loss, want_weights, _) = results
    _close(loss, want_loss, f"{kind} loss")
    for k, (w, want) in enumerate(zip(weights, want_weights)):
        _close(w, want, f"{kind} weight {k} after one Adam step")
    compiled = step.compiled_graph(x, y)
    clustered = loops_clustered(compiled)
    assert len(clustered) == 2 * (2 if kind == "bidi" else 1)  # forward loops and their backward loops
    if jit is True:
        assert len(compiled.clusters) == 1 and all(clustered), clustered
    elif kind == "masked":  # the loops compile even where the embedding's sparse update stays in TF
        assert all(clustered), compiled.analysis.excluded


def test_outer_tape_gradient_of_a_compiled_lstm():
    """An outer GradientTape through the compiled forward (the TfxlaLaunch gradient differentiates the
    cluster's graph, loop and TensorLists included) equals TF's, for the weights and the input."""
    model = build("lstm")
    x, _ = data("lstm")
    grads = []
    for fn in (tfxla_plugin.function(lambda t: model(t), jit_compile=True), tf.function(lambda t: model(t))):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x) ** 2)
        grads.append(tape.gradient(loss, model.trainable_variables + [x]))
    for k, (got, want) in enumerate(zip(*grads)):
        _close(got, want, f"gradient {k}")
