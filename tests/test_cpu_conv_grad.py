"""Convolution gradients on the CPU backend through oneDNN's gradient primitives (backends/cpu/dnnl_conv.py).

TF's gradients (``tf.GradientTape`` over ``tf.nn.conv1d/conv2d/conv3d/depthwise_conv2d``, eager) are
compared with ours compiled through ``tfxla_plugin.function``: every case's input and filter gradient
come from ONE compiled function (one C compile for the whole table), each compared on its own. oneDNN
and TF's kernels sum in different orders (blocked, vectorized): f32 gradients agree to ~1e-6 relative
(sums of <= 2*11*11*16 products of standard normals): checked at rtol 1e-4, atol 1e-4 * max|TF|.
HLO-level cases cover what TF does not produce (padding the last tap does not reach, batch groups with
several features per group) against the evaluator, and the form each convolution is given; a child
process under ``ONEDNN_VERBOSE=1`` checks that no gradient runs a oneDNN reference kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hlo
from backends.cpu import CodegenOptions, CompileOptions, compile as compile_module, dnnl
from backends.cpu.dnnl_conv import form_of

pytestmark = pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")

# name -> (input shape, filter shape, op, stride, padding, dilation): op "conv" is tf.nn.conv1d/2d/3d
# (by rank), "depthwise" tf.nn.depthwise_conv2d.
CASES = {
    "s1_valid": ((2, 9, 9, 8), (3, 3, 8, 16), "conv", 1, "VALID", 1),
    "s2_same": ((2, 9, 9, 8), (3, 3, 8, 16), "conv", 2, "SAME", 1),
    "s2_valid_odd": ((1, 11, 7, 3), (2, 2, 3, 5), "conv", 2, "VALID", 1),
    "s2_same_1x1": ((3, 7, 7, 4), (1, 1, 4, 6), "conv", 2, "SAME", 1),
    "dilation2_same": ((3, 11, 11, 4), (3, 3, 4, 6), "conv", 1, "SAME", 2),
    "batch1_s2_same_5x5": ((1, 13, 13, 3), (5, 5, 3, 8), "conv", 2, "SAME", 1),
    "depthwise_s2_same": ((2, 9, 9, 8), (3, 3, 8, 1), "depthwise", 2, "SAME", 1),
    "depthwise_s1_valid_mult2": ((2, 8, 7, 8), (3, 3, 8, 2), "depthwise", 1, "VALID", 1),
    "depthwise_batch1_s1_same": ((1, 7, 7, 16), (3, 3, 16, 1), "depthwise", 1, "SAME", 1),
    "conv1d_s2_same": ((2, 15, 4), (3, 4, 6), "conv", 2, "SAME", 1),
    "conv3d_s2_same": ((1, 5, 6, 7, 2), (3, 3, 3, 2, 4), "conv", 2, "SAME", 1),
}


def _forward(tf, x, w, op: str, stride: int, padding: str, dilation: int):
    if op == "depthwise":
        return tf.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], padding, dilations=[dilation] * 2)
    if len(x.shape) == 3:
        return tf.nn.conv1d(x, w, stride, padding, dilations=dilation)
    if len(x.shape) == 5:
        return tf.nn.conv3d(x, w, [1] + [stride] * 3 + [1], padding, "NDHWC", [1] + [dilation] * 3 + [1])
    return tf.nn.conv2d(x, w, stride, padding, dilations=dilation)


def _grads(tf, inputs):
    """[(dx + x, dw / 2) per case] for the loss sum(y * cos(y)) (a gradient that varies over y)."""
    out = []
    for (x, w), (_, _, op, stride, padding, dilation) in zip(inputs, CASES.values()):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = _forward(tf, x, w, op, stride, padding, dilation)
            loss = tf.reduce_sum(y * tf.cos(y))
        dx, dw = tape.gradient(loss, [x, w])
        out.append((dx + x, 0.5 * dw))  # epilogues: the gradient primitives take none, the loop runs them
    return out


@pytest.fixture(scope="module")
def both():
    """(TF's gradients, ours) for every case, ours from one compiled function."""
    tf = pytest.importorskip("tensorflow")
    import tfxla_plugin

    rng = np.random.default_rng(0)
    inputs = [(tf.constant(rng.standard_normal(xs).astype(np.float32)),
               tf.constant(rng.standard_normal(ws).astype(np.float32))) for xs, ws, *_ in CASES.values()]
    flat = [t for pair in inputs for t in pair]

    def step(*args):
        return _grads(tf, [args[i:i + 2] for i in range(0, len(args), 2)])

    want = step(*flat)
    got = tfxla_plugin.function(step, jit_compile=True)(*flat)
    return want, got


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("which", ["input", "filter"])
def test_gradient_matches_tf(both, case: str, which: str) -> None:
    k = list(CASES).index(case)
    i = 0 if which == "input" else 1
    want, got = both[0][k][i].numpy(), np.asarray(both[1][k][i])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))


