"""Keras models end to end under the Grappler hook (issue 17, item 3): functional and subclassed models,
BatchNormalization, Dropout, SGD with momentum, Adam and AdamW, a compiled ``accuracy`` metric, a
``tf.distribute.OneDeviceStrategy`` scope, and a callback reading the weights after every epoch. Each case
is trained with the switch on and again with it off (same seeds, same data) in one child process (the
plugin is process-wide: tests/hook_child.py); loss and accuracy per epoch, the weights the callback read,
the final weights (BatchNormalization's moving statistics included), ``evaluate`` and ``predict`` must
match, and ``stats()`` must show the train, evaluate and predict steps rewritten.

Data: 64 samples, batch 16, so every batch is full. One case has 60 (a partial last batch): Keras then
traces its steps with a ``None`` batch dim, which the hook does not compile yet (docs/hook.md "Shapes"):
only the static parts (the optimizer's update) run through our kernels, and the numbers still match.

Tolerances: float32, 3 epochs. Our kernels sum matmuls in another order than Eigen/oneDNN, so values differ
by float32 rounding: losses ``rtol=1e-5``, weights and predictions ``atol=1e-5`` (seen: ~1e-7). The
BatchNormalization model's Dense has no bias (as usual before a BatchNormalization): a bias there has a zero
gradient in exact arithmetic, and Adam scales the rounding noise of that gradient up to steps of its
learning rate, so with and without the hook the bias and the moving mean would drift apart by ~1e-3 with
no error in either.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tests.hook_child import run_child

LOSS_RTOL, ATOL = 1e-5, 1e-5

SCRIPT = """
    import contextlib
    from graph_passes.pipeline import summary_json
    from tfxla_plugin.hook import body

    # What the hook clustered and left in TF, per graph it rewrote (for the assertions on BatchNormalization
    # and Dropout below): the rewrite_body the callback calls, wrapped.
    graphs = []
    _rewrite_body = body.rewrite_body

    def _recording(*args, **kwargs):
        result = _rewrite_body(*args, **kwargs)
        if result.clusters:
            data = summary_json(result.analysis)
            graphs.append(dict(clustered=sorted({op for c in data["clusters"] for op in c["op_types"]}),
                               excluded=sorted({(e["op"], e["reason"]) for e in data["excluded"]})))
        return result

    body.rewrite_body = _recording

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 8)).astype(np.float32)
    Y = np.argmax(X @ rng.normal(size=(8, 3)), axis=1).astype(np.int32)
    SAMPLES = {"full": 64, "partial": 60}  # batches of 16: 60 leaves a partial last batch

    class Subclassed(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = tf.keras.layers.Dense(16, activation="relu")
            self.out = tf.keras.layers.Dense(3)

        def call(self, x):
            return self.out(self.hidden(x))

    def functional(middle=()):
        inp = tf.keras.Input((8,))
        h = inp
        for layer in middle:
            h = layer(h)
        return tf.keras.Model(inp, tf.keras.layers.Dense(3)(h))

    MODELS = {
        "functional": lambda: functional([tf.keras.layers.Dense(16, activation="relu")]),
        "subclassed": Subclassed,
        "batchnorm": lambda: functional([tf.keras.layers.Dense(16, use_bias=False),
                                         tf.keras.layers.BatchNormalization(), tf.keras.layers.Activation("relu")]),
        "dropout": lambda: functional([tf.keras.layers.Dense(16, activation="relu"),
                                       tf.keras.layers.Dropout(0.3, seed=1)]),
    }
    OPTIMIZERS = {
        "sgd_momentum": lambda: tf.keras.optimizers.SGD(0.05, momentum=0.9),
        "adam": lambda: tf.keras.optimizers.Adam(0.01),
        "adamw": lambda: tf.keras.optimizers.AdamW(0.01, weight_decay=0.01),
    }

    class ReadWeights(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_epoch_end(self, epoch, logs=None):
            self.seen.append([w.numpy().tolist() for w in self.model.weights])

    def train(model, optimizer, strategy, batches):
        x, y = X[:SAMPLES[batches]], Y[:SAMPLES[batches]]
        tf.keras.utils.set_random_seed(0)
        scope = tf.distribute.OneDeviceStrategy("/cpu:0").scope() if strategy else contextlib.nullcontext()
        with scope:
            m = MODELS[model]()
            m.compile(optimizer=OPTIMIZERS[optimizer](), metrics=["accuracy"],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        read = ReadWeights()
        history = m.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0, callbacks=[read])
        slots = [v.numpy().tolist() for v in m.optimizer.variables]  # before evaluate resets the metrics
        totals = [v.numpy().tolist() for metric in m.metrics for v in metric.variables]
        return dict(history=history.history, epochs=read.seen, names=[w.path for w in m.weights],
                    slots=slots, totals=totals,
                    weights=[w.numpy().tolist() for w in m.weights],
                    evaluate=m.evaluate(x, y, batch_size=16, verbose=0),
                    predict=m.predict(x, batch_size=16, verbose=0).tolist())

    def counted():
        s = tfxla_plugin.stats()
        return dict(vars(s), left_alone=dict(s.left_alone))

    out = {}
    for name, case in CASES.items():
        tfxla_plugin.reset_stats()
        del graphs[:]
        with tfxla_plugin.enabled():
            on = train(*case)
        stats, rewritten = counted(), list(graphs)
        off = train(*case)
        out[name] = dict(on=on, off=off, stats=stats, graphs=rewritten, after_off=counted())
    report(**out)
"""

CASES = {  # name: (model, optimizer, OneDeviceStrategy scope, full or partial batches)
    "functional-sgd_momentum": ("functional", "sgd_momentum", False, "full"),
    "subclassed-adamw": ("subclassed", "adamw", False, "full"),
    "batchnorm-adam": ("batchnorm", "adam", False, "full"),
    "dropout-adam": ("dropout", "adam", False, "full"),
    "functional-sgd_momentum-strategy": ("functional", "sgd_momentum", True, "full"),
    "functional-adam-partial_batch": ("functional", "adam", False, "partial"),
}
FULL = [name for name, case in CASES.items() if case[3] == "full"]


@pytest.fixture(scope="module")
def runs() -> dict:
    return run_child(f"CASES = {CASES!r}\n" + textwrap.dedent(SCRIPT), timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_fit_evaluate_predict_and_weights_between_epochs_match_tf(runs, case) -> None:
    on, off = runs[case]["on"], runs[case]["off"]
    assert set(on["history"]) == {"loss", "accuracy"}
    np.testing.assert_allclose(on["history"]["loss"], off["history"]["loss"], rtol=LOSS_RTOL)
    assert on["history"]["accuracy"] == off["history"]["accuracy"]
    assert len(on["epochs"]) == len(off["epochs"]) == 3  # what the callback read after each epoch
    for got_epoch, want_epoch in zip(on["epochs"], off["epochs"]):
        for got, want in zip(got_epoch, want_epoch, strict=True):
            np.testing.assert_allclose(got, want, atol=ATOL)
    assert len(on["weights"]) == len(off["weights"]) >= 4
    for got, want in zip(on["weights"], off["weights"]):
        np.testing.assert_allclose(got, want, atol=ATOL)
    assert on["epochs"][-1] == on["weights"]  # the callback read the live variables
    # the optimizer's iteration count and slots (momenta, Adam's moments), the metrics' totals and counts
    assert len(on["slots"]) == len(off["slots"]) >= 3 and len(on["totals"]) == len(off["totals"]) >= 4
    for got, want in zip(on["slots"] + on["totals"], off["slots"] + off["totals"], strict=True):
        np.testing.assert_allclose(got, want, rtol=LOSS_RTOL, atol=ATOL)
    np.testing.assert_allclose(on["evaluate"], off["evaluate"], rtol=LOSS_RTOL)
    np.testing.assert_allclose(on["predict"], off["predict"], atol=ATOL)


@pytest.mark.parametrize("case", FULL)
def test_the_train_evaluate_and_predict_steps_run_our_kernels(runs, case) -> None:
    stats = runs[case]["stats"]
    assert stats["graphs_rewritten"] >= 3 and stats["clusters_compiled"] >= 3, stats
    assert not any(reason.startswith("failed") for reason in stats["left_alone"]), stats
    assert runs[case]["after_off"] == stats  # the run with the switch off never reached the hook


def test_batch_normalization_trains_its_moving_statistics_in_our_kernels(runs) -> None:
    run = runs["batchnorm-adam"]
    names, on, off = run["on"]["names"], run["on"]["weights"], run["off"]["weights"]
    moving = [i for i, name in enumerate(names) if name.endswith(("moving_mean", "moving_variance"))]
    assert len(moving) == 2, names
    initial = [np.zeros(16), np.ones(16)]  # they moved during training, identically with and without the hook
    for i, start in zip(moving, initial):
        assert np.abs(np.asarray(on[i]) - start).max() > 1e-2
        np.testing.assert_allclose(on[i], off[i], atol=ATOL)
    train = run["graphs"][0]  # Keras traces the train step first (Keras 3: moments, not FusedBatchNormV3)
    assert {"Mean", "SquaredDifference", "Rsqrt", "RsqrtGrad"} <= set(train["clustered"]), train["clustered"]


def test_dropout_random_ops_compile_in_the_train_step(runs) -> None:
    # Keras 3's seeded Dropout draws its mask with stateless ops (key and counter from a seed variable the
    # step reads): they are compiled with the rest of the step, and the masks equal TF's (the losses match).
    train = runs["dropout-adam"]["graphs"][0]
    assert {"StatelessRandomGetKeyCounter", "StatelessRandomUniformV2", "GreaterEqual"} <= set(train["clustered"])


# What a rewritten Keras step leaves in TF: its variables, the data set iterator, control nodes and a few
# lone scalar ops (the metrics' bookkeeping).
LEFT_IN_TF = ("variable reads stay", "variable writes stay", "resource tensor", "variant tensor", "control-only node",
              "cluster too small", "no lowering registered for op type _Arg", "no lowering registered for op type _Retval")


@pytest.mark.parametrize("case", FULL)
def test_only_bookkeeping_is_left_in_tf(runs, case) -> None:
    for graph in runs[case]["graphs"]:
        left = [(op, reason) for op, reason in graph["excluded"] if not reason.startswith(LEFT_IN_TF)]
        assert not left, left
    assert set(runs[case]["stats"]["left_alone"]) == {"no cluster"}  # Keras's small graphs with nothing to compile


def test_a_partial_last_batch_compiles_only_the_static_parts(runs) -> None:
    # 60 samples in batches of 16: Keras traces its steps with a None batch dim. The optimizer's update
    # (static shapes) still compiles, so the train step is rewritten; the forward and backward pass stay in
    # TF, and the predict step has nothing static to compile (docs/hook.md "Shapes"). The numbers match TF
    # (test_fit_evaluate_predict_and_weights_between_epochs_match_tf above).
    run = runs["functional-adam-partial_batch"]
    train = run["graphs"][0]
    assert "MatMul" not in train["clustered"] and {"Sqrt", "RealDiv"} <= set(train["clustered"]), train
    assert any(op == "MatMul" and reason.startswith("dynamic shape") for op, reason in train["excluded"]), train
    assert run["stats"]["left_alone"].get("no cluster (dynamic shapes)", 0) >= 1, run["stats"]
