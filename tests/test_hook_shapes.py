"""Static-shape twins (``tfxla_plugin/hook/static_shapes.py``): an eager call of a function traced with
unknown dims runs a twin traced for the call's shapes, which the hook compiles (docs/hook.md, "Shapes").

The child process (tests/hook_child.py) runs Keras's ``predict_on_batch`` at batch 1 and then 32 (Keras
relaxes its predict step to a ``None`` batch: before the twins, that step ran in TF, nothing compiled), the
same for a ``jit_compile=True`` model (its inner step inlined into the twin),
``predict`` with a partial last batch twice, ``train_on_batch`` at varying sizes, a ``fit`` of 2 epochs with a partial last batch against the
same fit with the switch off, the ``MAX_SHAPES`` bound, and a function whose twin compiles nothing.
Tolerance: float32 matmuls in another order than Eigen's, ``atol=1e-5`` (seen ~1e-7).
"""

from __future__ import annotations

import pytest

from tests.hook_child import run_child

ATOL = 1e-5

SCRIPT = """
    from tfxla_plugin.hook import static_shapes
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 8)).astype(np.float32)
    Y = (X @ rng.normal(size=(8, 2))).astype(np.float32)
    counts = lambda: dict(twins=tfxla_plugin.stats().shape_twins, compiled=tfxla_plugin.stats().clusters_compiled,
                          rewritten=tfxla_plugin.stats().graphs_rewritten)
    err = lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max())

    def build():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(2)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
        return model

    out = {}
    tfxla_plugin.enable()
    model = build()
    calls = []
    for b in (1, 32, 7, 32, 7):  # Keras relaxes its predict step to a None batch at the second size
        before = counts()
        y, ops = ran_ops(model.predict_on_batch, X[:b])
        calls.append(dict(batch=b, err=err(y, model(X[:b])), launch="TfxlaLaunch" in ops, before=before,
                          after=counts()))
    out["predict_on_batch"] = calls
    out["records"] = sorted((g.function, g.decision) for g in
                            __import__("tfxla_plugin.hook.lookup", fromlist=["x"]).hooked_graphs(model.predict_function))
    first = model.predict(X, batch_size=32, verbose=0)
    between = counts()
    second = model.predict(X, batch_size=32, verbose=0)
    out["predict"] = dict(err=max(err(first, model(X)), err(second, model(X))), between=between, after=counts())

    before = counts()
    fitted, fit_ops = ran_ops(lambda: model.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0))
    history = fitted.history["loss"]
    middle = counts()
    history += model.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    out["fit"] = dict(loss=history, weights=[w.numpy().tolist() for w in model.weights], before=before, ops=fit_ops,
                      middle=middle, after=counts(), evaluate=model.evaluate(X, Y, batch_size=32, verbose=0))

    def train_on_batches():  # Keras's train step called eagerly with tensors: relaxed at the second size
        model = build()
        losses = [model.train_on_batch(X[:b], Y[:b]) for b in (32, 7, 32, 5)]
        return dict(loss=losses, weights=[w.numpy().tolist() for w in model.weights],
                    slots=[v.numpy().tolist() for v in model.optimizer.variables])

    before = counts()
    out["train_on_batch"] = dict(on=train_on_batches(), before=before, after=counts())

    # model.compile(jit_compile=True): the relaxed outer step calls the jit_compile=True inner one; its twin
    # calls the inner's definition without _XlaMustCompile/_noinline, which TF inlines: one graph, compiled.
    jit_model = build()
    jit_model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    jit_calls = []
    for b in (1, 32):
        taken = tfxla_plugin.stats().xla_calls_taken
        y, ops = ran_ops(jit_model.predict_on_batch, X[:b])
        jit_calls.append(dict(err=err(y, jit_model(X[:b])), ops=ops, taken=tfxla_plugin.stats().xla_calls_taken - taken))
    out["jit"] = jit_calls

    static_shapes.MAX_SHAPES = 2
    f = tf.function(lambda x: tf.nn.relu(tf.matmul(x, tf.ones((8, 4)))) * 2.0 + 1.0, reduce_retracing=True)
    f(tf.constant(X[:3])); f(tf.constant(X[:4]))  # relaxed to [None, 8] at the second size: its first twin
    bound = []
    for b in (5, 6, 9, 5):
        y, ops = ran_ops(f, tf.constant(X[:b]))
        bound.append(dict(batch=b, err=err(y, np.maximum(X[:b] @ np.ones((8, 4)), 0) * 2 + 1),
                          launch="TfxlaLaunch" in ops))
    out["bound"] = dict(calls=bound, twins=len(static_shapes.twin_names(
        f.get_concrete_function(tf.TensorSpec([None, 8]))._inference_function)))

    strings = tf.function(lambda s: tf.strings.join([s, s]), reduce_retracing=True)
    strings(tf.constant(["a"]))
    before = tfxla_plugin.stats().shape_twins
    for n in (2, 3, 4):  # relaxed at the second size, whose twin compiles nothing
        strings(tf.constant(["a"] * n))
    out["nothing_to_compile"] = dict(twins=tfxla_plugin.stats().shape_twins - before,
                                     info=logged("INFO", "static-shape twin compiled nothing"))

    tfxla_plugin.disable()
    twins = tfxla_plugin.stats().shape_twins
    model_off_twin = model.predict_on_batch(X[:11])  # a new size with the switch off: TF's relaxed step, no twin
    out["off"] = dict(err=err(model_off_twin, model(X[:11])), twins=tfxla_plugin.stats().shape_twins - twins)
    model = build()
    history = model.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    history += model.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]
    out["train_on_batch"]["off"] = train_on_batches()
    out["fit_off"] = dict(loss=history, weights=[w.numpy().tolist() for w in model.weights],
                          evaluate=model.evaluate(X, Y, batch_size=32, verbose=0))
    report(**out)
"""


