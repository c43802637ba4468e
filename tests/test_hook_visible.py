"""What the Grappler hook did, made visible, and ``tf.function(jit_compile=True)`` called eagerly (issue 17,
items 2 and 5), in one child process (the plugin is process-wide: tests/hook_child.py):

- an eagerly called ``jit_compile=True`` function runs TF's XLA with the switch off, ``TfxlaLaunch`` with it
  on (counted in ``stats().xla_calls_taken``, gradients under a tape included), XLA again after ``disable()``;
  under ``enable(jit_compile=True)`` it is must-compile: a string op gives one ERROR and TF's result;
- ``tfxla_plugin.explain_hooked`` reports the clusters the hook formed for a plain ``tf.function`` (text and
  JSON, the string op left out with its reason), and raises ``LookupError`` for one the hook never saw;
- ``tfxla_plugin.tensorboard.write`` on that ``tf.function`` writes the runs it writes for a
  ``tfxla_plugin.function`` (read back with TensorBoard's reader);
- ``stats().kernel_cache_hits``: a second graph whose cluster is the same kernel finds it in the cache;
- ``tfxla tensorboard --jit`` writes a plain SavedModel's signature as the hook compiles it (static shapes
  compiled; a ``None`` batch signature only its ``original`` run, its nodes left in TF).

Tolerance: float32 matmul + softmax against TF eager (or TF's XLA), ``TOL``.
"""

from __future__ import annotations

import pytest

from tests.hook_child import run_child

TOL = 1e-5

