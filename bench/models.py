"""The whole-function workloads of docs/design.md §9, as Python functions with seeded inputs and live weights.

Each ``Row`` builds, on demand, a fresh ``Case``: the function to compile (``fn``), its arguments, and
for a training step a ``reset`` that puts the variables back to their initial values (so that every
engine can be checked from the same state) plus ``state`` (the variables a step writes, compared
after one step). Keras models keep their weights as variables (``weights=None`` for the
applications; batch-norm statistics randomized so that batch norm does real work).

Used by ``bench/function_bench.py``; ``tests/test_function_models.py`` checks the same workloads at
smaller sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import tensorflow as tf


@dataclass
class Case:
    fn: Callable
    args: list
    reset: Callable[[], None] | None = None  # training: restore the initial variable values
    state: list = field(default_factory=list)  # training: variables a step writes (compared after one step)
    rtol: float = 1e-4
    atol: float = 1e-4  # scaled by max(1, max |TF result|) for the models (see ``scaled``)
    scaled: bool = False


@dataclass(frozen=True)
class Row:
    name: str
    build: Callable[[], Case]
    heavy: bool = False  # slow in TF XLA or large: fewer repeats


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _t(a) -> tf.Tensor:
    return tf.constant(a)



def build_case(row: Row) -> Case:
    """``row``'s case, built after ``keras.backend.clear_session()``. Keras names layers and variables
    from per-process counters, so without this a row built after another Keras row gets other names
    than in a new process (the benchmark's engine and new-process children build the row again)."""
    import keras

    keras.backend.clear_session()
    return row.build()

# --- small functions ----------------------------------------------------------------------------

def call_overhead() -> Case:
    return Case(lambda x: x + 1.0, [_t(np.float32(1.5))])


def fused_reduction(n: int) -> Callable[[], Case]:
    def build() -> Case:
        r = _rng()
        x, w, b = (_t(r.standard_normal(n).astype(np.float32)) for _ in range(3))
        mask = _t((r.random(n) > 0.5).astype(np.float32))
        # n terms of magnitude ~1 summed in another order: absolute error grows like sqrt(n) * eps * n
        return Case(lambda x, w, b, m: tf.reduce_sum((x * w + b) * m), [x, w, b, mask], rtol=1e-3,
                    atol=1e-2 if n <= 10**6 else 1e-1)
    return build


def gelu_tanh(x, s, b):
    y = x * s + b
    return 0.5 * y * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y * y * y)))


def gelu() -> Case:
    return Case(gelu_tanh, [_t(_rng().standard_normal((4096, 1024)).astype(np.float32)), _t(np.float32(1.1)),
                            _t(np.float32(0.1))])


def softmax() -> Case:
    return Case(lambda x: tf.nn.softmax(x), [_t(_rng().standard_normal((1024, 1024)).astype(np.float32))])


def layer_norm_fn(x, g, b):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b


def layer_norm() -> Case:
    r = _rng()
    return Case(layer_norm_fn, [_t(r.standard_normal((512, 1024)).astype(np.float32)),
                                _t(r.standard_normal(1024).astype(np.float32)),
                                _t(r.standard_normal(1024).astype(np.float32))])


# --- Keras models -------------------------------------------------------------------------------

def mlp_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])


def mlp(batch: int) -> Callable[[], Case]:
    def build() -> Case:
        model = mlp_model()
        return Case(lambda x: model(x, training=False),
                    [_t(_rng().standard_normal((batch, 784)).astype(np.float32))], scaled=True)
    return build


def small_cnn_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def small_cnn(batch: int) -> Callable[[], Case]:
    def build() -> Case:
        model = small_cnn_model()
        return Case(lambda x: model(x, training=False),
                    [_t(_rng().standard_normal((batch, 32, 32, 3)).astype(np.float32))], scaled=True)
    return build


def randomize_batch_norm(model, rng: np.random.Generator) -> None:
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            dims = layer.gamma.shape
            layer.gamma.assign(rng.uniform(0.5, 1.5, dims))
            layer.beta.assign(rng.normal(0.0, 0.1, dims))
            layer.moving_mean.assign(rng.normal(0.0, 0.1, dims))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, dims))