@pytest.fixture(scope="module")
def child() -> dict:
    return run_child(SCRIPT)


def test_a_relaxed_predict_step_runs_a_static_kernel_per_batch_size_compiled_once(child) -> None:
    calls = child["predict_on_batch"]
    assert [c["batch"] for c in calls] == [1, 32, 7, 32, 7]
    for c in calls:
        assert c["err"] <= ATOL, c
    # Every first call of a size runs TfxlaLaunch (run metadata lists a function's graphs when it is instantiated).
    assert [c["launch"] for c in calls[:3]] == [True, True, True], calls
    b1, b32, b7, again32, again7 = calls
    assert b1["after"]["twins"] == 0 and b1["after"]["compiled"] == 1, b1  # the static trace at batch 1
    assert b32["after"]["twins"] == 1 and b32["after"]["compiled"] == 2, b32
    assert b7["after"]["twins"] == 2 and b7["after"]["compiled"] == 3, b7
    assert again32["after"] == again7["after"] == b7["after"], calls  # nothing new for a size seen before
    decisions = [decision for _, decision in child["records"]]
    assert decisions == ["rewritten"] * 3, child["records"]
    assert sum("__tfxla_s" in name for name, _ in child["records"]) == 2, child["records"]


def test_predict_with_a_partial_last_batch_compiles_once_across_calls(child) -> None:
    p = child["predict"]
    assert p["err"] <= ATOL, p
    assert p["after"] == p["between"], p  # the second predict compiles nothing


def test_fit_with_a_partial_last_batch_matches_tf_and_compiles_once(child) -> None:
    import numpy as np

    on, off = child["fit"], child["fit_off"]
    np.testing.assert_allclose(on["loss"], off["loss"], rtol=1e-5)
    for got, want in zip(on["weights"], off["weights"], strict=True):
        np.testing.assert_allclose(got, want, atol=ATOL)
    np.testing.assert_allclose(on["evaluate"], off["evaluate"], rtol=1e-5)
    assert on["middle"]["compiled"] > on["before"]["compiled"], on  # the train step's static parts
    assert on["after"]["compiled"] == on["middle"]["compiled"], on  # 2 more epochs: nothing compiled again
    # What stays in TF (the None-batch forward and backward pass) is fused by TF's remapper, which the hook
    # runs itself (hook/remap.py: TF's own is off while the switch is on): Dense+relu is one _FusedMatMul.
    assert "TfxlaLaunch" in on["ops"] and "_FusedMatMul" in on["ops"] and "BiasAdd" not in on["ops"], on["ops"]


def test_train_on_batch_at_varying_sizes_trains_as_tf_through_twins(child) -> None:
    import numpy as np

    t = child["train_on_batch"]
    on, off = t["on"], t["off"]
    np.testing.assert_allclose(on["loss"], off["loss"], rtol=1e-5)
    for got, want in zip(on["weights"] + on["slots"], off["weights"] + off["slots"], strict=True):
        np.testing.assert_allclose(got, want, atol=ATOL)
    assert on["slots"][0] == 4  # SGD's iteration count: every step's writes ran
    assert t["after"]["twins"] - t["before"]["twins"] == 2, t  # batches 7 and 5 (32 is the first, static trace)


def test_a_jit_compile_true_step_is_inlined_into_its_twin_and_compiled(child) -> None:
    b1, b32 = child["jit"]
    assert b1["err"] <= ATOL and b32["err"] <= ATOL, child["jit"]
    assert "TfxlaLaunch" in b32["ops"] and "StatefulPartitionedCall" not in b32["ops"], b32
    assert b32["taken"] == 1, b32  # the twin's call of the jit_compile=True step, taken from XLA


