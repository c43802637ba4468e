"""Loops under the Grappler hook (issue 17 with issue 18's recurrent models), in one child process (the
plugin is process-wide: tests/hook_child.py).

TF lowers a function's ``While`` to ``Merge``/``Switch`` frames before Grappler hands it over, so the hook
works on the function's own body, rebuilt in functional form from TF's registry with its library
(``tfxla_plugin/hook/functional.py``). With the switch on, and each result compared with the same
computation run by TF with the switch off:

- a ``tf.function`` with a ``tf.TensorArray`` loop reading a variable runs one ``TfxlaLaunch`` with the loop
  inside its cluster (``explain_hooked``: ``While`` among the cluster's ops; no ``While`` or v1 loop node
  runs in TF), and so does a loaded SavedModel's signature with such a loop;
- a Keras LSTM model's ``predict`` and one epoch of ``fit``: each step's loop inside a cluster;
- a loop whose body holds a string op stays in TF while what is around it compiles: the functional
  ``While`` runs TF's own cond and body, not the copies the hoisting pass wrote (TF would not find
  them); its result is TF's.

Tolerances: float32 elementwise/tanh/matmul sums in another order than Eigen: ``ATOL`` on values;
the LSTM's SGD step: loss ``LOSS_RTOL``, weights ``ATOL`` (seen: ~1e-7).
"""

from __future__ import annotations

import pytest

from tests.hook_child import run_child

ATOL, LOSS_RTOL = 1e-5, 1e-5
V1_LOOP_OPS = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}

