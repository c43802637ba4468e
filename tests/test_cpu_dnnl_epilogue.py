"""Output fusions through oneDNN: which epilogues become post-ops, and what runs after the library op.

Each kOutput fusion (HLO text, in the forms TF's lowering produces: select/compare for relu and relu6,
power for x^3, divide by sqrt(2), ...) is checked for structure (the post-ops appended in the
generated C, in order, and whether an elemental loop is left) and for numbers against
``hlo.evaluate`` at rtol 1e-4 (see tests/test_cpu_dnnl.py for why not bit-exact), and with NaN and
+-inf reaching the epilogue: NaN where the evaluator has NaN (oneDNN's relu/clip/max/min post-ops would
return the bound; those ops run in an in-place loop after the library op instead).
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

import hlo
from backends.cpu import dnnl
from tests.test_cpu_dnnl import args_for, cache, check_numbers, compile_text, uses_dnnl  # noqa: F401  (cache: fixture)

pytestmark = pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")


# --- output fusions: epilogues as post-ops ----------------------------------------------------------

def output_fusion(epilogue: str, hero: str = "dot") -> str:
    """A kOutput fusion of a [6,10]x[10,16] dot (or a 3x3 NHWC convolution to [1,6,6,16]) with bias %x
    and the given epilogue lines (ending in ROOT %y); the fusion also reads a residual %p3 and a scalar %p4."""
    if hero == "dot":
        lhs, rhs, out, dims = "f32[6,10]", "f32[10,16]", "f32[6,16]", "1"
        op = f"%d = {out} dot(%p0, %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    else:
        lhs, rhs, out, dims = "f32[1,8,8,5]", "f32[3,3,5,16]", "f32[1,6,6,16]", "3"
        op = f"%d = {out} convolution(%p0, %p1), window={{size=3x3}}, dim_labels=b01f_01io->b01f"
    body = textwrap.dedent(epilogue).strip().replace("$T", out).replace("$C", dims)
    return f"""HloModule fused_{hero}
