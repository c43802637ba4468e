"""Convolution lowerings (Conv2D, depthwise, their input/filter gradients, Conv3D) against TF eager."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import LoweringError
from tests.lowering_harness import NARROW_FLOATS, check_lowering, check_lowering_rounded, lower_fn


def _checker(dtype):
    """f16/bf16 sums against the once-rounded f64 result (TF's own narrow kernels differ by CPU; see
    ``tests/lowering_harness.py``); other types against TF on the same inputs."""
    return check_lowering_rounded if np.dtype(dtype) in NARROW_FLOATS else check_lowering


R = tf.raw_ops
BF16 = hlo.PrimitiveType.BF16.numpy
TOL = {"rtol": 1e-4, "atol": 1e-4}
_rng = np.random.default_rng(20240611)


def _normal(*dims, dtype=np.float32, scale=1.0):
    return (_rng.standard_normal(dims) * scale).astype(dtype)


X = _normal(2, 9, 7, 4)  # odd spatial sizes
W = _normal(3, 2, 4, 5)
W_GROUPED = _normal(3, 3, 2, 6)  # 2 groups over X's 4 channels
W_DEPTH = {1: _normal(3, 2, 4, 1), 2: _normal(2, 3, 4, 2)}


def _nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _attrs(fmt: str, padding: str, stride, dilation, explicit=((1, 2), (2, 0))) -> dict:
    """Conv attributes in ``fmt`` order for spatial ``stride``/``dilation`` (int or (h, w))."""
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    spatial_first = fmt == "NHWC"
    put = (lambda h, w, one: [one, h, w, one]) if spatial_first else (lambda h, w, one: [one, one, h, w])
    attrs = {"strides": put(sh, sw, 1), "dilations": put(dh, dw, 1), "padding": padding, "data_format": fmt}
    if padding == "EXPLICIT":
        pads = [0, 0, *explicit[0], *explicit[1], 0, 0] if spatial_first else [0, 0, 0, 0, *explicit[0], *explicit[1]]
        attrs["explicit_paddings"] = pads
    return attrs


def _out_grad(y) -> np.ndarray:
    return _normal(*np.shape(y), dtype=np.asarray(y).dtype)


# --- Conv2D: padding x strides x dilations ------------------------------------------------------------------

GRID = [
    ("SAME", 1, 1), ("SAME", 2, 1), ("SAME", (2, 3), 1), ("SAME", 1, 2), ("SAME", 2, (2, 1)),
    ("VALID", 1, 1), ("VALID", 2, 1), ("VALID", (3, 2), 1), ("VALID", 1, 2), ("VALID", 2, (1, 2)),
    ("EXPLICIT", 1, 1), ("EXPLICIT", 2, 1), ("EXPLICIT", (1, 3), 2),
]


@pytest.mark.parametrize("padding,stride,dilation", GRID)
def test_conv2d_grid(padding, stride, dilation) -> None:
    attrs = _attrs("NHWC", padding, stride, dilation)
    check_lowering(lambda x, w: R.Conv2D(input=x, filter=w, **attrs), X, W, **TOL)


@pytest.mark.parametrize("padding,stride,dilation", [("SAME", 2, 1), ("VALID", (1, 2), 2), ("EXPLICIT", 1, 1)])
def test_conv2d_nchw(padding, stride, dilation) -> None:
    attrs = _attrs("NCHW", padding, stride, dilation)
    check_lowering(lambda x, w: R.Conv2D(input=x, filter=w, **attrs), _nchw(X), W, **TOL)


def test_conv2d_same_padding_is_tf_exact() -> None:
    """SAME with an odd total puts the extra row/column after: pad_before = total // 2."""
    module = check_lowering(lambda x, w: R.Conv2D(input=x, filter=w, strides=[1, 2, 2, 1], padding="SAME"),
                            X, _normal(4, 4, 4, 3), **TOL)
    (conv,) = [i for _, i in module.instructions() if i.opcode == hlo.Opcode.CONVOLUTION]
    # in 9, k 4, s 2: out 5, total (5-1)*2+4-9 = 3 -> 1 before, 2 after; in 7: out 4, total 3 -> 1, 2
    assert [(d.pad_low, d.pad_high) for d in conv.attr("window").dims] == [(1, 2), (1, 2)]


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16, np.int32], ids=lambda d: np.dtype(d).name)
def test_conv2d_dtypes(dtype) -> None:
    scale = 3 if dtype == np.int32 else 1
    x, w = (X * scale).astype(dtype), (W * scale).astype(dtype)
    _checker(dtype)(lambda a, b: R.Conv2D(input=a, filter=b, strides=[1, 2, 1, 1], padding="SAME"), x, w)


