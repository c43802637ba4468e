"""The Grappler hook on plain ``tf.function``s the user never wrapped (each scenario in a child process:
the plugin is process-wide; see tests/hook_child.py).

One child runs, in order: a function traced after ``enable()`` runs ``TfxlaLaunch`` and matches TF eager
(live variable included), also when first called from a second Python thread, and so does a loaded
SavedModel's signature; an injected compile failure
leaves TF's result and exactly one WARNING naming it; ``disable()`` stops rewriting new graphs; the ``enabled()`` context manager; must-compile
(``enable(jit_compile=True)``) on a ``jit_compile=True`` function with a string op: one ERROR, TF's
result, while functions that do not ask for it stay "auto". A second child checks
``TFXLA_FLAGS=--auto_jit=1``.
"""

from __future__ import annotations

import pytest

from tests.hook_child import run_child

TOL = 1e-5  # float32 matmul + elementwise against TF eager: same sums, maybe another order

SCENARIOS = """
    v = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)

    def body(x):
        return tf.nn.relu(tf.matmul(x, v) + 1.0) * 2.0 - tf.reduce_sum(x)

    x = tf.constant(np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32))
    err = lambda y, want: float(np.abs(np.asarray(y) - np.asarray(want)).max())
    out = {}

    tfxla_plugin.enable()
    f = tf.function(body)
    y, ops = ran_ops(f, x)
    out["plain"] = dict(err=err(y, body(x)), ops=ops, stats=vars(tfxla_plugin.stats()).copy())
    v.assign(v * 2.0)  # the rewritten graph reads the live variable
    out["plain"]["err_after_assign"] = err(f(x), body(x))
    out["plain"]["info"] = logged("INFO", "tfxla hook: rewrote")

    import threading
    done, rewritten = {}, tfxla_plugin.stats().graphs_rewritten
    worker = threading.Thread(target=lambda: done.update(y=tf.function(lambda x: body(x) + 5.0)(x).numpy()))
    worker.start()
    worker.join(120)  # TF optimizes the function on this second thread's call: the hook takes the GIL there
    out["thread"] = dict(hung=worker.is_alive(), err=err(done["y"], body(x) + 5.0) if "y" in done else None,
                         rewritten=tfxla_plugin.stats().graphs_rewritten - rewritten)

    import os

    class Module(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))

        @tf.function(input_signature=[tf.TensorSpec([2, 8])])
        def __call__(self, x):
            return tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w)) + 1.0)

    module, path = Module(), os.environ["HOOK_SAVED_MODEL"]
    tf.saved_model.save(module, path, signatures=module.__call__.get_concrete_function())
    xs = tf.constant(np.random.default_rng(1).normal(size=(2, 8)).astype(np.float32))
    rewritten = tfxla_plugin.stats().graphs_rewritten
    signature = tf.saved_model.load(path).signatures["serving_default"]
    y, ops = ran_ops(lambda x: list(signature(x=x).values())[0], xs)
    out["saved_model"] = dict(err=err(y, module(xs)), ops=ops,
                              rewritten=tfxla_plugin.stats().graphs_rewritten - rewritten)

    import tfxla_plugin.compiled_graph as compiled_graph
    real = compiled_graph.compile_clusters

    def broken(analysis, flags):
        raise RuntimeError("injected compile failure")

    compiled_graph.compile_clusters = broken
    h = tf.function(lambda x: body(x) + 3.0)
    y, ops = ran_ops(h, x)
    h(x)
    tf.function(lambda x: body(x) + 3.0)(x)  # the same graph again: decided once, no second warning
    compiled_graph.compile_clusters = real
    out["failure"] = dict(err=err(y, body(x) + 3.0), ops=ops, warnings=logged("WARNING", ""),
                          left_alone=dict(tfxla_plugin.stats().left_alone))

    tfxla_plugin.disable()
    seen = tfxla_plugin.stats().graphs_seen
    y, ops = ran_ops(tf.function(lambda x: body(x) * 0.5), x)
    out["disabled"] = dict(err=err(y, body(x) * 0.5), ops=ops, new_graphs=tfxla_plugin.stats().graphs_seen - seen,
                           on=tfxla_plugin.is_enabled())

    with tfxla_plugin.enabled():
        inside = tfxla_plugin.is_enabled()
        y, ops = ran_ops(tf.function(lambda x: body(x) - 1.0), x)
    out["context"] = dict(err=err(y, body(x) - 1.0), ops=ops, inside=inside, after=tfxla_plugin.is_enabled())

    tfxla_plugin.enable(jit_compile=True)
    # A jit_compile=True function called from another is ours, must-compile: XLA would refuse its
    # string op at run time; here one ERROR names it and TF runs the body. Plain functions stay "auto".
    with_string = tf.function(lambda x: (body(x), tf.strings.as_string(tf.reduce_sum(x))), jit_compile=True)
    y_auto, ops_auto = ran_ops(tf.function(lambda x: body(x) * 3.0), x)

    (y, text), ops = ran_ops(tf.function(lambda x: with_string(x)), x)
    out["must_compile"] = dict(err=err(y, body(x)), text=text.numpy().decode(), want=tf.strings.as_string(
        tf.reduce_sum(x)).numpy().decode(), ops=ops, errors=logged("ERROR", ""),
        left_alone=dict(tfxla_plugin.stats().left_alone), xla_calls_taken=tfxla_plugin.stats().xla_calls_taken,
        auto_err=err(y_auto, body(x) * 3.0), auto_ops=ops_auto)
    import tfxla_plugin.hook.callback as callback
    guarded = callback.optimize
    callback.optimize = lambda graph, preserve, name: 1 / 0  # past its own guard: the plugin's last resort
    out["raising"] = err(tf.function(lambda x: body(x) - 7.0)(x), body(x) - 7.0)
    callback.optimize = guarded
    report(**out)
"""


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> dict:
    saved = tmp_path_factory.mktemp("hook") / "model"
    return run_child(SCENARIOS, env={"TF_CPP_MIN_LOG_LEVEL": "0", "HOOK_SAVED_MODEL": str(saved)})