# --- HLO level: forms, and what TF does not produce -----------------------------------------------------

def _module(params: list[str], root: str) -> str:
    names = ", ".join(f"p{i}: {p}" for i, p in enumerate(params))
    lines = "\n".join(f"  %p{i} = {p} parameter({i})" for i, p in enumerate(params))
    return f"HloModule m\nENTRY %main ({names}) -> {root.split()[0]} {{\n{lines}\n  ROOT %c = {root}\n}}\n"


HLO_CASES = {  # name -> (module text, the form dnnl_conv gives the convolution)
    # a filter gradient (dilation 3, stride 2) whose input has 2 rows past the last tap: one as pad_r = 1 - S,
    # one cut off the view
    "filter_grad_cut_rows": (_module(["f32[1,12,12,3]", "f32[1,4,4,5]"],
                                     "f32[2,2,3,5] convolution(%p0, %p1), window={size=4x4 stride=3x3 rhs_dilate=2x2}, "
                                     "dim_labels=f01b_i01o->01bf"), "backward_weights"),
    # batch groups with 2 features per group (a grouped, not depthwise, filter gradient)
    "filter_grad_batch_groups": (_module(["f32[2,7,7,8]", "f32[2,5,5,12]"],
                                         "f32[3,3,2,12] convolution(%p0, %p1), window={size=5x5 pad=0_0x0_0}, "
                                         "dim_labels=f01b_i01o->01bf, batch_group_count=4"), "backward_weights"),
    # an input gradient with the window's own reversal flag (no flip loop) and lhs dilation 2
    "input_grad_reversal_flag": (_module(["f32[2,5,5,6]", "f32[3,3,4,6]"],
                                         "f32[2,9,9,4] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1 "
                                         "lhs_dilate=2x2 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f"),
                                 "backward_data"),
    # NCHW/OIHW, lhs dilation, one spatial dim reversed by the window: the other flipped in runs of 3 elements
    "input_grad_nchw_one_reversed": (_module(["f32[2,3,5,5]", "f32[4,3,3,3]"],
                                             "f32[2,4,9,9] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1 "
                                             "lhs_dilate=2x2 rhs_reversal=0x1}, dim_labels=bf01_oi01->bf01"),
                                     "backward_data"),
    "forward_nhwc": (_module(["f32[2,9,9,4]", "f32[3,3,4,6]"],
                             "f32[2,5,5,6] convolution(%p0, %p1), window={size=3x3 stride=2x2 pad=1_1x1_1}, "
                             "dim_labels=b01f_01io->b01f"), "forward"),
}

_CREATE = {"forward": "dnnl_convolution_forward_primitive_desc_create(&pd",
           "backward_data": "dnnl_convolution_backward_data_primitive_desc_create(&pd",
           "backward_weights": "dnnl_convolution_backward_weights_primitive_desc_create(&pd"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("conv_grad_kernels"))


@pytest.mark.parametrize("case", list(HLO_CASES))
def test_hlo_form_and_numbers(cache, case: str) -> None:
    text, form = HLO_CASES[case]
    module = hlo.parse_module(text)
    conv = module.entry.root
    assert form_of(conv, module.entry[conv.operands[0]].shape).name == form
    exe = compile_module(module, CompileOptions(codegen=CodegenOptions(dnnl=True), cache_dir=cache))
    for name, create in _CREATE.items():
        assert (create in exe.source) == (name == form), name
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    (got,) = exe(*args)
    want = np.asarray(hlo.evaluate(module, *args)[0])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))