def test_conv2d_grouped() -> None:
    check_lowering(lambda x, w: R.Conv2D(input=x, filter=w, strides=[1, 1, 2, 1], padding="SAME"), X, W_GROUPED, **TOL)


def test_conv2d_nan_and_inf() -> None:
    x = X.copy()
    x[0, 1, 1, 0], x[1, 4, 3, 2], x[1, 8, 6, 1] = np.nan, np.inf, -np.inf
    check_lowering(lambda a, b: R.Conv2D(input=a, filter=b, strides=[1, 1, 1, 1], padding="SAME"), x, W, **TOL)


def test_conv2d_empty_batch_has_tf_static_shape() -> None:
    # TF's oneDNN kernel returns a wrongly shaped result for an empty batch; check the shape TF infers.
    x = np.zeros((0, 9, 7, 4), np.float32)
    fn = lambda a, b: R.Conv2D(input=a, filter=b, strides=[1, 1, 1, 1], padding="VALID")  # noqa: E731
    (got,) = hlo.evaluate(lower_fn(fn, x, W), x, W)
    assert got.shape == (0, 7, 6, 5)


def _lower_loose(fn, *arrays):
    """Lower ``fn`` traced with unknown spatial dims (so TF's own shape checks do not fire) at ``arrays``' dims."""
    from hlo.lowering import InputSpec, lower_graph

    specs = [tf.TensorSpec([a.shape[0]] + [None] * (a.ndim - 2) + [a.shape[-1]], tf.as_dtype(a.dtype)) for a in arrays]
    cf = tf.function(fn, autograph=False).get_concrete_function(*specs)
    inputs = [InputSpec(t.name, t.dtype.as_datatype_enum, a.shape) for t, a in zip(cf.graph.inputs, arrays)]
    return lower_graph(cf.graph.as_graph_def(), inputs, [t.name for t in cf.graph.outputs])


@pytest.mark.parametrize("attrs,match", [
    ({"strides": [2, 1, 1, 1], "padding": "SAME"}, "batch and depth"),
    ({"strides": [1, 1, 1, 1], "padding": "VALID", "dilations": [1, 5, 5, 1]}, "output size would be negative"),
])
def test_conv2d_refusals_are_clear(attrs, match) -> None:
    with pytest.raises(LoweringError, match=match):
        _lower_loose(lambda a, b: R.Conv2D(input=a, filter=b, **attrs), X, W)


def test_conv2d_backprop_filter_checks_out_backprop_dims() -> None:
    dy = np.zeros((2, 4, 4, 5), np.float32)  # SAME, stride 2 over 9x7 gives 5x4
    fn = lambda x, g: R.Conv2DBackpropFilter(input=x, filter_sizes=tf.constant(W.shape), out_backprop=g,  # noqa: E731
                                             strides=[1, 2, 2, 1], padding="SAME")
    with pytest.raises(LoweringError, match="out_backprop has dims"):
        _lower_loose(fn, X, dy)


# --- Conv2D gradients ----------------------------------------------------------------------------------------

GRAD_GRID = [("SAME", 1, 1), ("SAME", 2, 1), ("VALID", (2, 3), 1), ("VALID", 1, 2), ("SAME", 2, (2, 1)),
             ("EXPLICIT", (2, 1), 1)]


# TF's CPU gradient kernels for grouped convolutions exist only on its oneDNN path (no EXPLICIT padding).
BACKPROP_CASES = [pytest.param(*case, w, id=f"{name}-{case[0]}-{case[1]}-{case[2]}")
                  for name, w in (("dense", W), ("grouped", W_GROUPED))
                  for case in GRAD_GRID if not (name == "grouped" and case[0] == "EXPLICIT")]


@pytest.mark.parametrize("padding,stride,dilation,w", BACKPROP_CASES)
def test_conv2d_backprops(padding, stride, dilation, w) -> None:
    attrs = _attrs("NHWC", padding, stride, dilation)
    dy = _out_grad(R.Conv2D(input=X, filter=w, **attrs))
    check_lowering(lambda f, g: R.Conv2DBackpropInput(input_sizes=tf.constant(X.shape), filter=f, out_backprop=g,
                                                      **attrs), w, dy, **TOL)
    check_lowering(lambda x, g: R.Conv2DBackpropFilter(input=x, filter_sizes=tf.constant(w.shape), out_backprop=g,
                                                       **attrs), X, dy, **TOL)


