"""Symbolic dims end to end (``tfxla_plugin/symbolic_dims.py``): functions whose input_signature has
``None`` dims compile once (one C compiler run per cluster) and match TF eager at every shape."""

import glob
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

SHAPES = [(2, 5), (3, 9), (1, 1), (7, 33), (4, 128)]
V, E, U = 50, 16, 3


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh kernel cache: the number of shared objects in it is the number of C compiler runs."""
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path}")
    return lambda: len(glob.glob(str(tmp_path / "**" / "*.so"), recursive=True))


def _tokens(rng, shape):
    return tf.constant(rng.integers(0, V, size=shape).astype(np.int32))


def test_text_model_with_none_none_tokens_compiles_once_and_matches_tf(cache):
    tf.random.set_seed(1)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(V, E), tf.keras.layers.GlobalAveragePooling1D(),
                                 tf.keras.layers.Dense(U)])
    model(tf.zeros([1, 2], tf.int32))
    f = tfxla_plugin.function(lambda tokens: model(tokens), jit_compile=True,
                              input_signature=[tf.TensorSpec([None, None], tf.int32)])
    rng = np.random.default_rng(0)
    graphs = set()
    for shape in SHAPES:
        tokens = _tokens(rng, shape)
        np.testing.assert_allclose(f(tokens).numpy(), model(tokens).numpy(), rtol=1e-5, atol=1e-6)
        graphs.add(id(f.compiled_graph(tokens)))
    assert len(graphs) == 1 and cache() == 1  # one compilation, one C compiler run
    compiled = f.compiled_graph(tokens)
    assert compiled.symbolic.symbols == ["s0 = dim 0", "s1 = dim 1"]
    sig = compiled.clusters[0].signature
    assert sig["abi_version"] == 3 and sig["outputs"][0]["dims"] == [-1, U]


def _masked_model():
    tf.random.set_seed(2)
    emb, dense = tf.keras.layers.Embedding(V, E), tf.keras.layers.Dense(U)
    emb(tf.zeros([1, 2], tf.int32))
    dense(tf.zeros([1, E]))

    def fn(tokens, labels):  # a masked mean over the length, and a loss: a mean over the batch
        m = tf.cast(tokens != 0, tf.float32)[..., None]
        x = tf.reduce_sum(emb(tokens) * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
        logits = dense(x)
        return logits, tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return fn


def test_masked_mean_and_a_loss_over_the_batch_compile_once(cache):
    fn = _masked_model()
    f = tfxla_plugin.function(fn, jit_compile=True, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                                                     tf.TensorSpec([None], tf.int32)])
    rng = np.random.default_rng(1)
    for shape in SHAPES:
        tokens, labels = _tokens(rng, shape), tf.constant(rng.integers(0, U, size=shape[:1]).astype(np.int32))
        for got, want in zip(f(tokens, labels), fn(tokens, labels)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert cache() == 1
    # labels share s0 with the tokens' batch. Called eagerly with another size, the call is traced for its
    # shapes and TF refuses it as it does without us; inside a graph, where shapes are known only when it
    # runs, the symbolic kernel refuses it, naming the input
    bad = tf.zeros([2, 5], tf.int32), tf.zeros([3], tf.int32)
    with pytest.raises(ValueError, match=r"labels.shape. must equal .logits.shape"):
        fn(*bad)
    with pytest.raises(ValueError, match=r"labels.shape. must equal .logits.shape"):
        f(*bad)
    outer = tf.function(lambda t, l: f(t, l)[1], input_signature=[tf.TensorSpec([None, None], tf.int32),
                                                                   tf.TensorSpec([None], tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input \d+ \(%labels\): dimension 0 is 3, but it "
                                                             r"must be s0 = 2"):
        outer(*bad)


def test_independent_lengths_at_one_dim_position_compile_per_shape_and_match_tf(cache, caplog):
    # an encoder's and a decoder's tokens: both [None, None], their lengths independent. The symbolic
    # kernels take one size per dim position; a call whose lengths differ is compiled for its shapes
    tf.random.set_seed(3)
    emb = tf.keras.layers.Embedding(V, E)
    emb(tf.zeros([1, 2], tf.int32))

    def fn(source, target):
        return tf.reduce_sum(emb(source), axis=1) * tf.reduce_mean(emb(target), axis=1)

    spec = tf.TensorSpec([None, None], tf.int32)
    f = tfxla_plugin.function(fn, jit_compile=True, input_signature=[spec, spec])
    rng = np.random.default_rng(4)
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for (b, ls, lt) in [(2, 5, 5), (2, 5, 7), (3, 9, 4), (1, 6, 6)]:
            source, target = _tokens(rng, (b, ls)), _tokens(rng, (b, lt))
            np.testing.assert_allclose(f(source, target).numpy(), fn(source, target).numpy(), rtol=1e-5, atol=1e-6)
    symbolic = f.compiled_graph(_tokens(rng, (2, 3)), _tokens(rng, (2, 3)))
    assert symbolic.symbolic is not None
    assert f.compiled_graph(_tokens(rng, (2, 3)), _tokens(rng, (2, 4))) is not symbolic
    assert sum("inputs with unknown dim 1 of different sizes in one call" in r.getMessage()
               for r in caplog.records) == 1


def test_a_batch_reducing_function_under_a_none_batch_compiles_once(cache):
    w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[1, 2]))

    def loss(x):  # a mean over the batch: no batch tiles, symbolic dims instead
        return tf.reduce_mean(tf.square(tf.matmul(x, w)))

    f = tfxla_plugin.function(loss, jit_compile=True, input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    for b in (1, 3, 17):
        x = tf.random.stateless_normal([b, 8], seed=[b, 0])
        np.testing.assert_allclose(f(x).numpy(), loss(x).numpy(), rtol=1e-5)
    assert cache() == 1 and f.compiled_graph(x).symbolic is not None


def test_a_size_that_does_not_generalize_compiles_per_shape_and_says_why(cache, caplog):
    def fn(x):  # a cumulative sum along the length: a window as long as it, generated differently per length
        return tf.cumsum(x, axis=1) * 2.0

    f = tfxla_plugin.function(fn, jit_compile=True, input_signature=[tf.TensorSpec([None, None], tf.float32)])
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for shape in [(2, 5), (3, 7)]:
            x = tf.random.stateless_normal(shape, seed=[1, 1])
            np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5)
    assert "compiling per input shape instead of once for every shape" in caplog.text
    assert "symbolic dims: cluster" in caplog.text and "sources differ in structure" in caplog.text
    assert cache() == 2  # per shape


def test_attention_pooling_with_a_length_by_length_matrix_compiles_once(cache):
    # softmax over the length (no row program: its row lives on the stack), layer norm, batched dots, and
    # a [B, T, T] matrix: sizes in T*T, fitted on the grid of three values per symbol
    tf.random.set_seed(3)
    emb, q = tf.Variable(tf.random.normal([V, E])), tf.Variable(tf.random.normal([E, 1]))
    norm = tf.keras.layers.LayerNormalization()
    norm(tf.zeros([1, 1, E]))

    def attend(tokens):
        x = norm(tf.gather(emb, tokens))
        weights = tf.nn.softmax(tf.squeeze(tf.matmul(x, q), -1), axis=-1)
        return tf.einsum("bt,bte->be", weights, x), tf.reduce_max(tf.matmul(x, x, transpose_b=True), axis=-1)

    f = tfxla_plugin.function(attend, jit_compile=True, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    rng = np.random.default_rng(2)
    for shape in SHAPES:
        tokens = _tokens(rng, shape)
        for got, want in zip(f(tokens), attend(tokens)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-5)
    assert cache() == 1


def test_auto_leaves_a_cluster_that_does_not_generalize_in_tensorflow_with_one_warning(cache, caplog):
    from tfxla_plugin import symbolic_dims
    from tfxla_plugin.flags import Flags

    def fn(x):
        return tf.cumsum(x, axis=1) * 2.0

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec([None, None], tf.float32))
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        result = symbolic_dims.compile_symbolic(cf, must_compile=False, flags=Flags(min_cluster_size=1),
                                                all_or_nothing=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cluster cluster_0 stays in TensorFlow: not symbolic: " in warnings[0]
    assert "sources differ in structure" in warnings[0] and not result.compiled and list(result.notes) == ["cluster_0"]


def test_gradients_flow_through_a_symbolic_launch(cache):
    w = tf.Variable(tf.random.stateless_normal([6], seed=[4, 4]))

    def fn(x):
        return tf.reduce_mean(tf.reduce_sum(tf.tanh(x) * w, axis=-1))

    f = tfxla_plugin.function(fn, jit_compile=True, input_signature=[tf.TensorSpec([None, None, 6])])
    for shape in [(2, 3, 6), (5, 1, 6)]:
        x = tf.random.stateless_normal(shape, seed=[shape[0], 1])
        with tf.GradientTape() as tape:
            y = f(x)
        with tf.GradientTape() as tape_tf:
            y_tf = fn(x)
        np.testing.assert_allclose(y.numpy(), y_tf.numpy(), rtol=1e-5)
        np.testing.assert_allclose(tape.gradient(y, w).numpy(), tape_tf.gradient(y_tf, w).numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert cache() == 1 and f.compiled_graph(x).symbolic is not None


def test_the_python_runtime_runs_a_symbolic_kernel_and_checks_its_dims(cache):
    from backends.cpu import KernelInvalidArgument
    from tfxla_plugin import symbolic_dims
    from tfxla_plugin.flags import Flags

    spec = tf.TensorSpec([None, None], tf.float32)
    cf = tf.function(lambda x, y: tf.reduce_sum(x * y, axis=1)).get_concrete_function(spec, spec)
    (cluster,) = symbolic_dims.compile_symbolic(cf, must_compile=True, flags=Flags()).compiled
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (4, 9), (30, 2)]:
        x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        (got,) = cluster.executable(x, y)
        np.testing.assert_allclose(got, (x * y).sum(axis=1), rtol=1e-5, atol=1e-6)
    with pytest.raises(KernelInvalidArgument, match=r"input 1 \(%y\): dimension 1 is 3, but it must be s1 = 2 "
                                                    r"\(s1 is input 0 \(%x\) dim 1\)"):
        cluster.executable(np.zeros((4, 2), np.float32), np.zeros((4, 3), np.float32))


def test_a_recurring_shape_gets_static_kernels_where_specializing_pays(cache, monkeypatch, caplog):
    monkeypatch.setenv("TFXLA_FLAGS", os.environ["TFXLA_FLAGS"] + " --specialize_after=2")
    w = tf.Variable(tf.random.stateless_normal([E, U], seed=[6, 6]))

    def fn(x):
        return tf.nn.softmax(tf.matmul(tf.reduce_mean(x, axis=1), w))

    f = tfxla_plugin.function(fn, jit_compile=True, input_signature=[tf.TensorSpec([None, None, E])])
    x = tf.random.stateless_normal([3, 5, E], seed=[7, 7])
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for calls in (1, 2, 3):
            np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
            assert cache() == (1 if calls == 1 else 2)  # the second call compiles static kernels, once
    assert "float32[3, 5, 16] called 2 times: compiled static kernels for it" in caplog.text
    assert f.compiled_graph(x).symbolic is not None and len(f._cache) == 1
    y = tf.random.stateless_normal([2, 9, E], seed=[8, 8])  # another shape: the symbolic kernels
    np.testing.assert_allclose(f(y).numpy(), fn(y).numpy(), rtol=1e-5, atol=1e-6)
    assert cache() == 2


def _keras_text(kind: str):
    import keras

    keras.utils.set_random_seed(4)
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(V, 8)(tokens)
    if kind == "lstm":  # a While over the length: TF infers its shapes only at concrete lengths
        x = keras.layers.LSTM(6)(x)
    elif kind == "causal_attention":  # a [T, T] mask from iotas, softmax rows, [B, heads, T, T] scores
        x = keras.layers.GlobalAveragePooling1D()(keras.layers.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True))
    else:  # a convolution over the length
        x = keras.layers.GlobalMaxPooling1D()(keras.layers.Conv1D(4, 3, padding="same")(x))
    return keras.Model(tokens, x)


@pytest.mark.parametrize("kind", ["causal_attention", "conv1d"])
def test_keras_text_layers_compile_once_for_every_length(kind, cache):
    model = _keras_text(kind)
    f = tfxla_plugin.function(lambda t: model(t), jit_compile=True,
                              input_signature=[tf.TensorSpec([None, None], tf.int32)])
    rng = np.random.default_rng(3)
    for shape in [(2, 5), (1, 1), (4, 17)]:
        tokens = _tokens(rng, shape)
        np.testing.assert_allclose(f(tokens).numpy(), model(tokens).numpy(), rtol=1e-5, atol=1e-6)
    assert cache() == 1


def test_a_must_compile_lstm_falls_back_to_per_shape_kernels(cache, caplog):
    model = _keras_text("lstm")
    f = tfxla_plugin.function(lambda t: model(t), jit_compile=True,
                              input_signature=[tf.TensorSpec([None, None], tf.int32)])
    rng = np.random.default_rng(4)
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        for shape in [(2, 5), (3, 4)]:
            tokens = _tokens(rng, shape)
            np.testing.assert_allclose(f(tokens).numpy(), model(tokens).numpy(), rtol=1e-5, atol=1e-6)
    assert "symbolic dims: jit_compile=True:" in caplog.text and "at the probe sizes" in caplog.text
    assert cache() == 2  # per shape


def test_symbolic_dims_false_compiles_per_shape(cache, monkeypatch):
    monkeypatch.setenv("TFXLA_FLAGS", os.environ["TFXLA_FLAGS"] + " --symbolic_dims=false")
    f = tfxla_plugin.function(lambda x: tf.reduce_sum(x * x, axis=1), jit_compile=True,
                              input_signature=[tf.TensorSpec([None, None], tf.float32)])
    for shape in [(2, 3), (2, 5)]:
        x = tf.random.stateless_normal(shape, seed=[1, 0])
        np.testing.assert_allclose(f(x).numpy(), tf.reduce_sum(x * x, axis=1).numpy(), rtol=1e-5)
        assert f.compiled_graph(x).symbolic is None
    assert cache() == 2
