"""Batch-tiled kernels through ``tfxla_plugin.function`` with a ``None`` batch input_signature.

One compilation serves every batch size: results equal TF's for batch sizes that are full tiles,
padded tiles and mixtures (default tiles 1 and 8), nothing recompiles, and functions that are not
row-independent are refused by the proof (and then compiled per shape, still correct).
"""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tfxla_plugin.batch_tiling import NotTileable, compile_tiled
from tfxla_plugin.flags import Flags

BATCHES = (0, 1, 3, 5, 8, 13, 17)  # empty, tile 1, 3x tile 1, padded 8, 8, 8 + padded 8, 8 + 8 + 1
RTOL, ATOL = 2e-5, 2e-5


def _rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _check_all_batches(f, reference, feature_shape, *, dtype=np.float32, make=None):
    for n in BATCHES:
        x = make(n) if make else _rand((n, *feature_shape), n, dtype)
        got = f(x)
        # TF's own kernels reject some empty batches (Conv2D's bias add): take row 0 of batch 1's shape.
        want = reference(x) if n else tf.nest.map_structure(lambda t: t[:0], reference(
            make(1) if make else _rand((1, *feature_shape), 1, dtype)))
        for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
            assert g.shape == w.shape, (n, g.shape, w.shape)
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=RTOL, atol=ATOL, err_msg=f"batch {n}")
    assert f._tiled not in (None, False), "the function was not compiled batch-polymorphic"
    assert not f._cache, "a batch size recompiled"


def test_mlp_serves_every_batch_size_from_one_compilation() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4, activation="softmax")])
    f = tfxla_plugin.function(lambda x: model(x), input_signature=[tf.TensorSpec([None, 20])])
    _check_all_batches(f, lambda x: model(x), (20,))
    launch = [n for n in f._tiled.rewritten.graph_def.node if n.op == "TfxlaLaunch"]
    assert len(launch) == 1 and list(launch[0].attr["batch_tiles"].list.i) == [1, 8]


def test_conv_pool_flatten_dense() -> None:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(5)])
    f = tfxla_plugin.function(lambda x: model(x), input_signature=[tf.TensorSpec([None, 8, 8, 3])])
    _check_all_batches(f, lambda x: model(x), (8, 8, 3))


def test_embedding_attention_layernorm_classifier() -> None:
    keras.utils.set_random_seed(2)
    ids = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(30, 8)(ids)
    a = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(h, h)
    h = keras.layers.LayerNormalization()(h + a)
    h = keras.layers.Dense(8, activation="gelu")(h)
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model(ids, out)
    f = tfxla_plugin.function(lambda x: model(x), input_signature=[tf.TensorSpec([None, 6], tf.int32)])
    make = lambda n: np.random.default_rng(n).integers(0, 30, (n, 6)).astype(np.int32)  # noqa: E731
    _check_all_batches(f, lambda x: model(x), (6,), make=make)


def test_unbatched_outputs_and_inputs_pass_through_tiles() -> None:
    w = tf.constant(_rand((3,), 9))

    def fn(x, scale):
        return tf.nn.relu(x * scale) + w, scale * 2.0 + tf.reduce_sum(w)

    f = tfxla_plugin.function(fn, input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([3])])
    scale = tf.constant([1.0, -2.0, 0.5])
    for n in BATCHES:
        x = _rand((n, 3), n)
        got, want = f(x, scale), fn(tf.constant(x), scale)
        for g, v in zip(got, want):
            np.testing.assert_allclose(g.numpy(), v.numpy(), rtol=RTOL, atol=ATOL, err_msg=f"batch {n}")
    assert f._tiled and not f._cache