@pytest.mark.parametrize("padding,stride,dilation", [("SAME", 2, 1), ("VALID", 1, 2)])
def test_conv2d_backprops_nchw(padding, stride, dilation) -> None:
    attrs = _attrs("NCHW", padding, stride, dilation)
    x = _nchw(X)
    dy = _out_grad(R.Conv2D(input=x, filter=W, **attrs))
    check_lowering(lambda f, g: R.Conv2DBackpropInput(input_sizes=tf.constant(x.shape), filter=f, out_backprop=g,
                                                      **attrs), W, dy, **TOL)
    check_lowering(lambda a, g: R.Conv2DBackpropFilter(input=a, filter_sizes=tf.constant(W.shape), out_backprop=g,
                                                       **attrs), x, dy, **TOL)


def test_conv2d_backprop_input_spatial_sizes_only() -> None:
    dy = _out_grad(R.Conv2D(input=X, filter=W, strides=[1, 2, 2, 1], padding="SAME"))
    check_lowering(lambda f, g: R.Conv2DBackpropInput(input_sizes=tf.constant([9, 7]), filter=f, out_backprop=g,
                                                      strides=[1, 2, 2, 1], padding="SAME"), W, dy, **TOL)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_conv2d_backprop_dtypes(dtype) -> None:
    check = _checker(dtype)
    x, w = X.astype(dtype), W.astype(dtype)
    dy = _out_grad(R.Conv2D(input=x, filter=w, strides=[1, 2, 2, 1], padding="SAME"))
    kw = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    check(lambda f, g: R.Conv2DBackpropInput(input_sizes=tf.constant(x.shape), filter=f, out_backprop=g,
                                                      **kw), w, dy)
    check(lambda a, g: R.Conv2DBackpropFilter(input=a, filter_sizes=tf.constant(w.shape), out_backprop=g,
                                                       **kw), x, dy)


def test_conv2d_backprop_input_int32() -> None:
    w = (W * 3).astype(np.int32)
    dy = (_normal(2, 9, 7, 5) * 3).astype(np.int32)
    check_lowering(lambda f, g: R.Conv2DBackpropInput(input_sizes=tf.constant(X.shape), filter=f, out_backprop=g,
                                                      strides=[1, 1, 1, 1], padding="SAME"), w, dy)


@pytest.mark.parametrize("padding,stride,dilation", [("SAME", 2, 1), ("VALID", 1, 2)])
def test_conv2d_gradient_tape(padding, stride, dilation) -> None:
    """The gradient graph TF builds for Conv2D (input_sizes from a folded Shape) lowers and matches."""
    attrs = _attrs("NHWC", padding, stride, dilation)
    dy = _out_grad(R.Conv2D(input=X, filter=W, **attrs))

    def grads(x, w, g):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, strides=attrs["strides"], padding=padding, dilations=attrs["dilations"])
        return tape.gradient(y, [x, w], output_gradients=g)
    check_lowering(grads, X, W, dy, **TOL)


# --- depthwise ---------------------------------------------------------------------------------------------

DEPTH_GRID = [("SAME", 1, 1), ("SAME", 2, 1), ("VALID", (2, 1), 1), ("VALID", 1, 2), ("EXPLICIT", 2, 1)]


@pytest.mark.parametrize("mult", [1, 2])
@pytest.mark.parametrize("padding,stride,dilation", DEPTH_GRID)
def test_depthwise(padding, stride, dilation, mult) -> None:
    attrs = _attrs("NHWC", padding, stride, dilation)
    w = W_DEPTH[mult]
    check_lowering(lambda x, f: R.DepthwiseConv2dNative(input=x, filter=f, **attrs), X, w, **TOL)
    if dilation != 1:
        return
    dy = _out_grad(R.DepthwiseConv2dNative(input=X, filter=w, **attrs))
    check_lowering(lambda f, g: R.DepthwiseConv2dNativeBackpropInput(
        input_sizes=tf.constant(X.shape), filter=f, out_backprop=g, **attrs), w, dy, **TOL)
    check_lowering(lambda x, g: R.DepthwiseConv2dNativeBackpropFilter(
        input=x, filter_sizes=tf.constant(w.shape), out_backprop=g, **attrs), X, dy, **TOL)