%fused (p0: {lhs}, p1: {rhs}, p2: f32[16], p3: {out}, p4: f32[]) -> {out} {{
  %p0 = {lhs} parameter(0)
  %p1 = {rhs} parameter(1)
  %p2 = f32[16] parameter(2)
  %p3 = {out} parameter(3)
  %p4 = f32[] parameter(4)
  {op}
  %bb = {out} broadcast(%p2), dimensions={{{dims}}}
  %x = {out} add(%d, %bb)
{textwrap.indent(body, '  ')}
}}
ENTRY %main (a: {lhs}, w: {rhs}, b: f32[16], r: {out}, s: f32[]) -> {out} {{
  %a = {lhs} parameter(0)
  %w = {rhs} parameter(1)
  %b = f32[16] parameter(2)
  %r = {out} parameter(3)
  %s = f32[] parameter(4)
  ROOT %f = {out} fusion(%a, %w, %b, %r, %s), kind=kOutput, calls=%fused
}}
"""


ZERO = "%c0 = f32[] constant(0)\n%z = $T broadcast(%c0), dimensions={}\n"
SIX = "%c6 = f32[] constant(6)\n%six = $T broadcast(%c6), dimensions={}\n"
RELU_TF = ZERO + "%lt = pred[6,16] compare(%x, %z), direction=LT\n%r = $T select(%lt, %z, %x)\n"
SIX_TF = SIX + "%gt = pred[6,16] compare(%six, %r), direction=LT\n"
# (epilogue, the post-ops it must become, in order). "bias" is the matmul/convolution bias argument.
EPILOGUES = {
    "bias_only": ("ROOT %y = $T add(%d, %bb)", ["bias"]),
    # select(k < x, x, k) maps NaN to k, as oneDNN's clip does; maximum and TF's forms keep NaN (NAN_TAILS)
    "max_select_nan_to_k": ("%c0 = f32[] constant(0)\n%z = $T broadcast(%c0), dimensions={}\n"
                            "%gt = pred[6,16] compare(%z, %x), direction=LT\nROOT %y = $T select(%gt, %x, %z)",
                            ["bias", "relu"]),
    "residual": ("ROOT %y = $T add(%p3, %x)", ["bias", "binary_add"]),
    "gelu_tanh_tf": ("""
        %h = f32[] constant(0.5)
        %hb = $T broadcast(%h), dimensions={}
        %hx = $T multiply(%hb, %x)
        %one = f32[] constant(1)
        %c = f32[] constant(0.797884583)
        %k = f32[] constant(0.044715)
        %three = f32[] constant(3)
        %p3b = $T broadcast(%three), dimensions={}
        %cube = $T power(%x, %p3b)
        %kb = $T broadcast(%k), dimensions={}
        %kc = $T multiply(%kb, %cube)
        %inner = $T add(%x, %kc)
        %cb = $T broadcast(%c), dimensions={}
        %arg = $T multiply(%cb, %inner)
        %t = $T tanh(%arg)
        %oneb = $T broadcast(%one), dimensions={}
        %opt = $T add(%oneb, %t)
        ROOT %y = $T multiply(%hx, %opt)""", ["bias", "gelu_tanh"]),
    "gelu_tanh_regrouped": ("""
        %xx = $T multiply(%x, %x)
        %cube = $T multiply(%xx, %x)
        %k = f32[] constant(0.044715)
        %kb = $T broadcast(%k), dimensions={}
        %kc = $T multiply(%cube, %kb)
        %inner = $T add(%kc, %x)
        %c = f32[] constant(0.797884583)
        %cb = $T broadcast(%c), dimensions={}
        %arg = $T multiply(%inner, %cb)
        %t = $T tanh(%arg)
        %one = f32[] constant(1)
        %oneb = $T broadcast(%one), dimensions={}
        %opt = $T add(%t, %oneb)
        %h = f32[] constant(0.5)
        %hb = $T broadcast(%h), dimensions={}
        %ho = $T multiply(%opt, %hb)
        ROOT %y = $T multiply(%x, %ho)""", ["bias", "gelu_tanh"]),
    "gelu_erf": ("""
        %r2 = f32[] constant(1.41421354)
        %r2b = $T broadcast(%r2), dimensions={}
        %xs = $T divide(%x, %r2b)
        %e = $T erf(%xs)
        %one = f32[] constant(1)
        %oneb = $T broadcast(%one), dimensions={}
        %ope = $T add(%e, %oneb)
        %xo = $T multiply(%x, %ope)
        %h = f32[] constant(0.5)
        %hb = $T broadcast(%h), dimensions={}
        ROOT %y = $T multiply(%xo, %hb)""", ["bias", "gelu_erf"]),
    "sigmoid": ("ROOT %y = $T logistic(%x)", ["bias", "logistic"]),
    "tanh": ("ROOT %y = $T tanh(%x)", ["bias", "tanh"]),
    "swish": ("%l = $T logistic(%x)\nROOT %y = $T multiply(%l, %x)", ["bias", "swish"]),
    "elu_tf": (ZERO + "%lt = pred[6,16] compare(%x, %z), direction=LT\n%em = $T exponential-minus-one(%x)\n"
               "ROOT %y = $T select(%lt, %em, %x)", ["bias", "elu"]),
    "scale_constant": ("%q = f32[] constant(0.25)\n%qb = $T broadcast(%q), dimensions={}\n"
                       "ROOT %y = $T multiply(%x, %qb)", ["bias", "linear(0.25, 0)"]),
    "scale_parameter": ("%sb = $T broadcast(%p4), dimensions={}\nROOT %y = $T multiply(%sb, %x)",
                        ["bias", "binary_mul"]),
    # a batch norm folded as TF lowers it: per-channel scale and shift computed from the parameters inside
    # the fusion (computed into scratch before the primitive, then binary post-ops)
    "batch_norm_computed": ("""
        %sq = f32[16] multiply(%p2, %p2)
        %eps = f32[] constant(0.001)
        %epsb = f32[16] broadcast(%eps), dimensions={}
        %var = f32[16] add(%sq, %epsb)
        %rs = f32[16] rsqrt(%var)
        %scale = f32[16] multiply(%rs, %p2)
        %sc = $T broadcast(%scale), dimensions={$C}
        %m = $T multiply(%x, %sc)
        %shift = f32[16] multiply(%p2, %rs)
        %shb = $T broadcast(%shift), dimensions={$C}
        ROOT %y = $T subtract(%m, %shb)""", ["bias", "binary_mul", "binary_sub"]),
}
_PO_TEXT = {"relu": "dnnl_eltwise_relu, 0.0f, 0.0f", "linear(0.25, 0)": "dnnl_eltwise_linear, 0.25f, 0.0f"}


def _expected_source(op: str) -> str:
    if op.startswith("binary_"):
        return f"dnnl_post_ops_append_binary(po, dnnl_{op}"
    return "dnnl_post_ops_append_eltwise(po, " + _PO_TEXT.get(op, f"dnnl_eltwise_{op},")


@pytest.mark.parametrize("hero", ["dot", "conv"])
@pytest.mark.parametrize("case", list(EPILOGUES))
def test_epilogue_becomes_post_ops(case: str, hero: str, cache) -> None:
    epilogue, ops = EPILOGUES[case]
    exe = compile_text(output_fusion(_for_hero(epilogue, hero), hero), cache)
    src = exe.source
    assert uses_dnnl(exe)
    body = src[src.index("static int comp_0"):]
    assert "for (int64_t" not in body[body.rindex("dnnl_primitive_execute"):]  # no elemental loop after it
    # loops before it only compute small side operands (a batch norm's scale and shift), never the result
    assert body.count("for (int64_t") == (2 if case == "batch_norm_computed" else 0)
    appended = [line for line in src.splitlines() if "dnnl_post_ops_append" in line]
    assert len(appended) == len(ops) - 1
    for line, op in zip(appended, ops[1:]):
        assert _expected_source(op) in line
    check_numbers(exe)


# --- partial matches: the library result feeds an elemental loop ------------------------------------

PARTIAL = {  # (epilogue, post-ops expected before the elemental loop)
    "leaky_relu_after_bias": (ZERO + "%gt = pred[6,16] compare(%x, %z), direction=GT\n%a2 = f32[] constant(0.2)\n"
                              "%a2b = $T broadcast(%a2), dimensions={}\n%ax = $T multiply(%a2b, %x)\n"
                              "ROOT %y = $T select(%gt, %x, %ax)", 0),
    "sine_after_tanh": ("%m = $T tanh(%x)\nROOT %y = $T sine(%m)", 1),
    "hero_read_twice": (ZERO + "%m = $T maximum(%d, %z)\nROOT %y = $T add(%m, %d)", -1),
    # a small side value computed from the library result itself cannot be computed before it
    "side_from_the_result": ("%row = f32[1,16] slice(%d), slice={[0:1], [0:16]}\n%rv = f32[16] reshape(%row)\n"
                             "%sc = $T broadcast(%rv), dimensions={1}\nROOT %y = $T multiply(%x, %sc)", -1),
}


@pytest.mark.parametrize("case", list(PARTIAL))
def test_unmatched_epilogue_runs_after_the_library_op(case: str, cache) -> None:
    epilogue, n_post_ops = PARTIAL[case]
    exe = compile_text(output_fusion(epilogue), cache)
    src = exe.source
    assert uses_dnnl(exe)
    assert "for (int64_t" in src[src.index("static int comp_0"):]
    assert src.count("dnnl_post_ops_append") == max(n_post_ops, 0)
    assert ("DNNL_ARG_BIAS" in src) == (n_post_ops >= 0)
    check_numbers(exe)


# --- NaN: clamps that would drop it run in a loop after the library op ---------------------------------

NAN_TAILS = {  # (epilogue, post-ops before the loop, whether the loop finishes the result in place)
    "relu_maximum": (ZERO + "ROOT %y = $T maximum(%x, %z)", ["bias"], True),
    "relu_tf_select": (ZERO + "%lt = pred[6,16] compare(%x, %z), direction=LT\nROOT %y = $T select(%lt, %z, %x)",
                       ["bias"], True),
    "relu6_tf_select": (RELU_TF + SIX_TF + "ROOT %y = $T select(%gt, %six, %r)", ["bias"], True),
    "relu6_clamp": (ZERO + SIX + "ROOT %y = $T clamp(%z, %x, %six)", ["bias"], True),
    "relu6_min_max": (ZERO + SIX + "%m = $T maximum(%z, %x)\nROOT %y = $T minimum(%m, %six)", ["bias"], True),
    "min_only": (SIX + "ROOT %y = $T minimum(%x, %six)", ["bias"], True),
    # NaN -> 6 here, where oneDNN's clip(-inf, 6) gives -inf
    "min_select_nan_to_k": (SIX + "%lt = pred[6,16] compare(%x, %six), direction=LT\n"
                            "ROOT %y = $T select(%lt, %x, %six)", ["bias"], True),
    "max_scalar_parameter": ("%sb = $T broadcast(%p4), dimensions={}\nROOT %y = $T maximum(%x, %sb)", ["bias"], True),
    "exp": ("ROOT %y = $T exponential(%x)", ["bias"], True),  # oneDNN's exp(NaN) is +inf
    "scaled_relu": (ZERO + "%sb = $T broadcast(%p4), dimensions={}\n%m = $T multiply(%x, %sb)\n"
                    "ROOT %y = $T maximum(%m, %z)", ["bias", "binary_mul"], True),
    # a residual as a post-op (oneDNN is pointed at scratch if the result is the residual's buffer)
    "residual_then_relu": (ZERO + "%s = $T add(%x, %p3)\nROOT %y = $T maximum(%s, %z)", ["bias", "binary_add"], True),
    # the loop reads an operand as large as the result, which may share its buffer: from scratch
    "relu_then_residual": (ZERO + "%m = $T maximum(%x, %z)\nROOT %y = $T add(%p3, %m)", ["bias"], False),
    "max_side": ("ROOT %y = $T maximum(%x, %p3)", ["bias"], False),
    # TF's MaxPool input: NaN replaced by the lowest float (no post-op, but only once NaN is ruled out)
    "relu_nan_to_lowest": (RELU_TF + "%lo = f32[] constant(-3.40282347e+38)\n%lob = $T broadcast(%lo), "
                           "dimensions={}\n%ne = pred[6,16] compare(%r, %r), direction=NE\n"
                           "ROOT %y = $T select(%ne, %lob, %r)", ["bias"], True),
}


def _for_hero(epilogue: str, hero: str) -> str:
    return epilogue.replace("pred[6,16]", "pred[1,6,6,16]") if hero == "conv" else epilogue


def _library_dst(src: str) -> str:
    """The buffer variable oneDNN writes its result to (behind the scratch guard for an aliased residual)."""
    guarded = re.search(r"void\* const dst_ = alias_ \? \(void\*\)\(.*?\) : \(void\*\)\((\w+)\);", src)
    if guarded:
        return guarded.group(1)
    return re.search(r"dnnl_memory_set_data_handle\(st_->dnnl0_m\[3\], \(void\*\)\((\w+)\)\)", src).group(1)


@pytest.mark.parametrize("hero", ["dot", "conv"])
@pytest.mark.parametrize("case", list(NAN_TAILS))
def test_nan_keeping_clamp_runs_after_the_library_op(case: str, hero: str, cache) -> None:
    epilogue, ops, in_place = NAN_TAILS[case]
    exe = compile_text(output_fusion(_for_hero(epilogue, hero), hero), cache)
    src = exe.source
    assert uses_dnnl(exe)
    body = src[src.index("static int comp_0"):]
    # the NaN-keeping primitive is dnnl0 (a guarded fast one, if any, is dnnl1: FAST_PATHS)
    assert "for (int64_t" in body[body.index("dnnl_primitive_execute(st_->dnnl0_prim"):].split("dnnl1")[0]
    appended = [line for line in _init_function(src, 0).splitlines() if "dnnl_post_ops_append" in line]
    assert len(appended) == len(ops) - 1
    for line, op in zip(appended, ops[1:]):
        assert _expected_source(op) in line
    result = re.search(r"float\* const (\w+) = \(float\*\)\(r\[0\]\);", body).group(1)
    assert (_library_dst(body.split("st_->dnnl1_")[0]) == result) == in_place
    check_numbers(exe)


def _init_function(src: str, k: int) -> str:
    start = src.index(f"static int tfxla_dnnl_init_{k}(")
    return src[start:src.index("\n}\n", start)]


# --- NaN: the fast primitive with the clamp post-ops, run when the inputs prove no NaN can arise -----

FAST_PATHS = {  # NAN_TAILS case -> the post-ops of its guarded fast primitive after the bias
    "relu_tf_select": ["relu"], "relu6_clamp": ["clip"], "min_only": ["clip"], "exp": ["exp"],
    "max_scalar_parameter": ["binary_max"], "relu_then_residual": ["relu", "binary_add"],
    "scaled_relu": ["binary_mul", "relu"], "relu_nan_to_lowest": ["relu"],
}


@pytest.mark.parametrize("hero", ["dot", "conv"])
@pytest.mark.parametrize("case", list(FAST_PATHS))
def test_fast_primitive_runs_when_the_inputs_bound_the_result(case: str, hero: str, cache) -> None:
    """Both primitives are built at init; the call runs the NaN-keeping one (dnnl0, then the loop) only when
    its check of max|input| * max|weights| * K (+ bias, side operands) cannot prove the chain finite."""
    exe = compile_text(output_fusion(_for_hero(NAN_TAILS[case][0], hero), hero), cache)
    src = exe.source
    body = src[src.index("static int comp_0"):]
    fast = [line for line in _init_function(src, 1).splitlines() if "dnnl_post_ops_append" in line]
    assert len(fast) == len(FAST_PATHS[case])
    for line, op in zip(fast, FAST_PATHS[case]):
        assert _expected_source(op) in line
    check = re.search(r"int (fast\d+);", body).group(1)
    assert body.index(f"if (!{check})") < body.index("dnnl0_prim") < body.index("\n  else {") < body.index("dnnl1_prim")
    assert "tfxla_absmax_f32((const void*)(b2)" in body  # the activations, checked per call
    check_numbers(exe)


def _overflowing_args(module, hero: str, where: str) -> list[np.ndarray]:
    """Finite activations for ``output_fusion`` with NaN before the clamp: a NaN weight, a NaN bias, or
    products overflowing to +inf (3e38 * 10, all of one sign: +inf in any summation order) scaled by 0
    (``scaled_relu``). A fast primitive chosen without a check would clamp those NaN to a bound."""
    a, w, b, r, _ = args_for(module, seed=5)
    if where == "overflow":
        a[(0, 0) if hero == "dot" else (0, 1, 1, 0)] = a[(0, 1) if hero == "dot" else (0, 1, 1, 1)] = 3e38
        w[..., 0, :] = w[..., 1, :] = 10.0
    elif where == "weight":
        w[(3, 5) if hero == "dot" else (1, 1, 2, 5)] = np.nan
    else:
        b[7] = np.nan
    return [a, w, b, r, np.float32(0.0 if where == "overflow" else 0.5)]


@pytest.mark.parametrize("hero", ["dot", "conv"])
@pytest.mark.parametrize("case,where", [("scaled_relu", "overflow"), ("relu_tf_select", "weight"),
                                        ("relu6_clamp", "bias"), ("max_scalar_parameter", "weight"),
                                        ("min_only", "bias")])
def test_nan_from_finite_activations_is_kept(case: str, where: str, hero: str, cache) -> None:
    exe = compile_text(output_fusion(_for_hero(NAN_TAILS[case][0], hero), hero), cache)
    assert "tfxla_dnnl_init_1" in exe.source  # a fast primitive exists, and must not run for these
    args = _overflowing_args(exe.module, hero, where)
    assert np.isfinite(args[0]).all()
    got = np.asarray(exe(*args)[0], np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.asarray(hlo.evaluate(exe.module, *args)[0], np.float64)
    assert np.isnan(want).sum() >= 6
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("hero", ["dot", "conv"])
def test_nan_replaced_by_lowest_is_not_a_relu_post_op(hero: str, cache) -> None:
    """TF's MaxPool input, relu then select(x != x, lowest, x): the fast primitive (relu alone) must not run
    for a NaN weight, where the relu post-op would give 0 and the evaluator gives the lowest float."""
    exe = compile_text(output_fusion(_for_hero(NAN_TAILS["relu_nan_to_lowest"][0], hero), hero), cache)
    args = _overflowing_args(exe.module, hero, "weight")
    got = np.asarray(exe(*args)[0], np.float64)
    want = np.asarray(hlo.evaluate(exe.module, *args)[0], np.float64)
    assert (want == np.finfo(np.float32).min).sum() >= 6
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _special_args(module, hero: str) -> list[np.ndarray]:
    """Arguments for ``output_fusion``: NaN, +inf and -inf in three rows (dot) or pixels (conv) of the
    input and NaN in a few residual elements, so the epilogue sees NaN, +-inf and ordinary values."""
    a, w, b, r, _ = args_for(module, seed=3)
    spots = [(0, 0), (1, 0), (2, 0)] if hero == "dot" else [(0, 0, 0, 0), (0, 4, 4, 0), (0, 7, 2, 1)]
    for spot, value in zip(spots, (np.nan, np.inf, -np.inf)):
        a[spot] = value
    r.reshape(-1)[50:54] = np.nan
    return [a, w, b, r, np.float32(0.5)]


SPECIAL_CASES = [(EPILOGUES[c][0], c, h) for c in EPILOGUES for h in ("dot", "conv")] + \
    [(NAN_TAILS[c][0], c, h) for c in NAN_TAILS for h in ("dot", "conv")] + [(PARTIAL[c][0], c, "dot") for c in PARTIAL]
KNOWN = {"gelu_erf": "oneDNN's gelu_erf(+inf) is NaN, the evaluator's +inf"}


@pytest.mark.parametrize("epilogue,case,hero", [
    pytest.param(e, c, h, id=f"{c}-{h}", marks=[pytest.mark.xfail(reason=KNOWN[c], strict=True)] if c in KNOWN else [])
    for e, c, h in SPECIAL_CASES])
def test_nan_and_inf_match_the_evaluator(epilogue: str, case: str, hero: str, cache) -> None:
    exe = compile_text(output_fusion(_for_hero(epilogue, hero), hero), cache)
    args = _special_args(exe.module, hero)
    got = np.asarray(exe(*args)[0], np.float64)
    want = np.asarray(hlo.evaluate(exe.module, *args)[0], np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("relu", [False, True], ids=["add", "relu_of_add"])
def test_result_in_place_of_the_residual(relu: bool, cache) -> None:
    """Buffer assignment may write a fusion's result over a dying operand read only elementwise, e.g. the
    residual: oneDNN accumulates in dst before its binary post-op reads that operand, so the kernel routes
    dst through scratch when they alias (here: the caller passes the residual's buffer as the output);
    with a relu after the residual, the loop then finishes the result in place."""
    import ctypes

    m, k, n = 64, 784, 256
    root = (f"%s = f32[{m},{n}] add(%d, %p2)\n  %c0 = f32[] constant(0)\n  %z = f32[{m},{n}] broadcast(%c0), "
            f"dimensions={{}}\n  ROOT %y = f32[{m},{n}] maximum(%s, %z)") if relu else \
        f"ROOT %y = f32[{m},{n}] add(%d, %p2)"
    text = f"""HloModule residual_in_place
%fused (p0: f32[{m},{k}], p1: f32[{k},{n}], p2: f32[{m},{n}]) -> f32[{m},{n}] {{
  %p0 = f32[{m},{k}] parameter(0)
  %p1 = f32[{k},{n}] parameter(1)
  %p2 = f32[{m},{n}] parameter(2)
  %d = f32[{m},{n}] dot(%p0, %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  {root}
}}
ENTRY %main (a: f32[{m},{k}], w: f32[{k},{n}], r: f32[{m},{n}]) -> f32[{m},{n}] {{
  %a = f32[{m},{k}] parameter(0)
  %w = f32[{k},{n}] parameter(1)
  %r = f32[{m},{n}] parameter(2)
  ROOT %f = f32[{m},{n}] fusion(%a, %w, %r), kind=kOutput, calls=%fused
}}
"""
    exe = compile_text(text, cache)
    assert "const int alias_ =" in exe.source
    a, w, r = (np.random.default_rng(s).standard_normal(d).astype(np.float32) for s, d in
               ((0, (m, k)), (1, (k, n)), (2, (m, n))))
    want = a.astype(np.float64) @ w + r
    want = np.maximum(want, 0) if relu else want
    assert ("for (int64_t" in exe.source[exe.source.index("static int comp_0"):]) == relu
    kernel = exe.kernel
    ins = (ctypes.c_void_p * 3)(a.ctypes.data, w.ctypes.data, r.ctypes.data)
    outs = (ctypes.c_void_p * 1)(r.ctypes.data)
    dims = (ctypes.c_int64 * 6)(m, k, k, n, m, n)
    err = ctypes.create_string_buffer(256)
    assert kernel.lib.tfxla_run(kernel._state, ins, dims, outs, kernel._scratch_ptr, None, err, 256) == 0, err.value
    np.testing.assert_allclose(r, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan_weight"])
def test_constant_weights_are_checked_once_at_init(nan: bool, cache) -> None:
    """Constant weights' max|w| is computed in tfxla_init (+inf with a NaN: the NaN-keeping path always)."""
    w = "{{1, -2, 0.5, 3, 1}, {0, 1, -1, 2, 0.25}, {2, 0.5, -3, %s, 1}}" % ("nan" if nan else "-0.5")
    text = f"""HloModule const_weights
%fused (p0: f32[4,3]) -> f32[4,5] {{
  %p0 = f32[4,3] parameter(0)
  %w = f32[3,5] constant({w})
  %d = f32[4,5] dot(%p0, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %c0 = f32[] constant(0)
  %z = f32[4,5] broadcast(%c0), dimensions={{}}
  ROOT %y = f32[4,5] maximum(%d, %z)
}}
ENTRY %main (a: f32[4,3]) -> f32[4,5] {{
  %a = f32[4,3] parameter(0)
  ROOT %f = f32[4,5] fusion(%a), kind=kOutput, calls=%fused
}}
"""
    exe = compile_text(text, cache)
    init = exe.source[exe.source.index("int tfxla_init("):]
    assert re.search(r"st->dnnl_absmax0 = tfxla_absmax_f32\(\(const void\*\)\w+, 15, 0\);", init)
    a = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    got = np.asarray(exe(a)[0], np.float64)
    want = np.asarray(hlo.evaluate(exe.module, a)[0], np.float64)
    assert np.isnan(want).any() == nan
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