SCRIPT = """
    import os
    import tfxla_plugin.tensorboard as tb

    v = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))

    def body(x):
        return tf.nn.softmax(tf.nn.relu(tf.matmul(x, v)) * 2.0 + 1.0) - tf.reduce_mean(x)

    x = tf.constant(np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32))
    err = lambda y, want: float(np.abs(np.asarray(y) - np.asarray(want)).max())
    counted = lambda: dict(vars(tfxla_plugin.stats()), left_alone=dict(tfxla_plugin.stats().left_alone),
                           left_in_tf=dict(tfxla_plugin.stats().left_in_tf))
    out = {}

    jit = tf.function(body, jit_compile=True)
    y, ops = ran_ops(jit, x)
    out["xla_before"] = dict(err=err(y, body(x)), ops=ops)

    tfxla_plugin.enable()
    y, ops = ran_ops(jit, x)
    out["jit_on"] = dict(err=err(y, body(x)), ops=ops, stats=counted(), explain=tfxla_plugin.explain_hooked(jit, x))
    with tf.GradientTape() as tape:
        y = jit(x)
    with tf.GradientTape() as want_tape:
        want = body(x)
    out["jit_on"]["grad_err"] = err(tape.gradient(y, v), want_tape.gradient(want, v))

    from tfxla_plugin.hook import eager_jit
    make_twin = eager_jit._make_twin
    eager_jit._make_twin = lambda function: 1 / 0
    broken = tf.function(lambda x: body(x) + 2.0, jit_compile=True)
    y, ops = ran_ops(broken, x)
    broken(x)
    eager_jit._make_twin = make_twin
    out["twin_failed"] = dict(err=err(y, body(x) + 2.0), ops=ops, warnings=logged("WARNING", ""))

    f = tf.function(lambda x: (body(x), tf.strings.as_string(x)))
    try:
        tfxla_plugin.explain_hooked(f, x)
        out["unseen"] = None
    except LookupError as e:
        out["unseen"] = str(e)
    before = counted()
    f(x)
    g = tf.function(lambda x: (body(x), tf.strings.as_string(x, precision=2)))  # another graph, the same cluster
    g(x)
    out["plain"] = dict(text=tfxla_plugin.explain_hooked(f, x), doc=json.loads(tfxla_plugin.explain_hooked(
        f, x, format="json")), before=before, after=counted(),
        runs=tb.write(f, x, logdir=os.environ["HOOK_LOGDIR"], name="plain").runs)

    tfxla_plugin.disable()
    class Module(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))

        @tf.function(input_signature=[tf.TensorSpec([2, 8])])
        def fixed(self, x):
            return tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w)) + 1.0)

        @tf.function(input_signature=[tf.TensorSpec([None, 8])])
        def dynamic(self, x):
            return tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w)) + 1.0)

    module, saved = Module(), os.path.join(os.environ["HOOK_LOGDIR"], "model")
    tf.saved_model.save(module, saved, signatures={"fixed": module.fixed.get_concrete_function(),
                                                   "dynamic": module.dynamic.get_concrete_function()})
    from tfxla_plugin.cli import main
    out["cli"] = {sig: main(["tensorboard", "--dir", saved, "--logdir", os.environ["HOOK_LOGDIR"], "--jit",
                             "--signature_def", sig]) for sig in ("fixed", "dynamic")}
    out["cli"]["on_after"] = tfxla_plugin.is_enabled()
    seen = tfxla_plugin.stats().graphs_seen
    y, ops = ran_ops(jit, x)
    out["xla_after"] = dict(err=err(y, body(x)), ops=ops, new_graphs=tfxla_plugin.stats().graphs_seen - seen)

    tfxla_plugin.enable(jit_compile=True)
    with_string = tf.function(lambda x: (body(x), tf.strings.as_string(tf.reduce_sum(x))), jit_compile=True)
    (y, text), ops = ran_ops(with_string, x)
    out["must_compile"] = dict(err=err(y, body(x)), text=text.numpy().decode(), ops=ops, errors=logged("ERROR", ""),
                               want=tf.strings.as_string(tf.reduce_sum(x)).numpy().decode())
    report(**out)
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory) -> dict:
    logdir = tmp_path_factory.mktemp("tb")
    got = run_child(SCRIPT, env={"TF_CPP_MIN_LOG_LEVEL": "0", "HOOK_LOGDIR": str(logdir)})
    return {**got, "logdir": str(logdir)}


def test_an_eager_jit_compile_true_call_runs_tfxla_launch_with_the_switch_on_and_xla_with_it_off(child) -> None:
    before, on, after = child["xla_before"], child["jit_on"], child["xla_after"]
    assert "Compiled cluster using XLA" in child["stderr"]  # TF's XLA ran (switch off), logged once per process
    assert "TfxlaLaunch" not in before["ops"] and before["err"] < TOL
    assert "TfxlaLaunch" in on["ops"] and "MatMul" not in on["ops"], on["ops"]
    assert on["err"] < TOL and on["grad_err"] < TOL
    assert on["stats"]["xla_calls_taken"] == 1 and on["stats"]["graphs_rewritten"] == 1, on["stats"]
    assert on["explain"].startswith("== __inference_body_") and "rewritten, 1 cluster(s)" in on["explain"]
    assert "TfxlaLaunch" not in after["ops"] and after["err"] < TOL and after["new_graphs"] == 0


def test_a_twin_that_cannot_be_made_leaves_the_call_to_xla_with_one_warning(child) -> None:
    failed = child["twin_failed"]
    assert failed["err"] < TOL and "TfxlaLaunch" not in failed["ops"]
    assert len(failed["warnings"]) == 1, failed["warnings"]
    assert "is left to TF's XLA: its twin failed: ZeroDivisionError" in failed["warnings"][0]


def test_must_compile_refuses_an_eager_jit_function_with_a_string_op_with_one_error(child) -> None:
    mc = child["must_compile"]
    assert mc["err"] < TOL and mc["text"] == mc["want"] and "TfxlaLaunch" not in mc["ops"]
    assert len(mc["errors"]) == 1 and "AsString" in mc["errors"][0], mc["errors"]


def test_explain_hooked_reports_the_clusters_and_what_stayed_in_tf(child) -> None:
    plain = child["plain"]
    assert "the hook has no record of" in child["unseen"] and "call it first" in child["unseen"]
    text = plain["text"]
    assert text.startswith("== __inference_lambda_") or text.startswith("== __inference_<lambda>_"), text[:80]
    assert "rewritten, 1 cluster(s)" in text and "Clustering summary: 1 cluster(s) built" in text
    assert "AsString" in text and "string tensors stay in TensorFlow" in text
    assert "HLO of cluster_0:" in text
    (graph,) = plain["doc"]["graphs"]
    assert graph["decision"] == "rewritten" and len(graph["clusters"]) == 1
    cluster = graph["clusters"][0]
    assert {"MatMul", "Relu", "Softmax"} <= set(cluster["op_types"]) and cluster["kernel_hash"]
    assert any(e["op"] == "AsString" and "string" in e["reason"] for e in graph["excluded"])


def test_stats_count_a_kernel_cache_hit_for_a_second_graph_with_the_same_cluster(child) -> None:
    before, after = child["plain"]["before"], child["plain"]["after"]
    assert after["graphs_rewritten"] - before["graphs_rewritten"] == 2
    assert after["clusters_compiled"] - before["clusters_compiled"] == 2
    assert after["kernel_cache_hits"] - before["kernel_cache_hits"] >= 1  # g's cluster is f's kernel
    assert after["seconds_compiling"] > before["seconds_compiling"]


def test_tfxla_tensorboard_jit_writes_a_saved_model_as_the_hook_compiles_it(child) -> None:
    pytest.importorskip("tensorboard")
    from pathlib import Path

    from tests.test_tensorboard import read_run

    assert child["cli"] == {"fixed": 0, "dynamic": 0, "on_after": False}
    logdir = Path(child["logdir"])
    assert {p.name for p in (logdir / "fixed").iterdir()} == {"original", "rewritten", "hlo"}
    rewritten, _ = read_run(str(logdir / "fixed" / "rewritten"))
    assert "TfxlaLaunch" in {n.op for n in rewritten.node}
    # A None batch: the CLI's call (--batch 1) runs the signature's static-shape twin (hook/static_shapes.py),
    # which the hook compiled; that record is what is written.
    assert {p.name for p in (logdir / "dynamic").iterdir()} == {"original", "rewritten", "hlo"}
    rewritten, _ = read_run(str(logdir / "dynamic" / "rewritten"))
    assert "TfxlaLaunch" in {n.op for n in rewritten.node}
    assert "MatMul" not in {n.op for n in rewritten.node}


def test_tensorboard_write_shows_a_hooked_function_as_it_shows_a_wrapped_one(child) -> None:
    pytest.importorskip("tensorboard")
    from tests.test_tensorboard import read_run

    runs = child["plain"]["runs"]
    assert set(runs) == {"plain/original", "plain/rewritten", "plain/hlo/cluster_0"}, runs
    original, texts = read_run(runs["plain/original"])
    clustered = {n.op for n in original.node if "_XlaCluster" in n.attr}
    assert {"MatMul", "Relu", "Softmax"} <= clustered
    assert any(n.op == "AsString" and "tfxla_left_out" in n.attr for n in original.node)
    assert "cluster_0" in texts["clustering"] and "HLO of cluster_0" in texts["explanation"]
    rewritten, _ = read_run(runs["plain/rewritten"])
    assert "TfxlaLaunch" in {n.op for n in rewritten.node} and "MatMul" not in {n.op for n in rewritten.node}
    _, hlo_texts = read_run(runs["plain/hlo/cluster_0"])
    assert "ENTRY" in hlo_texts["hlo_after_optimizations"] and hlo_texts["c_source"]