def test_an_unwrapped_tf_function_runs_tfxla_launch_and_matches_tf(scenarios) -> None:
    plain = scenarios["plain"]
    assert "TfxlaLaunch" in plain["ops"] and "MatMul" not in plain["ops"], plain["ops"]
    assert plain["err"] < TOL and plain["err_after_assign"] < TOL
    stats = plain["stats"]
    assert stats["graphs_rewritten"] == 1 and stats["clusters_compiled"] == 1, stats
    assert stats["graphs_seen"] == 1, stats  # Grappler's second iteration is not a new graph
    assert stats["seconds_compiling"] > 0
    assert len(plain["info"]) == 1 and "1 cluster(s) compiled" in plain["info"][0], plain["info"]


def test_a_function_first_called_from_another_python_thread_is_rewritten_without_a_deadlock(scenarios) -> None:
    thread = scenarios["thread"]
    assert thread["hung"] is False and thread["err"] is not None and thread["err"] < TOL
    assert thread["rewritten"] == 1


def test_a_loaded_saved_model_signature_runs_tfxla_launch_and_matches_tf(scenarios) -> None:
    sm = scenarios["saved_model"]
    assert "TfxlaLaunch" in sm["ops"] and "MatMul" not in sm["ops"], sm["ops"]
    assert sm["err"] < TOL and sm["rewritten"] >= 1


def test_an_injected_compile_failure_leaves_tf_running_with_one_warning(scenarios) -> None:
    failure = scenarios["failure"]
    assert failure["err"] < TOL
    assert "TfxlaLaunch" not in failure["ops"] and "MatMul" in failure["ops"]
    assert len(failure["warnings"]) == 1, failure["warnings"]
    assert "left to TensorFlow: RuntimeError: injected compile failure" in failure["warnings"][0]
    assert failure["left_alone"].get("failed: RuntimeError") == 1, failure["left_alone"]
    assert "PluggableGraphOptimizer failed" not in scenarios["stderr"]  # we return the graph, not an error


def test_disable_stops_rewriting_new_graphs(scenarios) -> None:
    disabled = scenarios["disabled"]
    assert disabled["on"] is False and disabled["new_graphs"] == 0
    assert "TfxlaLaunch" not in disabled["ops"] and disabled["err"] < TOL


def test_the_context_manager_enables_for_its_body_only(scenarios) -> None:
    ctx = scenarios["context"]
    assert ctx["inside"] is True and ctx["after"] is False
    assert "TfxlaLaunch" in ctx["ops"] and ctx["err"] < TOL


def test_must_compile_leaves_a_graph_with_an_unsupported_node_to_tf_with_one_error(scenarios) -> None:
    mc = scenarios["must_compile"]
    assert mc["err"] < TOL and mc["text"] == mc["want"]
    assert "TfxlaLaunch" not in mc["ops"]  # (the callee's own graph is not in the caller's run metadata)
    assert len(mc["errors"]) == 1, mc["errors"]
    assert "runs in TensorFlow, not compiled" in mc["errors"][0] and "AsString" in mc["errors"][0]
    assert mc["left_alone"].get("must-compile: unsupported nodes") == 1 and mc["xla_calls_taken"] == 1
    assert "TfxlaLaunch" in mc["auto_ops"] and mc["auto_err"] < TOL  # a function not asking for it: auto


def test_tfxla_flags_auto_jit_enables_the_hook_at_import() -> None:
    got = run_child("""
        x = tf.ones([3, 5])
        y, ops = ran_ops(tf.function(lambda x: tf.nn.softmax(tf.exp(x) * 2.0 + 1.0)), x)
        report(on=tfxla_plugin.is_enabled(), ops=ops, err=float(np.abs(y.numpy() - 0.2).max()))
    """, env={"TFXLA_FLAGS": "--auto_jit=1"})
    assert got["on"] is True and "TfxlaLaunch" in got["ops"] and got["err"] < 1e-6


def test_a_callback_that_raises_past_its_guard_still_leaves_the_graph_to_tf(scenarios) -> None:
    assert scenarios["raising"] < TOL
    assert "ZeroDivisionError" in scenarios["stderr"]  # reported as unraisable by the plugin, then cleared