def test_bad_batch_inputs_are_clear_errors() -> None:
    f = tfxla_plugin.function(lambda x, y: x * y, input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 3])])
    f(_rand((2, 3), 0), _rand((2, 3), 1))
    cg = f._tiled
    op = tfxla_plugin._op.load_op_library()
    launch = cg._fast.launch  # an EagerLaunch: attrs converted once, TFE_Py_Execute without a tape
    kwargs = dict(launch.kwargs, cluster="c", kernel_hash="")
    path = kwargs.pop("kernel_path")
    with pytest.raises(tf.errors.InvalidArgumentError, match="batched inputs disagree on the batch size"):
        op.tfxla_launch(kernel_path=path, args=[_rand((2, 3), 0), _rand((4, 3), 1)], **kwargs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="batched inputs disagree on the batch size"):
        launch([tf.constant(_rand((2, 3), 0)), tf.constant(_rand((4, 3), 1))])  # the same error through the quick eager path
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input 1 has shape float\[2,4\].*f32\[\?,3\]"):
        op.tfxla_launch(kernel_path=path, args=[_rand((2, 3), 0), _rand((2, 4), 1)], **kwargs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input 1 has shape float\[2,4\].*f32\[\?,3\]"):
        launch([tf.constant(_rand((2, 3), 0)), tf.constant(_rand((2, 4), 1))])
    with pytest.raises(tf.errors.InvalidArgumentError, match="a vector of 2 strings"):
        op.tfxla_launch(kernel_path=path[0], args=[_rand((2, 3), 0)] * 2, **kwargs)
    with pytest.raises(TypeError, match="not compatible with input_signature"):
        f(_rand((2, 4), 0), _rand((2, 4), 1))


# name -> (function, why it does not tile, whether symbolic dims compile it once instead of per shape)
NOT_ROW_INDEPENDENT = {
    "mean over the batch": (lambda x: x - tf.reduce_mean(x, axis=0), "reduces over the batch dimension", True),
    "divides by the batch size": (lambda x: x / tf.cast(tf.shape(x)[0], tf.float32),
                                  "a constant depends on the batch size", True),
    "reverses the rows": (lambda x: tf.reverse(x, [0]) * 2.0, "reverses the batch dimension", True),
    # its window spans the batch: the reduce-window, sized by the batch, is generated differently per size
    "cumulative sum down the rows": (lambda x: tf.cumsum(x, axis=0) + 1.0, "batch", False),
}


@pytest.mark.parametrize("name", sorted(NOT_ROW_INDEPENDENT))
def test_row_dependent_functions_are_refused_and_still_correct(name: str, caplog) -> None:
    fn, reason, symbolic = NOT_ROW_INDEPENDENT[name]
    spec = tf.TensorSpec([None, 4])
    cf = tf.function(fn).get_concrete_function(spec)
    with pytest.raises(NotTileable, match=reason):
        compile_tiled(cf, must_compile=True, flags=Flags())
    f = tfxla_plugin.function(fn, input_signature=[spec])
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for n in (1, 3, 8):
            x = _rand((n, 4), n)
            np.testing.assert_allclose(f(x).numpy(), fn(tf.constant(x)).numpy(), rtol=RTOL, atol=ATOL)
    if symbolic:  # compiled once with symbolic dims instead
        assert f._tiled.symbolic is not None and not f._cache
    else:
        assert f._tiled is False and len(f._cache) == 3  # compiled per shape instead
        assert "compiling per input shape instead" in caplog.text


def test_auto_leaves_a_row_dependent_cluster_in_tensorflow(caplog) -> None:
    spec = tf.TensorSpec([None, 4])

    def fn(x):
        y = tf.exp(x) * 2.0 + 1.0  # row-independent
        return tf.strings.as_string(y), tf.reduce_sum(tf.strings.to_number(tf.strings.as_string(y)), axis=0) * 3.0 - 1.0

    cf = tf.function(fn).get_concrete_function(spec)
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        result = compile_tiled(cf, must_compile=False, flags=Flags(min_cluster_size=1))
    assert result.tiled, "the row-independent cluster was not compiled"
    (dropped, why), = result.notes.items()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"{cf.name.decode()}: cluster {dropped} (") and \
        warnings[0].endswith(f"nodes) stays in TensorFlow: {why}"), warnings
    assert any("reduces over the batch dimension" in why for why in result.notes.values())
    excluded = result.analysis.excluded
    assert any("not batch-polymorphic" in why for why in excluded.values())
