"""The sample models: one recipe per model, each a seeded Keras builder plus its options.

A recipe's ``make(**options)`` returns a fresh Keras model whose weights depend only on the
options (``seed`` included): ``keras.utils.set_random_seed(seed)`` first, and every layer we
create gets an initializer with its own explicit seed, so two builds give identical variables.
Batch-norm statistics of MobileNetV2 are drawn from a seeded NumPy generator so that batch norm
does real work at inference time. Inputs have a ``None`` batch dimension.

This module's source text is part of each cached model's stamp (``saved_models.build``): editing
a recipe here rebuilds the cached SavedModels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


def _shape(value) -> tuple[int, ...]:
    """``(96, 96, 3)``, ``[96, 96, 3]`` or ``"96x96x3"`` -> ``(96, 96, 3)``."""
    parts = value.lower().split("x") if isinstance(value, str) else list(value)
    try:
        dims = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(f"expected a shape like 96x96x3, got {value!r}") from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError(f"expected a shape of positive dimensions like 96x96x3, got {value!r}")
    return dims


def _positive_int(value) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a positive integer, got {value!r}") from None
    if n <= 0 or (isinstance(value, float) and value != n):
        raise ValueError(f"expected a positive integer, got {value!r}")
    return n


def _seed(value) -> int:
    n = int(value)
    if n < 0:
        raise ValueError(f"expected a seed >= 0, got {value!r}")
    return n


@dataclass(frozen=True)
class Option:
    default: object
    parse: Callable[[object], object]
    help: str


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    make: Callable[..., object]  # make(**options) -> keras.Model
    options: dict[str, Option] = field(default_factory=dict)
    int_high: Callable[[dict], int] | None = None  # exclusive upper bound for integer inputs (token ids)

    def resolve(self, options: dict) -> dict:
        """All options of this recipe with defaults filled in, parsed and checked."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(unknown)}; options: "
                             + ", ".join(f"{k} (default {_text(o.default)})" for k, o in self.options.items()))
        resolved = {}
        for key, option in self.options.items():
            raw = options.get(key, option.default)
            try:
                resolved[key] = option.parse(raw)
            except ValueError as e:
                raise ValueError(f"{self.name}: option {key}: {e}") from None
        return resolved


def _text(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _init(kind: str, seed: int):
    import keras

    return getattr(keras.initializers, kind)(seed=seed)


SEED = Option(0, _seed, "random seed of the weights")


# --- the models -------------------------------------------------------------------------------

def make_mlp(seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    x = keras.Input((784,), name="x")
    h = keras.layers.Dense(512, activation="relu", kernel_initializer=_init("GlorotUniform", seed + 1),
                           bias_initializer=_init("RandomNormal", seed + 2), name="dense_1")(x)
    h = keras.layers.Dense(512, activation="relu", kernel_initializer=_init("GlorotUniform", seed + 3),
                           bias_initializer=_init("RandomNormal", seed + 4), name="dense_2")(h)
    y = keras.layers.Dense(10, activation="softmax", kernel_initializer=_init("GlorotUniform", seed + 5),
                           name="probs")(h)
    return keras.Model(x, y, name="mlp")


def make_small_cnn(seed: int, input_shape: tuple[int, ...]):
    import keras

    keras.utils.set_random_seed(seed)
    x = keras.Input(input_shape, name="image")
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu", kernel_initializer=_init("HeNormal", seed + 1),
                            bias_initializer=_init("RandomNormal", seed + 2), name="conv_1")(x)
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu", kernel_initializer=_init("HeNormal", seed + 3),
                            bias_initializer=_init("RandomNormal", seed + 4), name="conv_2")(h)
    h = keras.layers.MaxPooling2D(name="pool")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    y = keras.layers.Dense(10, activation="softmax", kernel_initializer=_init("GlorotUniform", seed + 5),
                           name="probs")(h)
    return keras.Model(x, y, name="small_cnn")