SCRIPT = """
    import os
    import tfxla_plugin.explain as explain

    v = tf.Variable(np.linspace(-1, 1, 3, dtype=np.float32))
    err = lambda y, want: float(np.abs(np.asarray(y) - np.asarray(want)).max())
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32))

    def array_loop(x):
        x = tf.nn.relu(x * 2.0 + 1.0)
        ta = tf.TensorArray(tf.float32, size=5)

        def body(i, ta, acc):
            acc = tf.tanh(acc * 0.5 + x * v)
            return i + 1, ta.write(i, acc), acc

        _, ta, acc = tf.while_loop(lambda i, *_: i < 5, body, (0, ta, tf.zeros_like(x)))
        return tf.reduce_sum(ta.stack(), 0) * 3.0 - acc

    def refused_loop(x):
        x = tf.nn.relu(x * 2.0 + 1.0) - tf.reduce_mean(x)

        def body(i, acc):
            digits = tf.cast(tf.strings.length(tf.strings.as_string(i)), tf.float32)  # strings stay in TF
            return i + 1, tf.tanh(acc * 0.5 + x * v) + digits

        _, acc = tf.while_loop(lambda i, _: i < 4, body, (0, tf.zeros_like(x)))
        return tf.nn.softmax(acc * 2.0 + 1.0) * 3.0 - 1.0

    def graph_json(fn, *args):
        return [dict(decision=g["decision"], ops=sorted({op for c in g.get("clusters", []) for op in c["op_types"]}))
                for g in explain.explain_hooked_json(fn, *args)["graphs"]]

    class Module(tf.Module):
        def __init__(self):
            self.v = v

        @tf.function(input_signature=[tf.TensorSpec([2, 3])])
        def __call__(self, x):
            return array_loop(x)

    module, path = Module(), os.environ["HOOK_SAVED_MODEL"]
    tf.saved_model.save(module, path, signatures=module.__call__.get_concrete_function())

    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(32, 6, 4)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32)

    def lstm():
        tf.keras.utils.set_random_seed(1)
        model = tf.keras.Sequential([tf.keras.Input((6, 4)), tf.keras.layers.LSTM(8), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
        predict = model.predict(X, batch_size=16, verbose=0)
        loss = model.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0).history["loss"]
        return model, dict(predict=predict.tolist(), loss=loss, weights=[w.numpy().tolist() for w in model.weights])

    want = dict(array=tf.function(array_loop)(x), refused=tf.function(refused_loop)(x))
    _, lstm_off = lstm()
    out = {}

    tfxla_plugin.enable()
    f = tf.function(array_loop)
    y, ops = ran_ops(f, x)
    out["array"] = dict(err=err(y, want["array"]), ops=ops, graphs=graph_json(f, x))

    signature = tf.saved_model.load(path).signatures["serving_default"]
    y, ops = ran_ops(lambda x: list(signature(x=x).values())[0], x)
    out["saved_model"] = dict(err=err(y, want["array"]), ops=ops, graphs=graph_json(signature))

    g = tf.function(refused_loop)
    y, ops = ran_ops(g, x)
    out["refused"] = dict(err=err(y, want["refused"]), ops=ops, graphs=graph_json(g, x))
    from tfxla_plugin.hook import lookup
    (record,) = lookup.hooked_graphs(g, x)
    loop_functions = lambda gd: sorted(n.attr[a].func.name for n in gd.node if n.op == "While" for a in ("cond", "body"))
    out["refused"]["analysed"] = loop_functions(record.analysis.graph_def)  # the hoisting pass's copies
    out["refused"]["runs"] = loop_functions(record.rewritten.graph_def)  # TF's own

    model, lstm_on = lstm()
    out["lstm"] = dict(on=lstm_on, off=lstm_off, graphs=graph_json(model))
    out["warnings"] = logged("WARNING", "")
    out["stats"] = dict(vars(tfxla_plugin.stats()), left_alone=dict(tfxla_plugin.stats().left_alone),
                        left_in_tf=dict(tfxla_plugin.stats().left_in_tf))
    report(**out)
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory) -> dict:
    saved = tmp_path_factory.mktemp("hook_loops") / "model"
    return run_child(SCRIPT, env={"HOOK_SAVED_MODEL": str(saved)})


def _loop_compiled(case: dict) -> None:
    assert case["err"] < ATOL, case["err"]
    assert "TfxlaLaunch" in case["ops"] and not (V1_LOOP_OPS | {"While"}) & set(case["ops"]), case["ops"]
    (graph,) = case["graphs"]
    assert graph["decision"] == "rewritten" and "While" in graph["ops"], graph


def test_a_tensor_array_loop_compiles_inside_a_cluster(child) -> None:
    _loop_compiled(child["array"])
    assert {"TensorListReserve", "TensorListStack"} <= set(child["array"]["graphs"][0]["ops"])  # its list too


def test_a_loaded_saved_model_signature_with_a_loop_compiles(child) -> None:
    _loop_compiled(child["saved_model"])


def test_a_loop_the_compiler_refuses_stays_in_tf_with_tfs_result(child) -> None:
    refused = child["refused"]
    assert refused["err"] < ATOL, refused["err"]
    assert {"TfxlaLaunch", "While"} <= set(refused["ops"]), refused["ops"]  # the functional While, in TF
    assert not V1_LOOP_OPS & set(refused["ops"]), refused["ops"]
    assert len(refused["analysed"]) == 2 and all(f.endswith("_tfxla_reads") for f in refused["analysed"])
    assert refused["runs"] == [f.removesuffix("_tfxla_reads") for f in refused["analysed"]], refused
    (graph,) = refused["graphs"]
    assert graph["decision"] == "rewritten" and "While" not in graph["ops"] and "Softmax" in graph["ops"], graph


def test_keras_lstm_predict_and_fit_run_their_loops_compiled_and_match_tf(child) -> None:
    import numpy as np

    on, off = child["lstm"]["on"], child["lstm"]["off"]
    np.testing.assert_allclose(on["predict"], off["predict"], atol=ATOL)
    np.testing.assert_allclose(on["loss"], off["loss"], rtol=LOSS_RTOL)
    for got, want in zip(on["weights"], off["weights"], strict=True):
        np.testing.assert_allclose(got, want, atol=ATOL)
    rewritten = [g for g in child["lstm"]["graphs"] if g["decision"] == "rewritten"]
    assert len(rewritten) == 2 and all("While" in g["ops"] for g in rewritten), child["lstm"]["graphs"]


def test_no_warning_and_nothing_failed(child) -> None:
    assert child["warnings"] == []
    assert not any(reason.startswith("failed") for reason in child["stats"]["left_alone"]), child["stats"]
