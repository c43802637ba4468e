"""Training-step lowerings against TF eager: activation gradients (with NaN/inf), BiasAddGrad,
BroadcastGradientArgs, StridedSliceGrad (every mask), the optimizer updates (hand-built GraphDefs whose
resource inputs are given as variable values, compared with the real ops on tf.Variables), a whole MLP
train step written on plain tensors, and op-type coverage of traced Keras train steps."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2

import hlo
from hlo.dtypes import PrimitiveType as P
from hlo.lowering import NEVER_COMPILED, InputSpec, LoweringError, lower_graph, supported_ops
from hlo.lowering.registry import rule_for
from tests.lowering_harness import TOLERANCES, check_lowering

R = tf.raw_ops
BF16 = P.BF16.numpy
FLOATS = (np.float32, np.float64, np.float16, BF16)
INTS = (np.int32, np.int64, np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64)


def dtypes_of(op: str) -> list:
    return [t for t in FLOATS + INTS + (np.bool_,) if P.from_numpy(np.dtype(t)) in rule_for(op).dtypes]


def ids(v):
    return v if isinstance(v, str) else np.dtype(v).name


def data(dtype, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0 if np.dtype(dtype).kind == "u" else -8, 9, shape).astype(dtype)
    return rng.uniform(-3.0, 3.0, shape).astype(dtype)


# --- activation gradients -------------------------------------------------------------------------

# op -> (argument names, attrs); the first argument is the incoming gradient for the *Grad(gradients, x)
# family and the activation output y for the (y, dy) family.
ACTIVATION_GRADS = {
    "ReluGrad": (("gradients", "features"), {}),
    "Relu6Grad": (("gradients", "features"), {}),
    "LeakyReluGrad": (("gradients", "features"), {"alpha": 0.3}),
    "EluGrad": (("gradients", "outputs"), {}),
    "SeluGrad": (("gradients", "outputs"), {}),
    "SigmoidGrad": (("y", "dy"), {}),
    "TanhGrad": (("y", "dy"), {}),
    "RsqrtGrad": (("y", "dy"), {}),
    "SqrtGrad": (("y", "dy"), {}),
}
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, 7.0, -1.0, 1.0]


def _grad_fn(op: str):
    (a, b), attrs = ACTIVATION_GRADS[op]
    f = getattr(R, op)
    return lambda *ts: tuple(f(**{a: ts[i], b: ts[i + 1]}, **attrs) for i in range(0, len(ts), 2))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op,dtype", [(op, dt) for op in ACTIVATION_GRADS for dt in dtypes_of(op)], ids=ids)
def test_activation_grad(op, dtype) -> None:
    x, y = data(dtype, (4, 6)), data(dtype, (4, 6), seed=1)
    if np.dtype(dtype).kind == "f" or dtype == BF16:
        # Every pair of special values, NaN and inf included, on both operands.
        sa, sb = np.meshgrid(SPECIALS, SPECIALS)
        x = np.concatenate([x.ravel(), sa.ravel()]).astype(dtype)
        y = np.concatenate([y.ravel(), sb.ravel()]).astype(dtype)
    elif op == "Relu6Grad":
        y = (y.astype(np.int64) % 9).astype(dtype)  # 0..8 straddles both edges, 0 and 6
    check_lowering(_grad_fn(op), x, y, data(dtype, (), seed=2), data(dtype, (), seed=3),
                   data(dtype, (0, 3)), data(dtype, (0, 3)))


def test_activation_grad_needs_equal_shapes() -> None:
    cf = tf.function(lambda a, b: R.ReluGrad(gradients=a, features=b), autograph=False).get_concrete_function(
        tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([2, 3], tf.float32))
    ins = [InputSpec(t.name, 1, d) for t, d in zip(cf.graph.inputs, [(2, 3), (3,)])]
    with pytest.raises(LoweringError, match="equal shape"):
        lower_graph(cf.graph.as_graph_def(), ins, [cf.graph.outputs[0].name])


# --- BiasAddGrad ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", dtypes_of("BiasAddGrad"), ids=ids)
def test_bias_add_grad(dtype) -> None:
    shapes = [(4, 3), (2, 3, 4), (2, 3, 2, 2), (2, 3, 1, 2, 2), (0, 3), (3, 0, 2)]

    def fn(*ts):  # TF's shape function wants rank >= 3 for NCHW
        return tuple(R.BiasAddGrad(out_backprop=t, data_format=fmt) for t in ts
                     for fmt in ("NHWC", "NCHW")[:1 + (len(t.shape) > 2)])
    check_lowering(fn, *[data(dtype, s, seed=i) for i, s in enumerate(shapes)])


def test_bias_add_grad_wraps_and_accumulates_like_tf() -> None:
    check_lowering(lambda a, b: (R.BiasAddGrad(out_backprop=a), R.BiasAddGrad(out_backprop=b)),
                   np.full((100, 2), 100, np.int8), np.full((70000, 2), 1, np.float16))


# --- BroadcastGradientArgs ----------------------------------------------------------------------------

SHAPE_PAIRS = [([2, 3], [2, 3]), ([2, 1, 3], [3]), ([2, 1], [1]), ([1, 3], [1, 3]), ([], [2, 3]), ([1, 1], [1]),
               ([5, 1, 4], [1, 3, 1]), ([0, 3], [1, 3]), ([3], []), ([], [])]


@pytest.mark.parametrize("index_type", [tf.int32, tf.int64])
def test_broadcast_gradient_args_folds_to_constants(index_type) -> None:
    def fn():
        return tuple(R.BroadcastGradientArgs(s0=tf.constant(a, index_type, shape=[len(a)]),
                                             s1=tf.constant(b, index_type, shape=[len(b)])) for a, b in SHAPE_PAIRS)
    module = check_lowering(fn)
    assert all(i.opcode in (hlo.Opcode.CONSTANT, hlo.Opcode.TUPLE) for i in module.entry.instructions)


def test_broadcast_gradient_args_from_shape_ops() -> None:
    x, y = data(np.float32, (2, 1, 3)), data(np.float32, (4, 1))
    module = check_lowering(lambda a, b: R.BroadcastGradientArgs(s0=R.Shape(input=a), s1=R.Shape(input=b)), x, y)
    root = next(i for i in module.entry.instructions if i.opcode is hlo.Opcode.TUPLE)
    by_name = {i.name: i for i in module.entry.instructions}
    assert all(by_name[n].opcode is hlo.Opcode.CONSTANT for n in root.operands), root


def test_broadcast_gradient_args_rejects_incompatible_shapes() -> None:
    fn = lambda a, b: R.BroadcastGradientArgs(s0=R.Shape(input=a), s1=R.Shape(input=b))  # noqa: E731
    cf = tf.function(fn, autograph=False).get_concrete_function(
        tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([2, 3], tf.float32))
    ins = [InputSpec(t.name, 1, d) for t, d in zip(cf.graph.inputs, [(2, 3), (4,)])]
    with pytest.raises(LoweringError, match="incompatible shapes"):
        lower_graph(cf.graph.as_graph_def(), ins, [cf.graph.outputs[0].name])


# --- StridedSliceGrad ---------------------------------------------------------------------------------

# (input dims, begin, end, strides, masks)
SLICES = [
    ((3, 4, 5), [0, 1, 0], [3, 4, 5], [2, 2, 1], {}),
    ((3, 4, 5), [-1, 3, 0], [0, 0, 5], [-1, -2, 2], {}),
    ((3, 4, 5), [1, 0], [2, 0], [1, 1], {"shrink_axis_mask": 1, "end_mask": 2}),
    ((3, 4, 5), [0, 1, 0], [0, 3, 0], [1, 1, 1], {"new_axis_mask": 1, "begin_mask": 4, "end_mask": 4}),
    ((3, 4, 5), [0, 3], [0, 1], [1, -1], {"ellipsis_mask": 1}),
    ((3, 4, 5), [1, 0, -2], [0, 0, 0], [1, 1, -3], {"ellipsis_mask": 2, "shrink_axis_mask": 1, "end_mask": 4}),
    ((3, 4, 5), [2, 1], [0, 4], [-1, 3], {"begin_mask": 1, "end_mask": 1}),
    ((3, 4, 5), [1, 5], [1, 9], [1, 1], {}),  # empty: all-zero gradient
    ((6,), [-100], [100], [4], {}),
    ((4, 2), [0, 0, 1], [0, 0, 2], [1, 1, 1], {"new_axis_mask": 3, "shrink_axis_mask": 4}),
    ((), [], [], [], {}),
]


def _slice_grad_fn(cases):
    def fn(*dys):
        return tuple(R.StridedSliceGrad(shape=tf.constant(dims, tf.int32, shape=[len(dims)]),
                                        begin=tf.constant(b, tf.int32, shape=[len(b)]),
                                        end=tf.constant(e, tf.int32, shape=[len(e)]),
                                        strides=tf.constant(s, tf.int32, shape=[len(s)]), dy=dy, **masks)
                     for dy, (dims, b, e, s, masks) in zip(dys, cases))
    return fn


def _dys(dtype, cases):
    out = []
    for i, (dims, b, e, s, masks) in enumerate(cases):
        fwd = tf.strided_slice(tf.zeros(dims), b, e, s, **masks) if b else tf.zeros(dims)
        out.append(data(dtype, tuple(fwd.shape), seed=i))
    return out


@pytest.mark.parametrize("dtype", dtypes_of("StridedSliceGrad"), ids=ids)
def test_strided_slice_grad(dtype) -> None:
    check_lowering(_slice_grad_fn(SLICES), *_dys(dtype, SLICES))


def test_strided_slice_grad_int64_spec() -> None:
    fn = lambda dy: R.StridedSliceGrad(shape=tf.constant([4, 6], tf.int64), begin=tf.constant([3, 1], tf.int64),  # noqa
                                       end=tf.constant([0, 6], tf.int64), strides=tf.constant([-2, 2], tf.int64),
                                       dy=dy)
    check_lowering(fn, data(np.float32, (2, 3)))


# --- optimizers -----------------------------------------------------------------------------------------

# op -> (input names, names of the resource inputs = outputs, hyperparameters)
OPTIMIZERS = {
    "ResourceApplyGradientDescent": (("var", "alpha", "delta"), ("var",), {"alpha": 0.1}),
    "ResourceApplyMomentum": (("var", "accum", "lr", "grad", "momentum"), ("var", "accum"),
                              {"lr": 0.1, "momentum": 0.9}),
    "ResourceApplyKerasMomentum": (("var", "accum", "lr", "grad", "momentum"), ("var", "accum"),
                                   {"lr": 0.1, "momentum": 0.9}),
    "ResourceApplyAdam": (("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "grad"),
                          ("var", "m", "v"), {"beta1_power": 0.9**3, "beta2_power": 0.999**3, "lr": 0.01,
                                              "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}),
}
_NESTEROV = {"ResourceApplyMomentum", "ResourceApplyKerasMomentum", "ResourceApplyAdam"}


def _node(name: str, op: str, inputs=(), **attrs) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def optimizer_graph(op: str, dtype, **flags) -> graph_pb2.GraphDef:
    """A placeholder per input (DT_RESOURCE for the variables, as in TF) feeding one ``op`` node."""
    names, resources, _ = OPTIMIZERS[op]
    tf_type = tf.as_dtype(dtype).as_datatype_enum
    gd = graph_pb2.GraphDef()
    for name in names:
        kind = tf.resource.as_datatype_enum if name in resources else tf_type
        gd.node.append(_node(name, "Placeholder", dtype=attr_value_pb2.AttrValue(type=kind)))
    attrs = {"T": attr_value_pb2.AttrValue(type=tf_type),
             **{k: attr_value_pb2.AttrValue(b=v) for k, v in flags.items()}}
    gd.node.append(_node("apply", op, [f"{n}:0" for n in names], **attrs))
    return gd


@pytest.mark.parametrize("op,nesterov", [(op, n) for op in OPTIMIZERS for n in ((False, True) if op in _NESTEROV
                                                                                 else (False,))])
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_optimizer_update_matches_tf_variables(op, nesterov, dtype) -> None:
    names, resources, hyper = OPTIMIZERS[op]
    flags = {"use_nesterov": nesterov} if op in _NESTEROV else {}
    dims = (3, 4)
    rng = np.random.default_rng(0)
    values = {n: (np.abs if n == "v" else np.asarray)(rng.normal(size=dims)).astype(dtype)
              for n in names if n not in hyper}
    values.update({k: np.asarray(v, dtype) for k, v in hyper.items()})
    specs = [InputSpec(f"{n}:0", P.from_numpy(np.dtype(dtype)), values[n].shape) for n in names]
    module = lower_graph(optimizer_graph(op, dtype, **flags), specs, [f"apply:{i}" for i in range(len(resources))])
    got = hlo.evaluate(module, *[values[n] for n in names])

    variables = {n: tf.Variable(values[n]) for n in resources}
    getattr(R, op)(**{n: variables[n].handle if n in resources else tf.constant(values[n]) for n in names}, **flags)
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    for name, g in zip(resources, got):
        assert g.dtype == np.dtype(dtype) and g.shape == dims
        np.testing.assert_allclose(g.astype(np.float64), variables[name].numpy().astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"{op} {name}")


def test_optimizer_resource_inputs_need_values_not_handles() -> None:
    specs = [InputSpec(f"{n}:0", P.F32, (2,) if n in ("var", "delta") else ()) for n in ("var", "alpha", "delta")]
    module = lower_graph(optimizer_graph("ResourceApplyGradientDescent", np.float32), specs, ["apply:0"])
    (new,) = hlo.evaluate(module, np.array([1.0, 2.0], np.float32), np.float32(0.5), np.array([2.0, 4.0], np.float32))
    np.testing.assert_array_equal(new, [0.0, 0.0])


# --- a whole MLP train step on plain tensors --------------------------------------------------------------

def _mlp_step(x, y, w1, b1, w2, b2):
    """Forward, sparse softmax cross-entropy, tape gradients and an SGD update, without variables."""
    params = [w1, b1, w2, b2]
    with tf.GradientTape() as tape:
        tape.watch(params)
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w1), b1))
        logits = tf.nn.bias_add(tf.matmul(h, w2), b2)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        loss += 1e-3 * tf.add_n([tf.nn.l2_loss(w1), tf.nn.l2_loss(w2)])
    grads = tape.gradient(loss, params)
    return (loss,) + tuple(p - 0.1 * g for p, g in zip(params, grads))


def _mse_step(x, y, w1, b1, w2, b2):
    params = [w1, b1, w2, b2]
    with tf.GradientTape() as tape:
        tape.watch(params)
        h = tf.tanh(tf.matmul(x, w1) + b1)
        pred = tf.sigmoid(tf.matmul(h, w2) + b2)
        loss = tf.reduce_mean(tf.square(pred - y))
    return (loss,) + tuple(tape.gradient(loss, params))


@pytest.mark.parametrize("step,labels", [(_mlp_step, "sparse"), (_mse_step, "dense")])
def test_mlp_train_step_on_tensors(step, labels) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 8)).astype(np.float32)
    y = rng.integers(0, 4, 16).astype(np.int32) if labels == "sparse" else rng.uniform(size=(16, 4)).astype(np.float32)
    weights = [rng.normal(size=s).astype(np.float32) * 0.5 for s in ((8, 12), (12,), (12, 4), (4,))]
    check_lowering(step, x, y, *weights, atol=1e-5)


# --- op coverage of traced Keras train steps ---------------------------------------------------------------

def keras_train_step_ops(loss: str, optimizer: str) -> collections.Counter:
    """Op types of a traced Keras MLP train step, function library bodies included."""
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])
    opt = {"sgd": lambda: keras.optimizers.SGD(0.1), "adam": lambda: keras.optimizers.Adam()}[optimizer]()
    loss_fn = {"mse": keras.losses.MeanSquaredError(),
               "sparse_cce": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}[loss]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss_fn(y, model(x, training=True))
        grads = tape.gradient(value, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return value

    y = tf.TensorSpec([32, 4]) if loss == "mse" else tf.TensorSpec([32], tf.int32)
    gd = step.get_concrete_function(tf.TensorSpec([32, 8]), y).graph.as_graph_def()
    ops = collections.Counter(n.op for n in gd.node)
    for fn in gd.library.function:
        ops.update(n.op for n in fn.node_def)
    return ops


@pytest.mark.slow
@pytest.mark.parametrize("loss,optimizer", [("mse", "sgd"), ("sparse_cce", "adam")])
def test_keras_train_step_ops_are_covered(loss, optimizer) -> None:
    ops = keras_train_step_ops(loss, optimizer)
    missing = sorted(op for op in ops if op not in supported_ops() and op not in NEVER_COMPILED)
    assert not missing, f"op types of a Keras train step with no lowering: {missing}"
    assert {"MatMul", "BiasAddGrad", "ReluGrad"} <= set(ops)