def make_mobilenet_v2(seed: int, input_shape: tuple[int, ...]):
    import keras

    keras.utils.set_random_seed(seed)
    # a named input (the default name counts the Keras tensors made so far in this process), taken as a
    # single tensor rather than the application's one-element list
    image = keras.Input(input_shape, name="image")
    application = keras.applications.MobileNetV2(weights=None, input_tensor=image)
    model = keras.Model(image, application.output, name="mobilenet_v2")
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            dims = layer.gamma.shape
            layer.gamma.assign(rng.uniform(0.5, 1.5, dims).astype(np.float32))
            layer.beta.assign(rng.normal(0.0, 0.1, dims).astype(np.float32))
            layer.moving_mean.assign(rng.normal(0.0, 0.1, dims).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, dims).astype(np.float32))
    return model


def make_text_classifier(seed: int, vocab_size: int, seq_len: int, embed_dim: int, num_heads: int, ff_dim: int,
                         num_classes: int):
    import keras

    if embed_dim % num_heads:
        raise ValueError(f"text_classifier: embed_dim {embed_dim} is not a multiple of num_heads {num_heads}")
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab_size, embed_dim, embeddings_initializer=_init("RandomUniform", seed + 1),
                               name="embedding")(tokens)
    attention = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim // num_heads,
                                                kernel_initializer=_init("GlorotUniform", seed + 2),
                                                bias_initializer=_init("RandomNormal", seed + 3),
                                                name="attention")(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="norm_1")(keras.layers.Add(name="residual_1")([x, attention]))
    h = keras.layers.Dense(ff_dim, activation="gelu", kernel_initializer=_init("GlorotUniform", seed + 4),
                           bias_initializer=_init("RandomNormal", seed + 5), name="ff_1")(x)
    h = keras.layers.Dense(embed_dim, kernel_initializer=_init("GlorotUniform", seed + 6),
                           bias_initializer=_init("RandomNormal", seed + 7), name="ff_2")(h)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="norm_2")(keras.layers.Add(name="residual_2")([x, h]))
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    y = keras.layers.Dense(num_classes, activation="softmax", kernel_initializer=_init("GlorotUniform", seed + 8),
                           name="probs")(x)
    return keras.Model(tokens, y, name="text_classifier")


RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("mlp", "MLP 784-512-512-10, relu, softmax head; input x: float32 [None, 784]", make_mlp,
           {"seed": SEED}),
    Recipe("small_cnn", "2 conv (16, 32; 3x3 relu), 2x2 max pool, dense softmax head; input image: float32 "
           "[None, H, W, C]", make_small_cnn,
           {"seed": SEED, "input_shape": Option((32, 32, 3), _shape, "H x W x C, e.g. 28x28x1 or 32x32x3")}),
    Recipe("mobilenet_v2", "keras.applications.MobileNetV2(weights=None), seeded weights and batch-norm statistics; "
           "input image: float32 [None, H, W, 3]", make_mobilenet_v2,
           {"seed": SEED, "input_shape": Option((224, 224, 3), _shape, "H x W x 3 (96x96x3 builds a small one)")}),
    Recipe("text_classifier", "Embedding + one Transformer encoder block (MultiHeadAttention, LayerNormalization, "
           "gelu Dense, residuals), average pooling, softmax head; input tokens: int32 [None, seq_len]",
           make_text_classifier,
           {"seed": SEED, "vocab_size": Option(1000, _positive_int, "token ids are in [0, vocab_size)"),
            "seq_len": Option(32, _positive_int, "tokens per example"),
            "embed_dim": Option(64, _positive_int, "embedding width"),
            "num_heads": Option(4, _positive_int, "attention heads (must divide embed_dim)"),
            "ff_dim": Option(128, _positive_int, "width of the gelu feed-forward layer"),
            "num_classes": Option(2, _positive_int, "classes of the softmax head")},
           int_high=lambda options: options["vocab_size"]),
]}