def application(name: str, size: int, batch: int) -> Callable[[], Case]:
    def build() -> Case:
        import keras

        keras.utils.set_random_seed(0)
        model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                                  classifier_activation=None)
        randomize_batch_norm(model, _rng())
        x = _rng().uniform(-1.0, 1.0, (batch, size, size, 3)).astype(np.float32)
        return Case(lambda x: model(x, training=False), [_t(x)], scaled=True)
    return build


def keras_train_step(model, optimizer):
    """A GradientTape train step of ``model`` with ``optimizer`` (built here) and sparse categorical
    cross-entropy on logits; returns ``train_step(x, y) -> loss``."""
    import keras

    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def _train_case(model, optimizer, x, y) -> Case:
    """A training-step ``Case`` of ``model``: one Keras train step, resettable to the initial weights."""
    train_step = keras_train_step(model, optimizer)
    initial = [v.numpy() for v in model.variables]
    variables = list(model.variables) + list(optimizer.variables)
    optimizer_initial = [v.numpy() for v in optimizer.variables]

    def reset() -> None:
        for v, value in zip(model.variables, initial):
            v.assign(value)
        for v, value in zip(optimizer.variables, optimizer_initial):
            v.assign(value)

    return Case(train_step, [_t(x), _t(y)], reset=reset, state=variables, scaled=True)


def mlp_train_step(batch: int) -> Callable[[], Case]:
    def build() -> Case:
        import keras

        r = _rng()
        x = r.standard_normal((batch, 784)).astype(np.float32)
        y = r.integers(0, 10, batch).astype(np.int32)
        return _train_case(mlp_model(), keras.optimizers.SGD(learning_rate=0.01), x, y)
    return build


LSTM_FEATURES = 32


def lstm_model(steps: int, units: int):
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((steps, LSTM_FEATURES)), keras.layers.LSTM(units), keras.layers.Dense(10)])


def lstm(batch: int, steps: int, units: int) -> Callable[[], Case]:
    def build() -> Case:
        model = lstm_model(steps, units)
        x = _rng().standard_normal((batch, steps, LSTM_FEATURES)).astype(np.float32)
        return Case(lambda x: model(x, training=False), [_t(x)], scaled=True)
    return build


def lstm_train_step(batch: int, steps: int, units: int) -> Callable[[], Case]:
    def build() -> Case:
        import keras

        r = _rng()
        x = r.standard_normal((batch, steps, LSTM_FEATURES)).astype(np.float32)
        y = r.integers(0, 10, batch).astype(np.int32)
        return _train_case(lstm_model(steps, units), keras.optimizers.Adam(learning_rate=1e-3), x, y)
    return build


ROWS = [
    Row("call overhead (x+1, scalar)", call_overhead),
    Row("reduce_sum((x*w+b)*mask) 1e6", fused_reduction(10**6)),
    Row("reduce_sum((x*w+b)*mask) 1e7", fused_reduction(10**7)),
    Row("gelu(x*s+b) tanh [4096,1024]", gelu),
    Row("softmax [1024,1024]", softmax),
    Row("layer norm [512,1024]", layer_norm),
    Row("MLP 784-512-512-10 batch 64", mlp(64)),
    Row("MLP 784-512-512-10 batch 1", mlp(1)),
    Row("small CNN batch 32", small_cnn(32)),
    Row("MobileNetV2 224 batch 1", application("MobileNetV2", 224, 1), heavy=True),
    Row("MobileNetV2 224 batch 8", application("MobileNetV2", 224, 8), heavy=True),
    Row("ResNet50 224 batch 1", application("ResNet50", 224, 1), heavy=True),
    Row("MLP train step SGD batch 64", mlp_train_step(64)),
    Row("LSTM 256 units 64 steps batch 32", lstm(32, 64, 256)),
    Row("LSTM train step Adam 256 units 64 steps batch 32", lstm_train_step(32, 64, 256), heavy=True),
]
