"""The docs/design.md §9 workloads through ``tfxla_plugin.function(jit_compile=True)``, at test sizes.

Each workload must compile whole (must-compile: zero unsupported nodes), give TensorFlow's results,
and come back as a rewritten graph (``experimental_get_compiler_ir(...)(stage="graph")``) that holds
``TfxlaLaunch`` nodes and none of the compiled nodes or op types. Sizes are cut down from the
benchmark's (``bench/function_bench.py`` runs the full ones): reduce_sum at 1e5 elements, MobileNetV2
at 96x96 and ResNet50 at 64x64 (``weights=None``, batch 1), the small CNN at batch 8.

Tolerances (float32): rtol 1e-4 and atol 1e-4 on element-wise and small dense workloads; the conv
nets and the MLPs accumulate in another order than TF's oneDNN kernels, so their atol is
1e-4 x max(1, max |TF result|) with rtol 1e-4. The 1e5-element reduction sums 1e5 terms of
magnitude ~1: rtol 1e-4, atol 1e-2.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import tfxla_plugin
from bench.models import keras_train_step, randomize_batch_norm

import keras  # noqa: E402  (installed with TensorFlow)

pytestmark = pytest.mark.slow

RTOL, ATOL = 1e-4, 1e-4


def _close(got, want, rtol=RTOL, atol=ATOL, scaled=False, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), \
        f"{what}: {got.dtype}{got.shape} vs TF {want.dtype}{want.shape}"
    if scaled:
        atol *= max(1.0, float(np.max(np.abs(want))) if want.size else 0.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def check_compiled(name: str, fn, args, *, scaled=False, rtol=RTOL, atol=ATOL, outputs_of=None):
    """Compile ``fn`` must-compile, compare with ``tf.function(fn)`` and check the rewritten graph.

    ``outputs_of(f, args)`` (default: one call) gives the results to compare, so a training step can
    compare the values it wrote too. Returns the ``CompiledFunction``.
    """
    args = [tf.constant(a) if isinstance(a, np.ndarray | np.generic) else a for a in args]
    f = tfxla_plugin.function(fn, jit_compile=True)
    start = time.perf_counter()
    compiled = f.compiled_graph(*args)  # raises UnsupportedGraphError listing any unsupported node
    compile_s = time.perf_counter() - start
    assert not compiled.analysis.unsupported(), compiled.analysis.unsupported()
    run = outputs_of or (lambda g, a: tf.nest.flatten(g(*a)))
    start = time.perf_counter()
    got = run(f, args)
    run_s = time.perf_counter() - start
    want = run(tf.function(fn), args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, rtol=rtol, atol=atol, scaled=scaled, what=f"{name} output {k}")
    check_rewritten_graph(f, args, compiled)
    print(f"\n[{name}] clusters {len(compiled.clusters)}, compile {compile_s:.2f}s "
          f"(kernel cache {'hit' if all(c.cache_hit for c in compiled.clusters) else 'miss'}), "
          f"first call {1e3 * run_s:.1f} ms, eager single launch: {compiled._fast is not None}")
    return f


def check_rewritten_graph(f, args, compiled) -> None:
    gd = text_format.Parse(f.experimental_get_compiler_ir(*args)(stage="graph"), tf.compat.v1.GraphDef())
    launches = [n for n in gd.node if n.op == "TfxlaLaunch"]
    assert len(launches) == len(compiled.clusters) >= 1
    original = compiled.analysis.graph_def.node
    clustered = {n.name for n in original if compiled.analysis.cluster_of(n.name)}
    assert clustered
    compiled_ops = ({n.op for n in original if n.name in clustered}
                    - {n.op for n in original if n.name not in clustered})
    # What the rewrite adds besides launches: each launch's kernel path Const, and an IdentityN (NoOp for
    # a target) keeping the name of every fetched clustered node.
    kept_names = {t.op.name for t in compiled.concrete_function.graph.outputs}
    kept_names |= {op.name for op in compiled.concrete_function.graph.control_outputs}
    for n in gd.node:
        if n.op == "TfxlaLaunch" or n.name.endswith("/kernel_path"):
            continue
        if n.name in kept_names and n.op in ("IdentityN", "NoOp"):
            continue
        assert n.name not in clustered, f"clustered node {n.name} ({n.op}) left in the rewritten graph"
        assert n.op not in compiled_ops, f"compiled op type {n.op} ({n.name}) left in the rewritten graph"


RNG = np.random.default_rng(0)


def _normal(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# --- the small functions ----------------------------------------------------------------------------

def test_call_overhead_x_plus_1() -> None:
    f = check_compiled("x+1", lambda x: x + 1.0, [np.float32(1.5)])
    assert f.compiled_graph(tf.constant(np.float32(1.5)))._fast is not None, "one launch should run eagerly"


def test_fused_reduction_1e5() -> None:
    n = 10**5
    mask = (RNG.random(n) > 0.5).astype(np.float32)
    check_compiled("reduce_sum((x*w+b)*mask)", lambda x, w, b, m: tf.reduce_sum((x * w + b) * m),
                   [_normal(n), _normal(n), _normal(n), mask], atol=1e-2)


def test_gelu_tanh_form() -> None:
    def gelu(x, s, b):
        y = x * s + b
        return 0.5 * y * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y * y * y)))

    check_compiled("gelu", gelu, [_normal(256, 128), np.float32(1.1), np.float32(0.1)])


def test_softmax() -> None:
    check_compiled("softmax", lambda x: tf.nn.softmax(x), [_normal(64, 256, scale=3.0)])


def test_layer_norm_moments() -> None:
    def layer_norm(x, g, b):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b

    check_compiled("layer norm", layer_norm, [_normal(32, 256), _normal(256), _normal(256)])


# --- Keras models (weights are live variables) --------------------------------------------------

def mlp():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])


@pytest.mark.parametrize("batch", [64, 1])
def test_mlp_784_512_512_10(batch: int) -> None:
    model = mlp()
    x = _normal(batch, 784)
    f = check_compiled(f"MLP batch {batch}", lambda x: model(x, training=False), [x], scaled=True)
    # one launch on the input and six variable reads: called eagerly, not through a graph
    assert f.compiled_graph(tf.constant(x))._fast is not None


def small_cnn():
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def test_small_cnn_batch_8() -> None:
    model = small_cnn()
    check_compiled("small CNN", lambda x: model(x, training=False), [_normal(8, 32, 32, 3)], scaled=True)


def application(name: str, size: int):
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    randomize_batch_norm(model, np.random.default_rng(0))
    return model


@pytest.mark.parametrize("name,size", [("MobileNetV2", 96), ("ResNet50", 64)])
def test_keras_application(name: str, size: int) -> None:
    model = application(name, size)

    def forward(x):
        logits = model(x, training=False)
        return logits, tf.nn.softmax(logits)

    x = np.random.default_rng(1).uniform(-1.0, 1.0, (1, size, size, 3)).astype(np.float32)
    f = check_compiled(name, forward, [x], scaled=True)
    # the weights stay live: scaling the last layer's kernel changes the next result as it does TF's
    dense = model.layers[-1]
    dense.kernel.assign(dense.kernel * 2.0)
    _close(f(tf.constant(x))[0], model(x, training=False), scaled=True, what=f"{name} after an assign")


# --- MLP train step: GradientTape + SGD inside the compiled function --------------------------------

def test_mlp_train_step_sgd() -> None:
    model = mlp()
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    train_step = keras_train_step(model, optimizer)

    initial = [v.numpy() for v in model.variables]

    def two_steps(step, args):
        """From the same initial weights: two steps; the losses, then every weight and the counter."""
        for v, value in zip(model.variables, initial):
            v.assign(value)
        optimizer.iterations.assign(0)
        losses = [step(*args), step(*args)]
        return losses + [v.numpy() for v in model.variables] + [optimizer.iterations.numpy()]

    x = _normal(64, 784)
    y = RNG.integers(0, 10, 64).astype(np.int32)
    check_compiled("MLP train step (SGD)", train_step, [x, y], scaled=True, outputs_of=two_steps)
    assert int(optimizer.iterations.numpy()) == 2
