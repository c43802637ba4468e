"""The hook's Python side in-process, without loading the plugin: ``hook.body.rewrite_body`` on
function bodies in the form Grappler hands over (``_Arg``/``_Retval`` nodes, resource ``_Arg``s with or
without handle attrs, called functions as signatures only), ``release_from_xla``, ``callees``, the
order-independent ``graph_digest``, and the records ``explain_hooked`` finds by function name
(``state.keep``, ``hook.lookup``). Numbers against TF are in tests/test_hook_function.py (a child
process, where the plugin runs these graphs)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

import tfxla_plugin  # noqa: E402,F401  (registers the TfxlaLaunch op)
from tfxla_plugin.flags import Flags  # noqa: E402
from tfxla_plugin.explain import explain_hooked, explain_hooked_json  # noqa: E402
from tfxla_plugin.hook import body, callback, callees, eager_jit, state  # noqa: E402

FLAGS = Flags(min_cluster_size=2)


@pytest.fixture(autouse=True)
def _forget_callees():
    yield
    callees._notes.clear()  # what callers noted is process state: keep each test to its own


def function_body(fn, *specs, handle_shapes: bool = True):
    """The GraphDef of ``tf.function(fn)`` traced at ``specs`` in function-body form: each input an
    ``_Arg`` (``_output_shapes``, or for a variable ``_handle_shapes``/``_handle_dtypes`` unless not
    ``handle_shapes``), each output a ``_Retval``; plus the names Grappler would preserve."""
    from graph_passes.pipeline import resource_shapes_of

    cf = tf.function(fn).get_concrete_function(*specs)
    gd = cf.graph.as_graph_def()
    nodes = {n.name: n for n in gd.node}
    resources = resource_shapes_of(cf)
    for k, t in enumerate(cf.graph.inputs):
        node = nodes[t.op.name]
        node.op = "_Arg"
        node.ClearField("attr")
        node.attr["T"].type = t.dtype.as_datatype_enum
        node.attr["index"].i = k
        if t.dtype == tf.resource:
            if handle_shapes:
                dtype, dims = resources[t.op.name]
                node.attr["_handle_dtypes"].list.type.append(dtype)
                node.attr["_handle_shapes"].list.shape.add().CopyFrom(tf.TensorShape(list(dims)).as_proto())
        else:
            node.attr["_output_shapes"].list.shape.add().CopyFrom(t.shape.as_proto())
    for k, t in enumerate(cf.graph.outputs):
        ret = gd.node.add(name=f"out{k}_RetVal", op="_Retval", input=[t.name])
        ret.attr["T"].type = t.dtype.as_datatype_enum
        ret.attr["index"].i = k
    return gd, [n.name for n in gd.node if n.op == "_Retval"]


def ops(graph_def) -> list[str]:
    return sorted(n.op for n in graph_def.node)


V = tf.Variable(tf.ones([4, 3]))


def dense(x):
    return tf.nn.relu(tf.matmul(x, V) + 1.0) * 2.0


def test_a_static_body_becomes_one_launch_between_its_args_and_retvals() -> None:
    gd, preserve = function_body(dense, tf.TensorSpec([2, 4]))
    result = body.rewrite_body(gd, preserve, FLAGS)
    assert result.reason == "" and len(result.clusters) == 1
    got = ops(result.graph_def)
    assert got.count("TfxlaLaunch") == 1 and got.count("_Arg") == 2 and got.count("_Retval") == 1, got
    assert not {"MatMul", "AddV2", "Relu", "Mul"} & set(got), got
    launch = next(n for n in result.graph_def.node if n.op == "TfxlaLaunch")
    assert launch.device == next(n for n in gd.node if n.op == "MatMul").device
    assert callback._ours(result.graph_def) is False  # only what the callback itself returned counts as ours


def test_dynamic_shapes_already_compiled_and_non_bodies_are_left_alone_with_a_reason() -> None:
    gd, preserve = function_body(dense, tf.TensorSpec([None, 4]))
    assert body.rewrite_body(gd, preserve, FLAGS).reason == "no cluster (dynamic shapes)"
    static, preserve = function_body(dense, tf.TensorSpec([2, 4]))
    rewritten = body.rewrite_body(static, preserve, FLAGS).graph_def
    assert body.rewrite_body(rewritten, preserve, FLAGS).reason == "already holds TfxlaLaunch nodes"
    plain = tf.function(dense).get_concrete_function(tf.TensorSpec([2, 4])).graph.as_graph_def()
    assert body.rewrite_body(plain, [], FLAGS).reason == "not a function body (no _Arg or _Retval node)"


def test_must_compile_refuses_a_jit_callee_with_a_string_op_and_names_it() -> None:
    gd, preserve = function_body(lambda x: (dense(x), tf.strings.as_string(x)), tf.TensorSpec([2, 4]))
    assert body.rewrite_body(gd, preserve, FLAGS, must_compile=True).graph_def is not None  # not a jit callee
    outer = _caller_of(gd, jit=True)
    callees.note(outer, [n.name for n in outer.node if n.op == "StatefulPartitionedCall"])
    result = body.rewrite_body(gd, preserve, FLAGS, must_compile=True)
    assert result.graph_def is None and result.reason == "must-compile: unsupported nodes"
    assert "AsString" in result.detail and "string tensors stay in TensorFlow" in result.detail


def _caller_of(callee_body, *, jit: bool, handle_shapes_from=None):
    """A caller body calling a stub with ``callee_body``'s signature (as Grappler lists a call it does
    not inline), its resource args carrying the handle attrs of ``handle_shapes_from`` (a body)."""
    g = tf.compat.v1.GraphDef()
    args = sorted((n for n in callee_body.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    rets = sorted((n for n in callee_body.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    shaped = {n.name: n for n in (handle_shapes_from.node if handle_shapes_from is not None else ())}
    fdef = g.library.function.add()
    fdef.signature.name = "__inference_callee_1"
    call = tf.compat.v1.NodeDef(name="StatefulPartitionedCall", op="StatefulPartitionedCall")
    for a in args:
        fdef.signature.input_arg.add(name=a.name, type=a.attr["T"].type)
        outer_arg = g.node.add()
        outer_arg.CopyFrom(shaped.get(a.name, a))
        outer_arg.name = f"outer_{a.name}"
        call.input.append(outer_arg.name)
        call.attr["Tin"].list.type.append(a.attr["T"].type)
    for k, r in enumerate(rets):
        fdef.signature.output_arg.add(name=f"out{k}", type=r.attr["T"].type)
        call.attr["Tout"].list.type.append(r.attr["T"].type)
        ret = g.node.add(name=f"outer_out{k}_RetVal", op="_Retval", input=[f"StatefulPartitionedCall:{k}"])
        ret.attr["T"].type = r.attr["T"].type
        ret.attr["index"].i = k
    call.attr["f"].func.name = fdef.signature.name
    if jit:
        call.attr[body.XLA_MUST_COMPILE].b = True
    g.node.append(call)
    return g


def test_a_call_tf_would_send_to_xla_is_released_and_the_callee_gets_its_variable_shapes() -> None:
    bare, preserve = function_body(dense, tf.TensorSpec([3, 4]), handle_shapes=False)
    assert body.rewrite_body(bare, preserve, FLAGS).reason == "no cluster (dynamic shapes)"  # the read's shape
    shaped, _ = function_body(dense, tf.TensorSpec([3, 4]))
    outer = _caller_of(bare, jit=True, handle_shapes_from=shaped)
    before = outer.SerializeToString()
    result = body.rewrite_body(outer, [n.name for n in outer.node if n.op == "_Retval"], FLAGS)
    assert outer.SerializeToString() == before  # the input is never changed
    assert result.released == ["StatefulPartitionedCall"] and result.clusters == []
    call = next(n for n in result.graph_def.node if n.op == "StatefulPartitionedCall")
    assert call.attr[body.XLA_MUST_COMPILE].b is False  # the stub is neither inlined nor clustered
    callee = callees.lookup(bare)
    assert callee is not None and callee.jit and set(callee.handles) == {1}
    inner = body.rewrite_body(bare, preserve, FLAGS)
    assert len(inner.clusters) == 1 and "TfxlaLaunch" in ops(inner.graph_def)
    arg = next(n for n in inner.graph_def.node if n.op == "_Arg" and n.attr["T"].type == tf.resource.as_datatype_enum)
    assert list(arg.attr["_handle_shapes"].list.shape[0].dim) == list(tf.TensorShape([4, 3]).as_proto().dim)


def test_the_graph_digest_ignores_node_order_only() -> None:
    gd, _ = function_body(dense, tf.TensorSpec([2, 4]))
    shuffled = tf.compat.v1.GraphDef()
    shuffled.CopyFrom(gd)
    del shuffled.node[:]
    shuffled.node.extend(reversed(gd.node))
    assert callback.graph_digest(shuffled) == callback.graph_digest(gd)
    shuffled.node[0].name += "_x"
    assert callback.graph_digest(shuffled) != callback.graph_digest(gd)


def test_the_decision_memo_is_bounded_by_entries_and_by_bytes(monkeypatch) -> None:
    monkeypatch.setattr(callback, "_memo", type(callback._memo)())
    monkeypatch.setattr(callback, "_memo_bytes", 0)
    monkeypatch.setattr(callback, "MEMO_SIZE", 3)
    monkeypatch.setattr(callback, "MEMO_BYTES", 10)
    for k in range(4):
        callback._remember(f"left alone {k}", None)
    assert list(callback._memo) == ["left alone 1", "left alone 2", "left alone 3"]
    callback._remember("rewritten a", b"x" * 6)
    callback._remember("rewritten b", b"y" * 6)  # 12 bytes: the oldest entries go until 6 remain
    assert list(callback._memo) == ["rewritten b"] and callback._memo_bytes == 6


def test_explain_hooked_finds_the_record_kept_under_the_function_name(monkeypatch) -> None:
    monkeypatch.setattr(state, "_GRAPHS", type(state._GRAPHS)())
    spec = tf.TensorSpec([2, 4])
    fn = tf.function(lambda x: (dense(x), tf.strings.as_string(x)))
    cf = fn.get_concrete_function(spec)
    with pytest.raises(LookupError, match="the hook has no record of .*call it first"):
        explain_hooked(fn, spec)
    gd, preserve = function_body(fn.python_function, spec)
    result = body.rewrite_body(gd, preserve, FLAGS)
    state.keep(cf.name.decode(), callback._hooked(cf.name.decode(), result, 0.25))

    def step(x):  # a Python function closing over the tf.function, as Keras's train_function does
        return fn(x)

    texts = [explain_hooked(fn, spec), explain_hooked(fn), explain_hooked(cf), explain_hooked(step)]
    assert len(set(texts)) == 1, texts
    header, *rest = texts[0].splitlines()
    assert header == f"== {cf.name.decode()}: rewritten, 1 cluster(s), 0.25 s"
    assert rest[0].startswith("Clustering summary: 1 cluster(s) built") and "string tensors stay" in texts[0]
    (graph,) = explain_hooked_json(fn)["graphs"]
    assert graph["decision"] == state.REWRITTEN and graph["clusters"][0]["kernel_hash"] == result.clusters[0].kernel_hash
    with pytest.raises(TypeError, match="expected a tf.function, a ConcreteFunction or a Keras model"):
        explain_hooked(lambda x: x)


def test_records_are_bounded_by_count_and_size_and_a_twin_name_maps_to_its_function(monkeypatch) -> None:
    monkeypatch.setattr(state, "_GRAPHS", type(state._GRAPHS)())
    monkeypatch.setattr(state, "_graph_bytes", 0)
    monkeypatch.setattr(state, "MAX_GRAPHS", 2)
    for k in range(3):
        state.keep(f"__inference_f_{k}", state.HookedGraph(f"__inference_f_{k}", "no cluster"))
    assert state.hooked("__inference_f_0") is None and state.hooked("__inference_f_2").decision == "no cluster"
    gd, preserve = function_body(dense, tf.TensorSpec([2, 4]))
    big = callback._hooked("__inference_big_1", body.rewrite_body(gd, preserve, FLAGS), 0.1)
    assert big.size > gd.ByteSize()
    monkeypatch.setattr(state, "MAX_GRAPHS", 10)
    monkeypatch.setattr(state, "MAX_GRAPH_BYTES", big.size + 1)
    state.keep("__inference_big_1", big)
    state.keep("__inference_big_2", big)  # over the byte budget: the older records go, the newest stays
    assert list(state._GRAPHS) == ["__inference_big_2"] and state._graph_bytes == big.size
    assert eager_jit.original_name(eager_jit.twin_name(b"__inference_g_7")) == ("__inference_g_7", True)
    assert eager_jit.original_name("__inference_g_7") == ("__inference_g_7", False)
