"""Whole-graph lowering: real Keras models traced with ``tf.function`` lower with no unsupported node and
evaluate (``hlo.evaluate``) to TensorFlow's results.

(a) MobileNetV2 and (b) ResNet50 (``weights=None``, 64x64, batch 2, inference; batch-norm statistics
randomized so that batch norm does real work; logits and their softmax compared), (c) a Transformer
encoder block (Embedding with a padding mask, MultiHeadAttention, residual adds, LayerNormalization,
Dense with gelu, exact and tanh form), (d) one training step of an MLP (Dense only, or with training-mode
BatchNormalization) with Keras Adam (GradientTape inside the traced function): the HLO runs on the
variables' values before the step, then TF runs the same ConcreteFunction, and the loss, every weight
and statistic, Adam's slots and its iteration counter are compared with what TF wrote.

Variables are cut out of the graph by ``tests/graph_lowering_util.py``: their values are cluster
inputs, the values a step writes are cluster outputs.

Tolerances (float32): TF's oneDNN kernels accumulate convolutions and matmuls in another order than
the evaluator's NumPy, so results are compared with rtol=1e-4 and an atol of 1e-5 times the largest
magnitude of the result (a result near zero inherits the error of the large terms that cancelled).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf

import hlo
from tests.graph_lowering_util import cut_variables, format_unsupported, lower_function, unsupported_nodes
from bench.models import randomize_batch_norm

import keras  # noqa: E402  (installed with TensorFlow)

RTOL, ATOL_SCALE = 1e-4, 1e-5


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> float:
    """Compare with the file's tolerances; returns the max abs error."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), \
        f"{what}: {got.dtype}{got.shape} != TF {want.dtype}{want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL_SCALE * max(scale, 1e-30), err_msg=what)
    return float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0


def report(name: str, lowered, eval_seconds: float, errors: dict[str, float]) -> None:
    ops = ", ".join(f"{op}:{n}" for op, n in lowered.op_types.items())
    worst = ", ".join(f"{k}={v:.2g}" for k, v in errors.items())
    print(f"\n[{name}] {lowered.node_count} nodes; lower {lowered.lower_seconds:.2f}s, evaluate {eval_seconds:.2f}s; "
          f"max abs error {worst}\n  ops: {ops}")


def check_metadata(lowered) -> None:
    """Every instruction of the entry names its TF node; nodes created by user code point at it."""
    entry = lowered.module.entry
    insts = [i for i in entry.instructions if i.opcode is not hlo.Opcode.PARAMETER and i.name != entry.root_name]
    missing = [i.name for i in insts if i.metadata is None or not i.metadata.op_name]
    assert not missing, f"instructions without metadata: {missing[:10]}"
    assert any(i.metadata.source_file == __file__ for i in insts), "no instruction points at this file"


def check_inference(name: str, fn, *args) -> None:
    cf = tf.function(fn).get_concrete_function(*[tf.TensorSpec(a.shape, a.dtype) for a in args])
    lowered = lower_function(cf, name)
    check_metadata(lowered)
    start = time.perf_counter()
    got, written = lowered.run(*args)
    seconds = time.perf_counter() - start
    assert not written, "an inference graph writes no variable"
    want = [t.numpy() for t in tf.nest.flatten(cf(*args))]
    assert len(got) == len(want)
    errors = {f"out{i}": assert_close(g, w, f"{name} output {i}") for i, (g, w) in enumerate(zip(got, want))}
    report(name, lowered, seconds, errors)


def logits_and_probabilities(model):
    def forward(x):
        logits = model(x, training=False)
        return logits, tf.nn.softmax(logits)
    return forward


@pytest.mark.slow
@pytest.mark.parametrize("application", ["MobileNetV2", "ResNet50"])
def test_image_classifier_inference(application: str) -> None:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = getattr(keras.applications, application)(weights=None, input_shape=(64, 64, 3),
                                                      classifier_activation=None)
    randomize_batch_norm(model, rng)
    x = rng.uniform(-1.0, 1.0, (2, 64, 64, 3)).astype(np.float32)
    check_inference(application, logits_and_probabilities(model), x)


