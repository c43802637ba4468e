"""Keras ``fit`` / ``evaluate`` / ``predict`` through the Grappler hook, with no code changes: the same
model trained with the switch on and off gives the same losses and weights, for ``model.compile(jit_compile=
True | False | "auto")`` (in a child process: the plugin is process-wide; tests/hook_child.py). With the
switch on, ``jit_compile=True`` steps are ours, not XLA's, and match plain TF.

Tolerances: float32 training, 3 epochs of Adam on a 2-layer MLP. Our kernels sum matmuls in another
order than Eigen/oneDNN, so values differ by float32 rounding, which Adam's normalisation can amplify
a little: losses ``rtol=1e-5``, weights and predictions ``atol=1e-5`` (seen: ~1e-7 and ~1e-8).
"""

from __future__ import annotations

import pytest

from tests.hook_child import run_child

LOSS_RTOL, ATOL = 1e-5, 1e-5
# Why nodes of a static-batch Keras train step stay in TF (``mark``'s reasons, names blanked, up to ': ' or ' ('):
KERAS_STEP_LEFT_IN_TF = {"resource tensor ''", "variable reads stay in TensorFlow", "variable writes stay in TensorFlow",
                         "variant tensor ''", "control-only node", "cluster too small"}

SCRIPT = """
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 8)).astype(np.float32)
    Y = (X @ rng.normal(size=(8, 2)) + 0.1 * rng.normal(size=(100, 2))).astype(np.float32)
    models = {}

    def run(jit_compile, samples=96):
        x, y = X[:samples], Y[:samples]
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                     tf.keras.layers.Dense(2)])
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"], jit_compile=jit_compile)
        history = model.fit(x, y, epochs=3, batch_size=32, shuffle=False, verbose=0)
        models[jit_compile, samples, tfxla_plugin.is_enabled()] = model
        # read before evaluate, which resets the metrics: what the train steps wrote
        slots = [v.numpy().tolist() for v in model.optimizer.variables]
        totals = [v.numpy().tolist() for m in model.metrics for v in m.variables]
        return dict(loss=history.history["loss"], weights=[w.numpy().tolist() for w in model.weights],
                    slots=slots, totals=totals,
                    evaluate=model.evaluate(x, y, verbose=0),
                    predict=model.predict(x, batch_size=32, verbose=0).tolist())

    out = {}
    # jit_compile=True first: TF's XLA must not run at all in this process (its "Compiled cluster using
    # XLA" line would show in stderr); it is compared with plain TF, jit_compile=False.
    for mode in (True, False, "auto"):
        tfxla_plugin.reset_stats()
        with tfxla_plugin.enabled():
            on = run(mode)
        out[str(mode)] = dict(on=on, stats=dict(vars(tfxla_plugin.stats()), left_alone=dict(
            tfxla_plugin.stats().left_alone)))
    # The "auto" model's train step, as TF runs it: its launches and why the other nodes stayed in TF; then a
    # second fit with the switch on, which must find every graph decided already (nothing rewritten again).
    import re
    from tfxla_plugin.hook import lookup as hook_lookup
    model = models["auto", 96, True]
    step = [g for g in hook_lookup.hooked_graphs(model.train_function) if g.decision == "rewritten"]
    out["train_step"] = dict(
        launches=[sum(n.op == "TfxlaLaunch" for n in g.rewritten.graph_def.node) for g in step],
        left=sorted({re.sub(r"'[^']*'", "''", reason).split(": ")[0].split(" (")[0]
                     for g in step for reason in g.analysis.excluded.values()}))
    before = dict(vars(tfxla_plugin.stats()), left_alone=dict(tfxla_plugin.stats().left_alone))
    with tfxla_plugin.enabled():
        model.fit(X[:96], Y[:96], epochs=1, batch_size=32, shuffle=False, verbose=0)
    after = dict(vars(tfxla_plugin.stats()), left_alone=dict(tfxla_plugin.stats().left_alone))
    out["refit"] = dict(before=before, after=after)
    for mode in (False, "auto"):
        out[str(mode)]["off"] = run(mode)
    out["True"]["off"] = out["False"]["off"]
    # What the hook did to the jit_compile=True model's steps: explain and TensorBoard.
    import os
    import tfxla_plugin.explain
    import tfxla_plugin.tensorboard as tb
    model = models[True, 96, True]
    out["explained"] = [(g["function"], g["decision"], len(g.get("clusters", [])), g["calls_taken_from_xla"])
                        for g in tfxla_plugin.explain.explain_hooked_json(model)["graphs"]]
    out["tb_runs"] = sorted(tb.write(model, logdir=os.environ["HOOK_LOGDIR"], name="mlp").runs)
    # A partial last batch (100 samples in batches of 32): Keras traces its steps with a None batch dim.
    tfxla_plugin.reset_stats()
    with tfxla_plugin.enabled():
        partial = run("auto", samples=100)
    out["partial"] = dict(on=partial, off=run("auto", samples=100), stats=dict(
        vars(tfxla_plugin.stats()), left_alone=dict(tfxla_plugin.stats().left_alone),
        left_in_tf=dict(tfxla_plugin.stats().left_in_tf)))
    out["compiled_lines"] = logged("INFO", "compiled cluster")
    out["rewrote_lines"] = logged("INFO", "tfxla hook: rewrote")
    report(**out)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    return run_child(SCRIPT, env={"TF_CPP_MIN_LOG_LEVEL": "0", "HOOK_LOGDIR": str(tmp_path_factory.mktemp("tb"))})


@pytest.mark.parametrize("mode", ["True", "False", "auto"])
def test_fit_evaluate_predict_match_tf_with_the_switch_on(runs, mode) -> None:
    import numpy as np

    off, on, stats = runs[mode]["off"], runs[mode]["on"], runs[mode]["stats"]
    np.testing.assert_allclose(on["loss"], off["loss"], rtol=LOSS_RTOL)
    assert len(on["weights"]) == len(off["weights"]) == 4
    for got, want in zip(on["weights"], off["weights"]):
        np.testing.assert_allclose(got, want, atol=ATOL)
    # Adam's iteration count, momenta and second moments, and the metrics' totals and counts, which the
    # launch computes and TF writes back (hook.body.keep_alive keeps those writes running)
    assert len(on["slots"]) == len(off["slots"]) == 2 + 2 * 4 and len(on["totals"]) == len(off["totals"]) >= 4
    assert on["slots"][0] == off["slots"][0] == 9  # 3 steps an epoch, 3 epochs
    for got, want in zip(on["slots"] + on["totals"], off["slots"] + off["totals"], strict=True):
        np.testing.assert_allclose(got, want, rtol=LOSS_RTOL, atol=ATOL)
    assert min(abs(t) for t in on["totals"]) > 0, on["totals"]
    np.testing.assert_allclose(on["evaluate"], off["evaluate"], rtol=LOSS_RTOL)
    np.testing.assert_allclose(on["predict"], off["predict"], atol=ATOL)
    # The train, evaluate and predict steps each became a rewritten graph.
    assert stats["graphs_rewritten"] >= 3 and stats["clusters_compiled"] >= 3, stats
    assert not any(reason.startswith("failed") for reason in stats["left_alone"]), stats


def test_jit_compile_true_trains_through_our_kernels_not_xla(runs) -> None:
    assert "using XLA" not in runs["stderr"]
    stats = runs["True"]["stats"]
    assert stats["graphs_rewritten"] >= 3 and stats["xla_calls_taken"] >= 3, stats  # train, evaluate, predict


def test_explain_and_tensorboard_show_what_the_hook_did_to_the_keras_steps(runs) -> None:
    # jit_compile=True: Keras's outer step calls the jit_compile=True one_step_on_data; the hook releases that
    # call from XLA in the outer graph and compiles the inner body on its own. Both are listed, per step.
    explained = runs["explained"]
    names = [name for name, *_ in explained]
    assert any(name.startswith("__inference_one_step_on_data_") for name in names), explained
    assert any(name.startswith("__inference_multi_step_on_iterator_") for name in names), explained
    assert sum(decision == "rewritten" and clusters >= 1 for _, decision, clusters, _ in explained) >= 3, explained
    assert sum(len(taken) for *_, taken in explained) >= 3, explained  # train, evaluate, predict
    tb_runs = runs["tb_runs"]
    for name, decision, _, _ in explained:
        run = f"mlp/{name.strip('_')}"
        assert f"{run}/original" in tb_runs, (run, tb_runs)
        assert (f"{run}/rewritten" in tb_runs) == (decision == "rewritten"), (run, tb_runs)


def test_a_static_batch_train_step_is_one_launch(runs) -> None:
    # What a fit step costs: one TfxlaLaunch per step, and around it only what a step must keep in TF (the
    # iterator, variable reads and writes, the metrics' scalar bookkeeping: clusters below
    # --min_cluster_size); no node for want of a lowering or a static shape.
    step = runs["train_step"]
    assert set(step["left"]) <= KERAS_STEP_LEFT_IN_TF, step
    assert step["launches"] == [1], step


def test_a_second_fit_sees_rewrites_and_compiles_nothing(runs) -> None:
    # A second fit of the same model: its step and tf.data functions are decided already; nothing is seen,
    # rewritten or compiled again (seconds_compiling may grow by the digests of the graphs handed over).
    before, after = runs["refit"]["before"], runs["refit"]["after"]
    assert before["graphs_rewritten"] >= 3, before
    for key in ("graphs_seen", "graphs_rewritten", "clusters_compiled", "kernel_cache_hits", "left_alone"):
        assert after[key] == before[key], (key, before, after)


def test_a_partial_last_batch_trains_as_tf_and_stats_say_what_stayed_in_tf(runs) -> None:
    # 100 samples in batches of 32: the steps are traced with a None batch dim, so only their static parts
    # compile (the optimizer's update); the rest runs in TF (docs/hook.md "Shapes"), with the same numbers.
    import numpy as np

    on, off, stats = runs["partial"]["on"], runs["partial"]["off"], runs["partial"]["stats"]
    np.testing.assert_allclose(on["loss"], off["loss"], rtol=LOSS_RTOL)
    for got, want in zip(on["weights"], off["weights"], strict=True):
        np.testing.assert_allclose(got, want, atol=ATOL)
    np.testing.assert_allclose(on["evaluate"], off["evaluate"], rtol=LOSS_RTOL)
    np.testing.assert_allclose(on["predict"], off["predict"], atol=ATOL)
    assert stats["graphs_rewritten"] >= 1 and stats["left_in_tf"].get("dynamic shapes", 0) >= 1, stats
    assert stats["left_alone"].get("no cluster (dynamic shapes)", 0) >= 1, stats


def test_the_logger_reports_the_compiled_clusters(runs) -> None:
    assert runs["compiled_lines"] and runs["rewrote_lines"]
    assert any("cluster(s) compiled" in line and "compute nodes clustered" in line for line in runs["rewrote_lines"])
