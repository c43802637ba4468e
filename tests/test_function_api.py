"""tfxla_plugin.function end to end: results equal TF's, variables stay live, gradients, errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tfxla_plugin import UnsupportedGraphError

RNG = np.random.default_rng(0)


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def test_decorator_forms_and_results_match_tf() -> None:
    def fn(x, w):
        return tf.nn.softmax(tf.matmul(x, w) + 1.0), tf.reduce_max(x, axis=1)

    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    w = tf.constant(RNG.standard_normal((3, 5)).astype(np.float32))
    want = fn(x, w)
    for f in (tfxla_plugin.function(fn), tfxla_plugin.function(jit_compile=True)(fn)):
        got = f(x, w)
        assert isinstance(got, tuple) and len(got) == 2
        for g, e in zip(got, want):
            _close(g, e)


def test_rewritten_graph_has_one_launch_and_no_compiled_ops() -> None:
    f = tfxla_plugin.function(lambda x: tf.tanh(x * 2.0 + 1.0) - x)
    x = tf.constant(RNG.standard_normal((8, 8)).astype(np.float32))
    _close(f(x), tf.tanh(x * 2.0 + 1.0) - x)
    graph = f.experimental_get_compiler_ir(x)(stage="graph")
    assert graph.count('op: "TfxlaLaunch"') == 1
    for op in ("Tanh", "AddV2", "Mul", "Sub"):
        assert f'op: "{op}"' not in graph


def test_variables_stay_live() -> None:
    v = tf.Variable(np.ones((3, 2), np.float32))
    f = tfxla_plugin.function(lambda x: tf.matmul(x, v) * 2.0)
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    _close(f(x), tf.matmul(x, v) * 2.0)
    v.assign(v * 3.0 + 1.0)
    _close(f(x), tf.matmul(x, v) * 2.0)


def test_outer_tape_gradients_equal_tf() -> None:
    v = tf.Variable(RNG.standard_normal((3, 5)).astype(np.float32))

    def fn(x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, v)) ** 2, axis=1)

    f = tfxla_plugin.function(fn)
    x = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = tf.reduce_sum(f(x))
        theirs = tf.reduce_sum(fn(x))
    _close(tape.gradient(ours, v), tape.gradient(theirs, v), rtol=1e-4, atol=1e-5)
    _close(tape.gradient(ours, x), tape.gradient(theirs, x), rtol=1e-4, atol=1e-5)


def test_must_compile_lists_every_unsupported_node_with_its_line() -> None:
    def fn(x):
        y = x * 2.0
        return tf.strings.as_string(y), tf.random.uniform([2]) + y[:2]  # both must stay in TF

    f = tfxla_plugin.function(fn, jit_compile=True)
    with pytest.raises(UnsupportedGraphError) as info:
        f(tf.constant([1.0, 2.0, 3.0]))
    text = str(info.value)
    assert "AsString" in text and "RandomUniform" in text
    assert f"{os.path.basename(__file__)}:" in text
    ops = {row[0] for row in info.value.nodes}
    assert {"AsString", "RandomUniform"} <= ops


def test_auto_leaves_string_and_stateful_random_ops_in_tf() -> None:
    def fn(x):
        y = tf.exp(x) * 2.0 + 1.0
        z = tf.reduce_sum(tf.tanh(y) * y)
        return tf.strings.as_string(z), tf.random.uniform([3], seed=1) * 0.0 + y

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = tf.constant([0.5, -1.0, 2.0])
    s, r = f(x)
    y = tf.exp(x) * 2.0 + 1.0
    assert s.numpy().decode() == tf.strings.as_string(tf.reduce_sum(tf.tanh(y) * y)).numpy().decode()
    _close(r, y)
    explanation = f.explain(x)
    assert "AsString" in explanation and "RandomUniform" in explanation
    assert "cluster_0" in explanation
    assert f"({os.path.basename(__file__)}:" in explanation and "(api.py:" not in explanation  # user lines


def test_module_method_and_keras_model() -> None:
    class Scale(tf.Module):
        def __init__(self):
            self.w = tf.Variable([2.0, 3.0])

        @tfxla_plugin.function
        def __call__(self, x):
            return tf.nn.relu(x * self.w - 1.0)

    m = Scale()
    x = tf.constant([1.0, -2.0])
    _close(m(x), tf.nn.relu(x * m.w - 1.0))

    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="gelu"), keras.layers.Dense(2)])
    f = tfxla_plugin.function(model.call)
    xs = tf.constant(RNG.standard_normal((5, 6)).astype(np.float32))
    _close(f(xs), model(xs), rtol=1e-4, atol=1e-5)


def test_compiles_once_per_signature_and_logs_cache(caplog) -> None:
    f = tfxla_plugin.function(lambda x: x * x + 3.0)
    with caplog.at_level(logging.INFO, logger="tfxla_plugin"):
        f(tf.constant([1.0, 2.0]))
        f(tf.constant([3.0, 4.0]))
        f(tf.constant([[1.0]]))
    compiled = [r for r in caplog.records if r.getMessage().startswith("compiled cluster")]
    assert len(compiled) == 2, [r.getMessage() for r in compiled]
    assert "kernel cache" in compiled[0].getMessage()


def test_kernel_cache_hits_in_a_new_process(tmp_path) -> None:
    code = (
        "import logging, tensorflow as tf, tfxla_plugin\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "f = tfxla_plugin.function(lambda x: tf.sigmoid(x) * 7.0 + x)\n"
        "print(float(f(tf.constant([1.0]))[0]))\n"
    )
    env = dict(os.environ, TFXLA_FLAGS=f"--cache_dir={tmp_path}")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for o in outs:
        assert o.returncode == 0, o.stderr[-2000:]
    assert "kernel cache miss" in outs[0].stderr and "kernel cache hit" in outs[1].stderr
    # the second process read the cluster's kernel plan: no lowering, HLO pass, codegen or compiler run
    assert "kernel cache hit (plan: no lowering, HLO passes or codegen)" in outs[1].stderr
    assert [o.stdout for o in outs][0] == [o.stdout for o in outs][1]


def test_compiler_ir_stages() -> None:
    f = tfxla_plugin.function(lambda x: tf.reduce_sum(tf.exp(x), axis=0))
    x = tf.constant(RNG.standard_normal((3, 4)).astype(np.float32))
    ir = f.experimental_get_compiler_ir(x)
    import hlo

    assert hlo.parse_module(ir(stage="hlo")).entry.parameters[0].shape.dims == (3, 4)
    assert "fusion" in ir(stage="optimized_hlo")
    assert "tfxla_run" in ir(stage="c")
    assert "cluster_0" in ir(stage="clusters")
    with pytest.raises(ValueError, match="unknown stage 'llvm'"):
        ir(stage="llvm")


def test_dump_to_writes_xla_style_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path}")
    f = tfxla_plugin.function(lambda x: tf.nn.relu(x) + 1.0)
    f(tf.constant([1.0, -1.0]))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".before_optimizations.txt") and n.startswith("module_") for n in names), names
    assert any(n.endswith(".after_optimizations.txt") for n in names)
    assert any(n.endswith(".c") for n in names)
    assert any(n.endswith(".pbtxt") for n in names)
    import hlo

    for n in names:
        if n.endswith("optimizations.txt"):
            hlo.parse_module((tmp_path / n).read_text())


def test_unknown_flag_is_an_error(monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", "--no_such_flag=1")
    f = tfxla_plugin.function(lambda x: x + 1.0)
    with pytest.raises(ValueError, match="unknown flag --no_such_flag; known flags"):
        f(tf.constant([1.0]))


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_missing_or_corrupt_kernel_is_a_clear_error(tmp_path, monkeypatch, damage: str) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path}")
    f = tfxla_plugin.function(lambda x: x * 5.0 + 2.0 if damage == "missing" else x * 7.0 - 2.0)
    x = tf.constant([1.0])
    path = f.compiled_graph(x).clusters[0].kernel_path  # compiled, not yet loaded by the op
    if damage == "missing":
        os.remove(path)
    else:
        with open(path, "r+b") as fh:
            fh.truncate(200)
    with pytest.raises(tf.errors.OpError, match=os.path.basename(path)):
        f(x)


def test_bad_arguments_to_the_api() -> None:
    with pytest.raises(ValueError, match="jit_compile must be"):
        tfxla_plugin.function(lambda x: x, jit_compile="yes")
    with pytest.raises(ValueError, match="backend must be"):
        tfxla_plugin.function(lambda x: x, backend="tpu")


def test_input_signature_is_enforced() -> None:
    f = tfxla_plugin.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    _close(f(tf.constant([[1.0, 2.0]])), [[2.0, 4.0]])
    _close(f(tf.constant([[1.0, 2.0], [3.0, 4.0]])), [[2.0, 4.0], [6.0, 8.0]])
    with pytest.raises(TypeError, match="not compatible with input_signature"):
        f(tf.constant([[1.0, 2.0, 3.0]]))


def test_several_clusters_compile_and_run() -> None:
    def fn(x):
        a = tf.exp(x) * 2.0 + tf.sin(x) - 1.0
        s = tf.strings.as_string(a)  # stays in TF and splits the graph
        return tf.exp(tf.strings.to_number(s) * 0.5 + 1.0) * 0.5 - tf.sqrt(tf.abs(tf.strings.to_number(s)))

    f = tfxla_plugin.function(fn, jit_compile="auto")
    x = tf.constant(RNG.standard_normal(7).astype(np.float32))
    _close(f(x), fn(x), rtol=1e-4, atol=1e-4)
    assert len(f.compiled_graph(x).clusters) == 2


def test_backend_flag_selects_the_backend_unless_the_function_names_one(monkeypatch) -> None:
    """--backend=cuda compiles CUDA launchers (tests/test_cuda_tf.py runs them); backend="cpu" overrides it."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    monkeypatch.setenv("TFXLA_FLAGS", "--backend=cuda")
    x = tf.constant([1.0])
    assert [c.backend for c in tfxla_plugin.function(lambda x: x * 3.0).compiled_graph(x).clusters] == ["cuda"]
    f = tfxla_plugin.function(lambda x: x * 3.0, backend="cpu")
    assert [c.backend for c in f.compiled_graph(x).clusters] == ["cpu"]
    np.testing.assert_allclose(f(x).numpy(), [3.0])


def test_called_inside_a_tf_function_the_compiler_is_not_converted_by_autograph() -> None:
    from tensorflow.python.autograph.impl import api as autograph_api

    f = tfxla_plugin.function(lambda x: x * 3.0 + 1.0)
    assert autograph_api.is_autograph_artifact(f)  # autograph calls it as it is, without converting it

    @tf.function  # autograph on, the default
    def outer(x):
        return f(x) - 1.0

    x = tf.constant([1.0, 2.0])
    np.testing.assert_allclose(outer(x).numpy(), (x * 3.0).numpy())

