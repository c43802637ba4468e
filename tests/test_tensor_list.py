"""TensorList / TensorArray lowerings (hlo/lowering/ops/tensor_list.py, hlo/lowering/lists.py) and the
variant rule of clustering (graph_passes/mark.py, cluster.py), against TF eager.

1. A ``tf.TensorArray`` loop (unstack, read, write, stack, gather, scatter, split, size) compiles with
   ``jit_compile=True`` into one cluster holding the ``While``; results equal TF's exactly (float32
   copies and one add per element, no rounding differences).
2. A loop whose trip count depends on computed values (the condition reads the loop state) compiles;
   the slots it never writes stack as zeros, as in TF. A list through ``tf.cond`` compiles too.
3. The list ops tf.TensorArray does not emit: ``EmptyTensorList`` with ``max_num_elements``,
   ``PushBack``/``PopBack``, ``Length``, ``ElementShape``, ``TensorListScatterV2``, ``FromTensor``/``GetItem``.
4. A TensorArray without ``element_shape`` written in a loop gets the shape the loop writes
   (graph_passes/list_shapes.py) and compiles. Refusals: a TensorArray whose items' shape is not static
   entering a loop, an unbounded ``EmptyTensorList``:
   ``jit_compile=True`` raises ``UnsupportedGraphError`` naming the node and why; ``"auto"`` leaves the
   list's ops (and the loop) in TensorFlow and the result is still TF's.
5. A list that would leave its cluster (a consumer of the list stays in TF) keeps all its ops in TF.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import gen_list_ops, list_ops

import tfxla_plugin
from tfxla_plugin.errors import UnsupportedGraphError

RNG = np.random.default_rng(0)


def _compiled(fn, *args, jit_compile=True):
    f = tfxla_plugin.function(fn, jit_compile=jit_compile)
    tensors = [tf.constant(a) for a in args]
    return f, f.compiled_graph(*tensors), [t.numpy() for t in tf.nest.flatten(f(*tensors))]


def _clustered_ops(compiled) -> dict[str, bool]:
    """op type -> whether every node of that type is in a cluster (TensorList ops and loops only;
    ``StatelessWhile`` counts as ``While``)."""
    out: dict[str, bool] = {}
    for n in compiled.analysis.graph_def.node:
        if n.op.startswith("TensorList") or n.op in ("While", "StatelessWhile", "EmptyTensorList"):
            op = "While" if n.op == "StatelessWhile" else n.op
            out[op] = out.get(op, True) and compiled.analysis.cluster_of(n.name) is not None
    return out


def _want(fn, *args):
    return [t.numpy() for t in tf.nest.flatten(fn(*[tf.constant(a) for a in args]))]


def _same(got, want):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape)
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


# --- 1. a TensorArray loop -----------------------------------------------------------------------

def tensor_array_loop(x, idx):
    n = x.shape[0]
    xs = tf.TensorArray(tf.float32, size=n, element_shape=x.shape[1:]).unstack(x)
    out = tf.TensorArray(tf.float32, size=n, element_shape=x.shape[1:])
    acc = tf.zeros(x.shape[1:])
    for i in tf.range(n):
        acc = acc + xs.read(i)
        out = out.write(i, acc * 2.0)
    picked = out.gather(idx)
    scattered = tf.TensorArray(tf.float32, size=n, element_shape=x.shape[1:]).scatter(idx, picked)
    pieces = tf.TensorArray(tf.float32, size=3, element_shape=[2]).split(tf.reshape(x[:, 0], [6]), [2, 2, 2])
    return out.stack(), picked, scattered.stack(), out.size(), acc, pieces.stack()


def test_tensor_array_loop_compiles_into_one_cluster():
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([4, 0, 2], np.int32)
    _, compiled, got = _compiled(tensor_array_loop, x, idx)
    assert len(compiled.clusters) == 1
    clustered = _clustered_ops(compiled)
    assert clustered.get("While") is True, clustered
    assert {"TensorListFromTensor", "TensorListReserve", "TensorListStack", "TensorListGather",
            "TensorListScatterIntoExistingList", "TensorListSplit"} <= {op for op, ok in clustered.items() if ok}
    _same(got, _want(tensor_array_loop, x, idx))


# --- 2. a data-dependent trip count --------------------------------------------------------------

def doubling(x):
    out = tf.TensorArray(tf.float32, size=8, element_shape=x.shape)
    i = tf.constant(0)
    while i < 8 and tf.reduce_max(x) < 50.0:
        x = x * 2.0
        out = out.write(i, x)
        i += 1
    return out.stack(), i


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_loop_with_computed_condition(scale):
    x = (scale * np.array([0.5, 1.5, 1.0])).astype(np.float32)
    _, compiled, got = _compiled(doubling, x)
    assert _clustered_ops(compiled).get("While") is True
    _same(got, _want(doubling, x))
    assert int(got[1]) == (6 if scale == 1.0 else 1)  # the trip count came from the data


def branch_writes(x, flag):
    ta = tf.TensorArray(tf.float32, size=2, element_shape=x.shape)
    ta = tf.cond(flag, lambda: ta.write(0, x * 3.0), lambda: ta.write(1, -x))
    return ta.read(0), ta.read(1)  # (TF's shape inference loses a stack's length after the cond)


@pytest.mark.parametrize("flag", [True, False])
def test_list_through_a_branch(flag):
    x = np.array([1.0, -2.0, 0.5], np.float32)
    _, compiled, got = _compiled(branch_writes, x, np.bool_(flag))
    assert len(compiled.clusters) == 1
    assert any(n.op in ("If", "StatelessIf") and compiled.analysis.cluster_of(n.name)
               for n in compiled.analysis.graph_def.node)
    _same(got, _want(branch_writes, x, np.bool_(flag)))


# --- 3. the other list ops -----------------------------------------------------------------------

def push_pop(x):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=tf.float32, max_num_elements=4)
    for k in range(3):
        lst = list_ops.tensor_list_push_back(lst, x[k] * float(k + 1))
    length = list_ops.tensor_list_length(lst)
    shape = list_ops.tensor_list_element_shape(lst, shape_type=tf.int32)
    lst, last = list_ops.tensor_list_pop_back(lst, element_dtype=tf.float32)
    stacked = list_ops.tensor_list_stack(lst, element_dtype=tf.float32, num_elements=2)
    from_tensor = list_ops.tensor_list_from_tensor(x, element_shape=[3])
    item = list_ops.tensor_list_get_item(from_tensor, 1, element_dtype=tf.float32)
    scattered = gen_list_ops.tensor_list_scatter_v2(x[:2], [3, 1], element_shape=[3], num_elements=5)
    return last, stacked, length, shape, item, list_ops.tensor_list_stack(scattered, element_dtype=tf.float32,
                                                                          num_elements=5)


def test_push_pop_length_shape_scatter():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    _, compiled, got = _compiled(push_pop, x)
    assert len(compiled.clusters) == 1
    _same(got, _want(push_pop, x))


# --- 4. refusals -----------------------------------------------------------------------------------

def unknown_shape(x):
    out = tf.TensorArray(tf.float32, size=4)  # no element_shape, and the items' shape depends on the data
    for i in tf.range(4):
        out = out.write(i, tf.boolean_mask(x, x > 0.0) * tf.cast(i, tf.float32))
    return out.stack()


def unbounded(x):
    lst = list_ops.empty_tensor_list(element_shape=[3], element_dtype=tf.float32)  # max_num_elements -1
    lst = list_ops.tensor_list_push_back(lst, x * 2.0)
    return list_ops.tensor_list_stack(lst, element_dtype=tf.float32) + 1.0


def no_element_shape(x):
    out = tf.TensorArray(tf.float32, size=4)
    for i in tf.range(4):
        out = out.write(i, x * tf.cast(i, tf.float32))
    return out.stack()


def test_element_shape_from_the_loop_writes():
    x = np.array([1.0, -2.0, 3.0], np.float32)
    _, compiled, got = _compiled(no_element_shape, x)
    assert len(compiled.clusters) == 1 and _clustered_ops(compiled)["While"]
    _same(got, _want(no_element_shape, x))


@pytest.mark.parametrize("fn, node_op, why", [
    (unknown_shape, "TensorListReserve", "has an unknown element shape and enters"),
    (unbounded, "EmptyTensorList", "has no max_num_elements (an unbounded list)"),
])
def test_refused_lists_stay_in_tensorflow(fn, node_op, why):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    with pytest.raises(UnsupportedGraphError) as info:
        tfxla_plugin.function(fn, jit_compile=True)(tf.constant(x))
    line = next(l for l in str(info.value).splitlines() if l.strip().startswith(node_op))
    assert why in line, str(info.value)
    _, compiled, got = _compiled(fn, x, jit_compile="auto")
    assert not any(_clustered_ops(compiled).values()), _clustered_ops(compiled)
    _same(got, _want(fn, x))


# --- 5. a list never leaves its cluster -----------------------------------------------------------

def list_read_in_tf(x):
    lst = list_ops.tensor_list_from_tensor(tf.exp(x) * 2.0 + 1.0, element_shape=[3])
    # TensorListResize has no lowering: it stays in TF, so the list may not leave the cluster
    longer = list_ops.tensor_list_resize(lst, 3)
    return (list_ops.tensor_list_stack(longer, element_dtype=tf.float32, num_elements=3),
            list_ops.tensor_list_get_item(lst, 0, element_dtype=tf.float32) * 3.0)


def test_list_crossing_a_cluster_boundary_stays_in_tensorflow():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    f, compiled, got = _compiled(list_read_in_tf, x, jit_compile="auto")
    reasons = compiled.analysis.excluded
    from_tensor = next(n.name for n in compiled.analysis.graph_def.node if n.op == "TensorListFromTensor")
    assert from_tensor in reasons, reasons
    assert "would cross a cluster boundary" in reasons[from_tensor], reasons[from_tensor]
    assert "would cross a cluster boundary" in reasons[from_tensor.replace("FromTensor", "GetItem")]
    _same(got, _want(list_read_in_tf, x))