def test_twins_per_function_are_bounded(child) -> None:
    calls, twins = child["bound"]["calls"], child["bound"]["twins"]
    for c in calls:
        assert c["err"] <= ATOL, c
    # MAX_SHAPES = 2: batches 4 and 5 have twins; 6 and 9 run the function traced for None (first
    # instantiated at 6, without a launch: nothing compiles at a None batch)
    assert twins == 2, child["bound"]
    assert [c["launch"] for c in calls[:2]] == [True, False], calls


def test_a_function_whose_twin_compiles_nothing_gets_no_more_twins(child) -> None:
    n = child["nothing_to_compile"]
    assert n["twins"] == 1 and len(n["info"]) == 1, n


def test_with_the_switch_off_no_twin_is_made(child) -> None:
    assert child["off"]["err"] <= ATOL and child["off"]["twins"] == 0, child["off"]


def test_twin_definition_gives_the_unknown_dims_the_call_shapes() -> None:
    import tensorflow as tf

    from tfxla_plugin.hook import eager_jit, static_shapes

    v = tf.Variable(tf.ones((3, 2)))
    cf = tf.function(lambda x, s: (tf.matmul(x, v), s)).get_concrete_function(tf.TensorSpec([None, 3]),
                                                                             tf.TensorSpec([4], tf.string))
    definition = cf.function_def
    positions = static_shapes.unknown_positions(definition)
    assert positions == (0,)  # the string input is static; the captured variable is a resource
    twin, callees = static_shapes.twin_definition(definition, "twin", positions, ((5, 3),))
    assert callees == []
    assert twin.signature.name == "twin" and definition.signature.name != "twin"
    dims = [d.size for d in twin.arg_attr[0].attr["_output_shapes"].list.shape[0].dim]
    assert dims == [5, 3]
    assert [d.size for d in definition.arg_attr[0].attr["_output_shapes"].list.shape[0].dim] == [-1, 3]
    # A call of a jit_compile=True function is pointed at its inlinable definition and loses the attr.
    g = tf.function(lambda x: x * 2.0, jit_compile=True)
    caller = tf.function(lambda x: g(x) + 1.0).get_concrete_function(tf.TensorSpec([None, 3])).function_def
    (call,) = [n for n in caller.node_def if n.op.endswith("PartitionedCall")]
    _, callees = static_shapes.twin_definition(caller, "t0", (0,), ((2, 3),))
    assert callees == [call.attr["f"].func.name]
    twin, _ = static_shapes.twin_definition(caller, "t1", (0,), ((2, 3),), inlined={callees[0]: "g_inline"})
    (released,) = [n for n in twin.node_def if n.op.endswith("PartitionedCall")]
    assert released.attr["f"].func.name == "g_inline" and "_XlaMustCompile" not in released.attr
    assert call.attr["_XlaMustCompile"].b  # the caller's own definition is not changed
    name = static_shapes.twin_name("__inference_f_3", ((5, 3),))
    assert name.startswith("__inference_f_3__tfxla_s") and name != static_shapes.twin_name("__inference_f_3", ((6, 3),))
    assert eager_jit.original_name(name) == (name, False)
    assert eager_jit.original_name("__inference_f_3__tfxla_s2") == ("__inference_f_3__tfxla_s2", False)
    assert eager_jit.original_name("__inference_f_3__tfxla__tfxla_s2") == ("__inference_f_3__tfxla_s2", True)
    assert eager_jit.original_name("__inference_f_3__tfxla") == ("__inference_f_3", True)


def test_remap_fuses_what_the_remapper_fuses_and_leaves_other_graphs_alone() -> None:
    import tensorflow as tf

    from tfxla_plugin.hook import remap

    w, b = tf.ones((4, 3)), tf.ones((3,))
    cf = tf.function(lambda x: tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))).get_concrete_function(
        tf.TensorSpec([None, 4]))
    graph_def = cf.graph.as_graph_def()
    for node in graph_def.node:
        node.device = remap.CPU  # as Grappler hands graphs over: placed
    out_name = cf.outputs[0].op.name
    fused = remap.fused(graph_def, [out_name])
    assert fused is not None
    ops = {n.name: n.op for n in fused.node}
    assert "_FusedMatMul" in ops.values() and "BiasAdd" not in ops.values() and "Relu" not in ops.values(), ops
    assert out_name in ops  # the preserved node keeps its name (the fused node takes it)
    plain = tf.function(lambda x: x * 2.0 + 1.0).get_concrete_function(tf.TensorSpec([2])).graph.as_graph_def()
    assert remap.fused(plain, []) is None  # nothing it fuses from: not given to the remapper
    broken = type(graph_def)()
    broken.CopyFrom(graph_def)
    broken.node[-1].input.append("no_such_node:0")
    assert remap.fused(broken, [out_name]) is None  # a failure leaves the graph as it is