@pytest.mark.parametrize("out_type", ["bf16", "f32"])
def test_bf16_filter_gradient(cache, out_type: str) -> None:
    """bf16 gradients run oneDNN's primitive (rounded once from f32 sums, as the evaluator: rtol 2e-2); a bf16
    -> f32 one has no oneDNN gradient form (its forward hint is unimplemented) and takes the elemental loops."""
    from hlo.dtypes import PrimitiveType as P

    if not dnnl.supports(dnnl.find_install(), P.BF16):
        pytest.skip("this CPU has no native bf16 for oneDNN")
    text = _module(["bf16[4,9,9,8]", "bf16[4,5,5,16]"],
                   f"{out_type}[3,3,8,16] convolution(%p0, %p1), window={{size=5x5 pad=1_1x1_1 rhs_dilate=2x2}}, "
                   "dim_labels=f01b_i01o->01bf")
    module = hlo.parse_module(text)
    exe = compile_module(module, CompileOptions(codegen=CodegenOptions(dnnl=True), cache_dir=cache))
    assert (_CREATE["backward_weights"] in exe.source) == (out_type == "bf16")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32).astype(p.shape.dtype.numpy)
            for p in module.entry.parameters]
    got = np.asarray(exe(*args)[0], np.float64)
    want = np.asarray(hlo.evaluate(module, *args)[0], np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * float(np.max(np.abs(want))))


# --- no reference kernels ---------------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import json, sys, numpy as np, hlo
    from backends.cpu import CompileOptions, compile as compile_module
    rng = np.random.default_rng(2)
    for text in json.loads(sys.argv[1]):
        module = hlo.parse_module(text)
        exe = compile_module(module, CompileOptions(cache_dir=sys.argv[2]))
        exe(*[rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters])
""")

# The gradient forms of a training step (the small CNN's and MobileNetV2's), as the lowering builds them.
GRADIENT_FORMS = [
    # Conv2DBackpropFilter, 3x3 stride 1 VALID, batch 32
    _module(["f32[32,15,15,32]", "f32[32,13,13,64]"],
            "f32[3,3,32,64] convolution(%p0, %p1), window={size=13x13}, dim_labels=f01b_i01o->01bf"),
    # Conv2DBackpropFilter, stride 2 SAME
    _module(["f32[4,17,17,16]", "f32[4,9,9,32]"],
            "f32[3,3,16,32] convolution(%p0, %p1), window={size=9x9 pad=1_1x1_1 rhs_dilate=2x2}, "
            "dim_labels=f01b_i01o->01bf"),
    # Conv2DBackpropInput, stride 2 SAME (the reversed filter as an operand)
    _module(["f32[4,9,9,32]", "f32[3,3,16,32]"],
            "f32[4,17,17,16] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, "
            "dim_labels=b01f_01oi->b01f"),
    # DepthwiseConv2dNativeBackpropFilter, stride 2 SAME
    _module(["f32[4,17,17,32]", "f32[4,9,9,32]"],
            "f32[3,3,1,32] convolution(%p0, %p1), window={size=9x9 pad=1_1x1_1 rhs_dilate=2x2}, "
            "dim_labels=f01b_i01o->01bf, batch_group_count=32"),
    # DepthwiseConv2dNativeBackpropInput, stride 2 SAME
    _module(["f32[4,9,9,32]", "f32[3,3,32,1]"],
            "f32[4,17,17,32] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, "
            "dim_labels=b01f_01oi->b01f, feature_group_count=32"),
]


def test_gradients_run_no_reference_kernel(tmp_path) -> None:
    install = dnnl.find_install()
    if dnnl.effective_isa(install.lib_dir) & 0x7 != 0x7:  # dnnl_cpu_isa_avx2's bits (sse41 | avx | avx2)
        pytest.skip("oneDNN has jit gradient kernels for this CPU only with AVX2")
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, ONEDNN_VERBOSE="1", PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(GRADIENT_FORMS), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    execs = [line for line in proc.stdout.splitlines() if ",exec," in line and ",convolution," in line]
    kinds = {kind for kind in ("backward_weights", "backward_data") if any(kind in line for line in execs)}
    assert kinds == {"backward_weights", "backward_data"}, execs
    assert not [line for line in execs if "ref:" in line], execs
