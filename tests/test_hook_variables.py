"""Variables in a hooked function body (the plugin is process-wide: its scenarios run in a child, tests/hook_child.py).

Grappler hands the hook a function's variables as resource ``_Arg`` nodes; ``graph_passes.forward_variables``
forwards their values through the launch (writes of launch outputs, reads of the value just written), and
``hook.body.keep_alive`` keeps the writes TF's function runtime would otherwise prune. Checked against the
same calls without the switch, on fresh variables of the same values (in a child process): a ``v.assign_add`` / ``assign_sub``
chain read back in the same call, a Keras optimizer's ``apply_gradients`` (Adam: slots updated then read;
also called from a function returning nothing),
and a concrete function traced for two variables called with one variable twice (the two ``_Arg``s alias:
forwarding them as two variables would return the value before the second write).
Then the two rules on their own: which ``_Arg``s may alias (``forward_variables._may_alias``), and
``keep_alive`` on a small graph. Tolerance: float32 elementwise ops and one matmul, our kernels against TF's: 1e-5.
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

        @tf.function
        def no_result(x):  # no _Retval: the writes are tied to a control output
            step(x)

        losses = [float(first(step, x))] + [float(step(x)) for _ in range(2)]
        first(no_result, x)
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
        ran = len(seen)
        out[name] = dict(on=on, off=run(), ops=seen[ran - 1 - (name == "adam")], last=seen[ran - 1])
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
    assert len(on["slots"]) == len(off["slots"]) == 4 and on["slots"][0] == off["slots"][0] == 4
    for got, want in zip(on["slots"], off["slots"], strict=True):
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert "TfxlaLaunch" in ops and "AssignAddVariableOp" not in ops, ops
    assert "TfxlaLaunch" in runs["adam"]["last"], runs["adam"]["last"]  # the step called from one returning nothing


def test_one_variable_passed_as_two_arguments_gives_tfs_result(runs) -> None:
    on, off, ops = runs["alias"]["on"], runs["alias"]["off"], runs["alias"]["ops"]
    np.testing.assert_allclose(on["v"], off["v"], atol=TOL)
    np.testing.assert_allclose(on["y"], off["y"], atol=TOL)
    assert "TfxlaLaunch" in ops, ops  # compiled, with the variables' reads and writes left in TF


def _node(graph, name: str, op: str, inputs=(), **attrs):
    node = graph.node.add(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _resource_arg(graph, name: str, specified: str, dims=(4, 4)):
    import tensorflow as tf

    node = _node(graph, name, "_Arg")
    node.attr["T"].type = tf.resource.as_datatype_enum
    node.attr["_user_specified_name"].s = specified.encode()
    node.attr["_handle_dtypes"].list.type.append(tf.float32.as_datatype_enum)
    node.attr["_handle_shapes"].list.shape.add().CopyFrom(tf.TensorShape(list(dims)).as_proto())
    return node


def test_an_argument_of_a_captures_dtype_and_shape_may_alias_it_two_captures_do_not() -> None:
    import tensorflow as tf

    from graph_passes._graph import GraphIndex
    from graph_passes.forward_variables import _may_alias

    g = tf.compat.v1.GraphDef()
    _resource_arg(g, "unknown", "629")  # Keras's captures
    _resource_arg(g, "unknown_0", "631")
    _resource_arg(g, "other_shape", "other_shape", dims=(3,))  # an argument, but no capture is (3,)
    it = _node(g, "iterator", "_Arg")
    it.attr["T"].type = tf.resource.as_datatype_enum
    it.attr["_user_specified_name"].s = b"iterator"
    _node(g, "next", "IteratorGetNext", ["iterator"])
    assert _may_alias(GraphIndex(g.node)) == {}
    _resource_arg(g, "a", "a")  # a variable passed as an argument: it may be either capture
    aliased = _may_alias(GraphIndex(g.node))
    assert set(aliased) == {"unknown:0", "unknown_0:0", "a:0"}, aliased
    assert aliased["a:0"] == "_Arg 'a' may be the same variable as _Arg 'unknown' at run time"


def test_keep_alive_ties_a_write_no_fetch_needs_any_more_to_the_retvals() -> None:
    import tensorflow as tf

    from tfxla_plugin.hook.body import keep_alive

    original = tf.compat.v1.GraphDef()
    _resource_arg(original, "v", "resource")
    value = _node(original, "value", "Const")
    value.attr["dtype"].type = tf.float32.as_datatype_enum
    _node(original, "write", "AssignVariableOp", ["v", "value"]).attr["dtype"].type = tf.float32.as_datatype_enum
    _node(original, "read", "ReadVariableOp", ["v", "^write"]).attr["dtype"].type = tf.float32.as_datatype_enum
    # "unrun": no fetch needs it before or after, TF does not run it: it stays so
    _node(original, "unrun", "AssignVariableOp", ["v", "value"]).attr["dtype"].type = tf.float32.as_datatype_enum
    _node(original, "done", "NoOp", ["^read"])
    _node(original, "ret", "_Retval", ["value"])
    fetches = ["^done", "^ret"]
    # TF kept "write" through "read"; the forwarded read no longer orders after it
    rewritten = tf.compat.v1.GraphDef()
    rewritten.CopyFrom(original)
    read = next(n for n in rewritten.node if n.name == "read")
    read.op, read.input[:] = "Identity", ["value"]
    assert keep_alive(original, rewritten, fetches) == ["write"]
    assert list(rewritten.node[-1].input) == ["value", "^write"]
    assert keep_alive(original, rewritten, fetches) == []  # alive now