@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_nchw(mult) -> None:
    attrs = _attrs("NCHW", "SAME", 2, 1)
    x, w = _nchw(X), W_DEPTH[mult]
    check_lowering(lambda a, f: R.DepthwiseConv2dNative(input=a, filter=f, **attrs), x, w, **TOL)
    dy = _out_grad(R.DepthwiseConv2dNative(input=x, filter=w, **attrs))
    check_lowering(lambda f, g: R.DepthwiseConv2dNativeBackpropInput(
        input_sizes=tf.constant(x.shape), filter=f, out_backprop=g, **attrs), w, dy, **TOL)
    check_lowering(lambda a, g: R.DepthwiseConv2dNativeBackpropFilter(
        input=a, filter_sizes=tf.constant(w.shape), out_backprop=g, **attrs), x, dy, **TOL)


def test_depthwise_backprops_ignore_dilations_as_tf_does() -> None:
    """TF's CPU depthwise gradient kernels ignore ``dilations``; so do we (SAME, stride 1: same sizes)."""
    attrs = _attrs("NHWC", "SAME", 1, 2)
    w = W_DEPTH[2]
    dy = _out_grad(R.DepthwiseConv2dNative(input=X, filter=w, **attrs))
    check_lowering(lambda f, g: R.DepthwiseConv2dNativeBackpropInput(
        input_sizes=tf.constant(X.shape), filter=f, out_backprop=g, **attrs), w, dy, **TOL)
    check_lowering(lambda x, g: R.DepthwiseConv2dNativeBackpropFilter(
        input=x, filter_sizes=tf.constant(w.shape), out_backprop=g, **attrs), X, dy, **TOL)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_depthwise_dtypes(dtype) -> None:
    check = _checker(dtype)
    x, w = X.astype(dtype), W_DEPTH[2].astype(dtype)
    kw = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    check(lambda a, f: R.DepthwiseConv2dNative(input=a, filter=f, **kw), x, w)
    dy = _out_grad(R.DepthwiseConv2dNative(input=x, filter=w, **kw))
    check(lambda f, g: R.DepthwiseConv2dNativeBackpropInput(
        input_sizes=tf.constant(x.shape), filter=f, out_backprop=g, **kw), w, dy)
    check(lambda a, g: R.DepthwiseConv2dNativeBackpropFilter(
        input=a, filter_sizes=tf.constant(w.shape), out_backprop=g, **kw), x, dy)


def test_depthwise_gradient_tape() -> None:
    w = W_DEPTH[2]
    dy = _out_grad(R.DepthwiseConv2dNative(input=X, filter=w, strides=[1, 2, 2, 1], padding="SAME"))

    def grads(x, f, g):
        with tf.GradientTape() as tape:
            tape.watch([x, f])
            y = tf.nn.depthwise_conv2d(x, f, strides=[1, 2, 2, 1], padding="SAME")
        return tape.gradient(y, [x, f], output_gradients=g)
    check_lowering(grads, X, w, dy, **TOL)


# --- Conv3D ------------------------------------------------------------------------------------------------

X3 = _normal(2, 5, 6, 4, 3)
W3 = _normal(3, 2, 2, 3, 4)


@pytest.mark.parametrize("padding,strides", [("SAME", [1, 2, 1, 2, 1]), ("VALID", [1, 1, 2, 1, 1])])
def test_conv3d_and_backprops(padding, strides) -> None:
    kw = {"strides": strides, "padding": padding}
    check_lowering(lambda x, w: R.Conv3D(input=x, filter=w, **kw), X3, W3, **TOL)
    dy = _out_grad(R.Conv3D(input=X3, filter=W3, **kw))
    check_lowering(lambda w, g: R.Conv3DBackpropInputV2(input_sizes=tf.constant(X3.shape), filter=w,
                                                        out_backprop=g, **kw), W3, dy, **TOL)
    check_lowering(lambda x, g: R.Conv3DBackpropFilterV2(input=x, filter_sizes=tf.constant(W3.shape),
                                                         out_backprop=g, **kw), X3, dy, **TOL)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_conv3d_dtypes(dtype) -> None:
    kw = {"strides": [1, 1, 2, 1, 1], "padding": "SAME"}
    _checker(dtype)(lambda x, w: R.Conv3D(input=x, filter=w, **kw), X3.astype(dtype), W3.astype(dtype))