def encoder_block(approximate_gelu: bool, vocab: int = 100, seq: int = 16, d_model: int = 32, heads: int = 2):
    tokens = keras.Input((seq,), dtype="int32")
    h = keras.layers.Embedding(vocab, d_model, mask_zero=True)(tokens)  # token 0 pads; MHA masks it out
    h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(heads, d_model // heads)(h, h))
    gelu = lambda t: keras.activations.gelu(t, approximate=approximate_gelu)  # noqa: E731
    ff = keras.layers.Dense(d_model)(keras.layers.Dense(2 * d_model, activation=gelu)(h))
    h = keras.layers.LayerNormalization()(h + ff)
    return keras.Model(tokens, h)


@pytest.mark.slow
@pytest.mark.parametrize("approximate_gelu", [False, True], ids=["gelu_erf", "gelu_tanh"])
def test_encoder_block_inference(approximate_gelu: bool) -> None:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = encoder_block(approximate_gelu)
    tokens = rng.integers(1, 100, (2, 16)).astype(np.int32)
    tokens[0, 11:] = 0  # padding
    tokens[1, 5:] = 0
    check_inference(f"encoder(approximate_gelu={approximate_gelu})", lambda t: model(t, training=False), tokens)


MLPS = {
    "dense": lambda: [keras.layers.Dense(16, activation="relu"), keras.layers.Dense(16, activation="tanh"),
                      keras.layers.Dense(4)],
    # Training-mode batch norm: batch moments, and its moving statistics written with AssignVariableOp.
    # (No bias before it: that bias gets a gradient of rounding noise, which Adam blows up to +-lr.)
    "batchnorm": lambda: [keras.layers.Dense(16, use_bias=False), keras.layers.BatchNormalization(),
                          keras.layers.Activation("relu"), keras.layers.Dense(4)],
}


@pytest.mark.slow
@pytest.mark.parametrize("layers", sorted(MLPS))
def test_mlp_adam_train_step(layers: str) -> None:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((8,)), *MLPS[layers]()])
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = rng.integers(0, 4, 32).astype(np.int32)
    cf = tf.function(train_step).get_concrete_function(tf.TensorSpec(x.shape), tf.TensorSpec(y.shape, tf.int32))
    cf(x, y)  # one step in TF first, so that Adam's slots and counter are not at their initial values

    lowered = lower_function(cf, "train_step")
    check_metadata(lowered)
    paths = {id(v.handle): v.path for v in model.variables + optimizer.variables}
    written = [paths.get(id(handle), "?") for handle, _ in lowered.cut.written]
    expected = [v.path for v in model.variables + optimizer.variables if "learning_rate" not in v.path]
    assert sorted(written) == sorted(expected), "the step writes every weight and statistic, Adam's slots and counter"

    start = time.perf_counter()
    (loss,), new_values = lowered.run(x, y)  # the HLO sees the variables as they are before TF's step
    seconds = time.perf_counter() - start
    want_loss = cf(x, y).numpy()
    errors = {"loss": assert_close(loss, want_loss, "loss")}
    for path, got, want in zip(written, new_values, lowered.written_values()):
        errors[path] = assert_close(got, want, f"new value of {path}")
    assert int(dict(zip(written, new_values))[optimizer.iterations.path]) == 2
    report(f"mlp_adam({layers})", lowered, seconds, {"loss": errors["loss"], "variables": max(errors.values())})


# --- the helper itself, on small functions ---------------------------------------------------------------

def test_variables_are_cut_in_control_order() -> None:
    """A read after a write sees the written value; an AssignAdd with no earlier read reads an input."""
    a = tf.Variable(np.arange(4, dtype=np.float32))
    b = tf.Variable(np.float32(10.0))
    c = tf.Variable(np.int64(3))

    def step(x):
        first = a.read_value() * x
        a.assign_sub(x)
        again = a.read_value() + 1.0
        b.assign(tf.reduce_sum(again))
        c.assign_add(2)
        a.assign_add(b.read_value() * x)
        return first, again, b.read_value() * 2.0

    x = np.array([0.5, -1.0, 2.0, 4.0], np.float32)
    cf = tf.function(step).get_concrete_function(tf.TensorSpec([4]))
    lowered = lower_function(cf)
    assert len(lowered.cut.variable_inputs) == 2, "a is read, c is incremented; b is written before it is read"
    got, new_values = lowered.run(x)
    want = [t.numpy() for t in cf(x)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for g, w in zip(new_values, lowered.written_values()):
        np.testing.assert_array_equal(g, w)
    assert int(c.numpy()) == 5 and len(new_values) == 3


def test_unsupported_nodes_are_all_listed() -> None:
    def fn(x):
        return tf.raw_ops.Dawsn(x=x) + tf.raw_ops.Expint(x=x) * tf.exp(x)

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([3]))
    bad = unsupported_nodes(cut_variables(cf))
    assert [op for op, _, _ in bad] == ["Dawsn", "Expint"]
    message = format_unsupported(bad)
    assert "2 node(s) cannot be lowered" in message and "no lowering registered for op type Dawsn" in message
    with pytest.raises(AssertionError, match="Dawsn"):
        lower_function(cf)


def test_other_variable_ops_are_refused() -> None:
    """A write the helper does not model (here ResourceApplyGradientDescent) must not vanish silently."""
    v = tf.Variable(np.ones(3, np.float32))

    def fn(g):
        tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=np.float32(0.1), delta=g)
        return g * 2.0

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([3]))
    with pytest.raises(ValueError, match="ResourceApplyGradientDescent .* uses a variable directly"):
        cut_variables(cf)
