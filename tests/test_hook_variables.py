"""Variables in a hooked function body (one child process: the plugin is process-wide, tests/hook_child.py).

Grappler hands the hook a function's variables as resource ``_Arg`` nodes; ``graph_passes.forward_variables``
forwards their values through the launch (writes of launch outputs, reads of the value just written), and
``hook.body.keep_alive`` keeps the writes TF's function runtime would otherwise prune. Checked against the
same calls without the switch, on fresh variables of the same values: a ``v.assign_add`` / ``assign_sub``
chain read back in the same call, a Keras optimizer's ``apply_gradients`` (Adam: slots updated then read),
and a concrete function traced for two variables called with one variable twice (the two ``_Arg``s alias:
forwarding them as two variables would return the value before the second write).
Tolerance: float32 elementwise ops and one matmul, our kernels against TF's: 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.hook_child import run_child

TOL = 1e-5

SCRIPT = """
    x = tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 10)
    seen = []  # the op types TF ran for each function's first call (after Grappler)

    def first(fn, *args):
        y, ops = ran_ops(fn, *args)
        seen.append(ops)
        return y

    def chain():
        v = tf.Variable(tf.ones((4, 4)))
        m = tf.Variable(tf.zeros((4, 4)))

        @tf.function
        def f(x):
            m.assign_add(tf.tanh(x) * 2.0 + 1.0)
            v.assign_sub(tf.sin(m) * tf.exp(x * 0.1))
            return tf.reduce_sum(v * m) + 1.0

        results = [float(first(f, x))] + [float(f(x)) for _ in range(2)]
        return dict(results=results, v=v.numpy().tolist(), m=m.numpy().tolist())

    def adam():
        w = tf.Variable(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4))
        opt = tf.keras.optimizers.Adam(0.1)
        opt.build([w])

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.matmul(x, w) - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            return loss

        losses = [float(first(step, x))] + [float(step(x)) for _ in range(2)]
        return dict(losses=losses, w=w.numpy().tolist(), slots=[s.numpy().tolist() for s in opt.variables])

    def alias():
        v, u = tf.Variable(tf.ones((4, 4))), tf.Variable(tf.ones((4, 4)))

        @tf.function
        def g(a, b, x):
            first = a.assign_add(tf.tanh(x) + 1.0)
            with tf.control_dependencies([first]):
                second = b.assign(tf.exp(b.read_value() * 0.5) * 2.0 - 1.0)
            with tf.control_dependencies([second]):
                return tf.sin(a.read_value()) * 3.0 + 1.0

        cf = g.get_concrete_function(v, u, x)  # traced for two variables
        y = first(cf, v, v, x)  # called with one twice
        return dict(y=y.numpy().tolist(), v=v.numpy().tolist())

    out = {}
    for name, run in (("chain", chain), ("adam", adam), ("alias", alias)):
        with tfxla_plugin.enabled():
            on = run()
        out[name] = dict(on=on, off=run(), ops=seen[-2])
    out["stats"] = vars(tfxla_plugin.stats()).copy()
    out["stats"]["left_alone"] = dict(out["stats"]["left_alone"])
    report(**out)
"""


@pytest.fixture(scope="module")
def runs() -> dict:
    return run_child(SCRIPT)


def test_assign_add_and_sub_read_back_in_the_same_call_match_tf(runs) -> None:
    on, off, ops = runs["chain"]["on"], runs["chain"]["off"], runs["chain"]["ops"]
    np.testing.assert_allclose(on["results"], off["results"], rtol=TOL)
    np.testing.assert_allclose(on["v"], off["v"], atol=TOL)
    np.testing.assert_allclose(on["m"], off["m"], atol=TOL)
    # forwarded: the add/sub is computed in the launch, TF only stores it
    assert "TfxlaLaunch" in ops and "AssignAddVariableOp" not in ops and "AssignSubVariableOp" not in ops, ops


def test_an_adam_step_updates_weights_and_slots_as_tf(runs) -> None:
    on, off, ops = runs["adam"]["on"], runs["adam"]["off"], runs["adam"]["ops"]
    np.testing.assert_allclose(on["losses"], off["losses"], rtol=TOL)
    np.testing.assert_allclose(on["w"], off["w"], atol=TOL)
    assert len(on["slots"]) == len(off["slots"]) == 4 and on["slots"][0] == off["slots"][0] == 3
    for got, want in zip(on["slots"], off["slots"], strict=True):
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert "TfxlaLaunch" in ops and "AssignAddVariableOp" not in ops, ops


def test_one_variable_passed_as_two_arguments_gives_tfs_result(runs) -> None:
    on, off, ops = runs["alias"]["on"], runs["alias"]["off"], runs["alias"]["ops"]
    np.testing.assert_allclose(on["v"], off["v"], atol=TOL)
    np.testing.assert_allclose(on["y"], off["y"], atol=TOL)
    assert "TfxlaLaunch" in ops, ops  # compiled, with the variables' reads and writes left in TF
