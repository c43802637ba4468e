"""Hooked graphs whose launches read their variables themselves (graph_passes/launch_reads.py, run by
``hook.body.rewrite_body`` after the rewrite); the plugin is process-wide: the scenarios run in a child
(tests/hook_child.py).

- A Keras Sequential (Conv2D, Dense) ``predict_on_batch``: TF runs no ``ReadVariableOp`` at all (the reads
  that were the function's control outputs are ``NoOp``s waiting on the launch), every launch input that was
  a read is the variable's handle, and the result matches TF's (1e-5: a conv and a matmul, our kernels
  against TF's).
- A train step (SGD with momentum, ``apply_gradients`` in a ``tf.function``) over 3 steps: the launch reads
  variables that are then assigned (the writes must wait on it); losses, weights and the momentum slots
  match the same steps without the switch (1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.hook_child import run_child

TOL = 1e-5

SCRIPT = """
    from tfxla_plugin.hook import lookup as hook_lookup
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 8, 8, 3)).astype(np.float32)
    xs = rng.normal(size=(16, 6)).astype(np.float32)
    ys = rng.normal(size=(16, 2)).astype(np.float32)

    def predict():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), tf.keras.layers.Conv2D(4, 3, activation="relu"),
                                     tf.keras.layers.Flatten(), tf.keras.layers.Dense(5)])
        out, ops = ran_ops(model.predict_on_batch, x)
        graphs = [g.rewritten.graph_def for g in hook_lookup.hooked_graphs(model.predict_function)
                  if g.rewritten is not None]
        nodes = {n.name: n for g in graphs for n in g.node}
        launch_inputs = [nodes[i.split(":")[0]].op for g in graphs for n in g.node if n.op == "TfxlaLaunch"
                         for i in n.input[1:] if not i.startswith("^")]
        tin = [t for g in graphs for n in g.node if n.op == "TfxlaLaunch" for t in n.attr["Tin"].list.type]
        return dict(out=np.asarray(out).tolist(), ops=ops, launch_inputs=launch_inputs, tin=tin)

    def train():
        w = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2))
        b = tf.Variable(np.zeros(2, np.float32))
        opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
        opt.build([w, b])

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w) + b) - y))
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            return loss

        loss, ops = ran_ops(step, tf.constant(xs), tf.constant(ys))  # TF reports the graphs at the first call
        losses = [float(loss)] + [float(step(tf.constant(xs), tf.constant(ys))) for _ in range(2)]
        return dict(losses=losses, weights=[w.numpy().tolist(), b.numpy().tolist()],
                    slots=[v.numpy().tolist() for v in opt.variables], ops=ops)

    off = dict(predict=predict(), train=train())
    tfxla_plugin.enable()
    on = dict(predict=predict(), train=train())
    report(on=on, off=off, stats=str(tfxla_plugin.stats()))
"""


@pytest.fixture(scope="module")
def runs() -> dict:
    return run_child(SCRIPT)


def test_a_hooked_predict_runs_no_variable_reads_and_matches_tf(runs) -> None:
    on, off = runs["on"]["predict"], runs["off"]["predict"]
    assert "TfxlaLaunch" in on["ops"] and "ReadVariableOp" not in on["ops"], on["ops"]
    assert "ReadVariableOp" in off["ops"]
    assert on["launch_inputs"].count("_Arg") == 5  # the data and the 4 variables' handles
    assert "ReadVariableOp" not in on["launch_inputs"]
    assert on["tin"].count(20) == 4  # DT_RESOURCE
    np.testing.assert_allclose(on["out"], off["out"], rtol=TOL, atol=TOL)


def test_a_hooked_momentum_step_reading_variables_it_assigns_matches_tf(runs) -> None:
    on, off = runs["on"]["train"], runs["off"]["train"]
    assert "TfxlaLaunch" in on["ops"], runs["stats"]
    np.testing.assert_allclose(on["losses"], off["losses"], rtol=TOL, atol=TOL)
    for got, want in zip(on["weights"] + on["slots"], off["weights"] + off["slots"]):
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
