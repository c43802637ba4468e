"""dot, convolution and output fusions through oneDNN (backends/cpu/kernels_dnnl.py, dnnl.py, dnnl_epilogue.py).

Every module is checked for structure (the generated C runs the oneDNN primitive, with the expected
post-ops, or declines to the elemental loops) and for numbers against ``hlo.evaluate``. oneDNN sums
in its own order (blocked, vectorized), so f32 results are not bit-exact with the evaluator: they are
compared at rtol 1e-4 / atol 1e-4 (inputs are standard normal and K <= 784, so sums are O(10) and
reassociation moves them by ~1e-6 relative; gelu/erf/tanh post-ops are oneDNN's own approximations, a
few ulp). bf16/f16 results are rounded once from f32 accumulation like the evaluator: rtol 2e-2 (a couple
of ulps of bf16 where the accumulation order moves a value across a rounding boundary). TF
(tf.matmul, tf.nn.conv2d, depthwise_conv2d) is compared on the same inputs at the same tolerance.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hlo
from backends.cpu import CodegenOptions, CompileOptions, compile as compile_module, dnnl

pytestmark = pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("dnnl_kernels"))


def compile_text(text: str, cache: str, use_dnnl: bool = True):
    return compile_module(hlo.parse_module(text), CompileOptions(codegen=CodegenOptions(dnnl=use_dnnl),
                                                                 cache_dir=cache))


def args_for(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dt = p.shape.dtype.numpy
        if np.issubdtype(dt, np.integer):
            out.append(rng.integers(-3, 4, p.shape.dims).astype(dt))
        else:
            out.append(rng.standard_normal(p.shape.dims).astype(np.float32).astype(dt))
    return out


def check_numbers(exe, rtol: float = 1e-4, seed: int = 0) -> None:
    args = args_for(exe.module, seed)
    for got, want in zip(exe(*args), hlo.evaluate(exe.module, *args)):
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=rtol)


def uses_dnnl(exe) -> bool:
    return "dnnl_primitive_execute(" in exe.source and "tfxla_dnnl_init_0" in exe.source


def entry(params: str, root: str) -> str:
    """A module whose ENTRY has the given parameter lines and ROOT instruction."""
    names = ", ".join(p.split("=")[0].strip().lstrip("%") + ": " + p.split("=")[1].split()[0]
                      for p in params.strip().splitlines())
    result = root.split("=")[1].split()[0]
    lines = textwrap.indent(params.strip(), "  ")
    return f"HloModule m\nENTRY %main ({names}) -> {result} {{\n{lines}\n  ROOT {root.strip()}\n}}\n"


# --- dot ---------------------------------------------------------------------------------------

DOTS = {
    "2d": ("%a = f32[6,10]{1,0} parameter(0)\n%w = f32[10,16]{1,0} parameter(1)",
           "%d = f32[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}", True),
    "lhs_transposed": ("%a = f32[10,6]{1,0} parameter(0)\n%w = f32[10,16]{1,0} parameter(1)",
                       "%d = f32[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}", True),
    "rhs_transposed": ("%a = f32[6,10]{1,0} parameter(0)\n%w = f32[16,10]{1,0} parameter(1)",
                       "%d = f32[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}", True),
    "batched": ("%a = f32[3,6,10]{2,1,0} parameter(0)\n%w = f32[3,10,5]{2,1,0} parameter(1)",
                "%d = f32[3,6,5]{2,1,0} dot(%a, %w), lhs_batch_dims={0}, rhs_batch_dims={0}, "
                "lhs_contracting_dims={2}, rhs_contracting_dims={1}", True),
    "batch_dim_inside": ("%a = f32[6,3,10]{2,1,0} parameter(0)\n%w = f32[10,3,5]{2,1,0} parameter(1)",
                         "%d = f32[3,6,5]{2,1,0} dot(%a, %w), lhs_batch_dims={1}, rhs_batch_dims={1}, "
                         "lhs_contracting_dims={2}, rhs_contracting_dims={0}", True),
    "two_batch_dims": ("%a = f32[2,3,4,7]{3,2,1,0} parameter(0)\n%w = f32[2,3,7,5]{3,2,1,0} parameter(1)",
                       "%d = f32[2,3,4,5]{3,2,1,0} dot(%a, %w), lhs_batch_dims={0,1}, rhs_batch_dims={0,1}, "
                       "lhs_contracting_dims={3}, rhs_contracting_dims={2}", True),
    "vector_matrix": ("%a = f32[10]{0} parameter(0)\n%w = f32[10,16]{1,0} parameter(1)",
                      "%d = f32[16]{0} dot(%a, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}", True),
    "matrix_vector": ("%a = f32[6,10]{1,0} parameter(0)\n%w = f32[10]{0} parameter(1)",
                      "%d = f32[6]{0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}", True),
    "merged_free_dims": ("%a = f32[2,3,10]{2,1,0} parameter(0)\n%w = f32[10,4,2]{2,1,0} parameter(1)",
                         "%d = f32[2,3,4,2]{3,2,1,0} dot(%a, %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
                         True),
    "two_contracting_dims": ("%a = f32[6,2,5]{2,1,0} parameter(0)\n%w = f32[2,5,4]{2,1,0} parameter(1)",
                             "%d = f32[6,4]{1,0} dot(%a, %w), lhs_contracting_dims={1,2}, "
                             "rhs_contracting_dims={0,1}", True),
    "column_major_result": ("%a = f32[6,10]{1,0} parameter(0)\n%w = f32[10,16]{1,0} parameter(1)",
                            "%d = f32[6,16]{0,1} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                            True),
    # contracting dims out of memory order cannot be merged into one K: the elemental loop runs it
    "unmergeable_contracting": ("%a = f32[6,5,2]{2,1,0} parameter(0)\n%w = f32[2,5,4]{2,1,0} parameter(1)",
                                "%d = f32[6,4]{1,0} dot(%a, %w), lhs_contracting_dims={2,1}, "
                                "rhs_contracting_dims={0,1}", False),
    "s32_elemental": ("%a = s32[6,10]{1,0} parameter(0)\n%w = s32[10,16]{1,0} parameter(1)",
                      "%d = s32[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}", False),
    "bf16": ("%a = bf16[6,32]{1,0} parameter(0)\n%w = bf16[32,16]{1,0} parameter(1)",
             "%d = bf16[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "bf16"),
    "bf16_to_f32": ("%a = bf16[6,32]{1,0} parameter(0)\n%w = bf16[32,16]{1,0} parameter(1)",
                    "%d = f32[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                    "bf16"),
    # bf16 and f16 run on oneDNN only where oneDNN computes them natively (AVX512-BF16, AVX512-FP16 or
    # AMX; asked of oneDNN itself); elsewhere the elemental loops run them, with the same numbers
    "f16": ("%a = f16[6,32]{1,0} parameter(0)\n%w = f16[32,16]{1,0} parameter(1)",
            "%d = f16[6,16]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f16"),
}


def _expects_library(library: bool | str) -> bool:
    if isinstance(library, str):
        install = dnnl.find_install()
        return install is not None and dnnl.supports(install, hlo.PrimitiveType(library))
    return library


@pytest.mark.parametrize("case", list(DOTS))
def test_dot_configurations(case: str, cache) -> None:
    params, root, library = DOTS[case]
    library = _expects_library(library)
    exe = compile_text(entry(params, root), cache)
    assert uses_dnnl(exe) == library
    narrow = any(t in params for t in ("bf16", "f16"))
    check_numbers(exe, rtol=2e-2 if narrow else 1e-4)
    if library:  # the primitive is built once in init; a call only re-points memory and executes
        comp = exe.source[exe.source.index("static int comp_0"):]
        assert "dnnl_memory_set_data_handle" in comp and "primitive_desc_create" not in comp


def test_constant_weights_are_packed_once_at_init(cache) -> None:
    w = np.random.default_rng(1).standard_normal((10, 16)).astype(np.float32)
    b = hlo.ComputationBuilder("main")
    a = b.parameter(hlo.Shape.array("f32", (6, 10)))
    d = b.dot(a, b.constant(w), lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    module = hlo.module_of("packed", b.build(d))
    exe = compile_module(module, CompileOptions(cache_dir=cache))
    assert "tfxla_dnnl_pack(eng, st->dnnl_stream, md[1], (void*)k_0" in exe.source
    assert "dnnl_format_tag_any" in exe.source
    x = np.random.default_rng(2).standard_normal((6, 10)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(exe(x)[0], x @ w, rtol=1e-4, atol=1e-4)


# --- convolution ----------------------------------------------------------------------------------

CONVS = {
    "nhwc_stride2_pad": ("f32[2,9,9,6]", "f32[3,3,6,8]", "f32[2,5,5,8]",
                         "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", True),
    "asymmetric_padding": ("f32[1,8,7,4]", "f32[3,2,4,5]", "f32[1,4,8,5]",
                           "window={size=3x2 stride=2x1 pad=0_1x1_1}, dim_labels=b01f_01io->b01f", True),
    "dilated": ("f32[1,10,10,3]", "f32[3,3,3,4]", "f32[1,6,6,4]",
                "window={size=3x3 rhs_dilate=2x2}, dim_labels=b01f_01io->b01f", True),
    "grouped": ("f32[1,6,6,8]", "f32[3,3,2,12]", "f32[1,6,6,12]",
                "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4", True),
    "depthwise_multiplier": ("f32[1,8,8,6]", "f32[3,3,1,12]", "f32[1,8,8,12]",
                             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=6",
                             True),
    "pointwise": ("f32[1,7,7,24]", "f32[1,1,24,40]", "f32[1,7,7,40]",
                  "window={size=1x1}, dim_labels=b01f_01io->b01f", True),
    "nchw": ("f32[2,3,8,8]", "f32[5,3,3,3]", "f32[2,5,6,6]", "window={size=3x3}, dim_labels=bf01_oi01->bf01", True),
    "conv1d": ("f32[2,12,3]", "f32[3,3,4]", "f32[2,12,4]", "window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f", True),
    # batch groups and lhs dilation: oneDNN's weight and data gradient primitives (dnnl_conv.py)
    "batch_group_weight_gradient": ("f32[4,5,5,3]", "f32[3,3,3,6]", "f32[2,3,3,6]",
                                    "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2", True),
    "lhs_dilated_data_gradient": ("f32[1,4,4,2]", "f32[3,3,2,3]", "f32[1,7,7,3]",
                                  "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f", True),
    "negative_padding_elemental": ("f32[1,8,8,2]", "f32[3,3,2,3]", "f32[1,4,4,3]",
                                   "window={size=3x3 pad=-1_-1x-1_-1}, dim_labels=b01f_01io->b01f", False),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_convolution_configurations(case: str, cache) -> None:
    x, w, out, attrs, library = CONVS[case]
    text = entry(f"%x = {x} parameter(0)\n%w = {w} parameter(1)", f"%c = {out} convolution(%x, %w), {attrs}")
    exe = compile_text(text, cache)
    assert uses_dnnl(exe) == library
    if library:  # parameter weights (a weight gradient: its result): oneDNN picks the layout, a reorder runs per call
        backward_weights = "dnnl_convolution_backward_weights_primitive_desc_create" in exe.source
        reorder = "(&rpd, wmd, eng, md[4], eng, NULL)" if backward_weights else "(&rpd, md[1], eng, wmd, eng, NULL)"
        assert f"dnnl_reorder_primitive_desc_create{reorder}" in exe.source
    check_numbers(exe)


def test_parameter_weights_are_reordered_again_when_they_change_in_place(cache) -> None:
    """Reordered weights are reused while the parameter's bytes equal those last reordered (memcmp): weights
    changed in the same buffer (a variable assigned in place) or passed in another buffer are reordered."""
    x, w, out, attrs, _ = CONVS["depthwise_multiplier"]
    exe = compile_text(entry(f"%x = {x} parameter(0)\n%w = {w} parameter(1)",
                             f"%c = {out} convolution(%x, %w), {attrs}"), cache)
    assert "memcmp(st_->dnnl0_wcopy" in exe.source
    a, wt = args_for(exe.module, seed=4)
    for step in range(4):
        if step == 2:
            wt *= -0.5  # same buffer, new values
        elif step == 3:
            wt = wt.copy() + 1.0  # another buffer
        got = exe(a, wt)[0]
        np.testing.assert_allclose(got, np.asarray(hlo.evaluate(exe.module, a, wt)[0]), rtol=1e-4, atol=1e-4,
                                   err_msg=f"call {step}")


def test_disabled_or_missing_library_uses_the_elemental_loops(cache, monkeypatch, caplog) -> None:
    params, root, _ = DOTS["2d"]
    text = entry(params, root)
    assert not uses_dnnl(compile_text(text, cache, use_dnnl=False))
    monkeypatch.setattr(dnnl, "_cached_install", lambda: None)
    monkeypatch.setattr(dnnl, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        first = compile_text(text, cache)
        compile_text(text, cache)
    assert not uses_dnnl(first)
    check_numbers(first, rtol=1e-5)
    warnings = [r for r in caplog.records if "oneDNN 3.x not found" in r.getMessage()]
    assert len(warnings) == 1 and "pip install onednn-cpu-tbb==2023.2.0" in warnings[0].getMessage()


def test_discovery_is_relative_to_the_prefix(tmp_path) -> None:
    assert dnnl.find_install([tmp_path]) is None
    found = dnnl.find_install([sys.prefix])
    assert found is not None and found.version[0] == 3
    assert found.lib_dir.startswith(sys.prefix) and found.include_dir.startswith(sys.prefix)


def _fake_install(root, runtime: str) -> None:
    inc = root / "include" / "oneapi" / "dnnl"
    inc.mkdir(parents=True)
    (inc / "dnnl.h").write_text("")
    (inc / "dnnl_version.h").write_text("#define DNNL_VERSION_MAJOR 3\n#define DNNL_VERSION_MINOR 2\n"
                                        "#define DNNL_VERSION_PATCH 0\n")
    (inc / "dnnl_config.h").write_text(f"#define DNNL_CPU_RUNTIME DNNL_RUNTIME_{runtime}\n")
    (root / "lib").mkdir()
    (root / "lib" / "libdnnl.so.3").write_bytes(b"")


def test_discovery_reads_the_threading_runtime(tmp_path, monkeypatch, caplog) -> None:
    """The install here is the TBB build; an OpenMP build is found too, with one warning saying why not."""
    assert dnnl.find_install([sys.prefix]).runtime == "tbb"
    _fake_install(tmp_path, "OMP")
    found = dnnl.find_install([tmp_path])
    assert found is not None and found.runtime == "omp" and found.library == ":libdnnl.so.3"
    monkeypatch.setattr(dnnl, "_cached_install", lambda: found)
    monkeypatch.setattr(dnnl, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        assert dnnl.installation() is found and dnnl.installation() is found
    warnings = [r.getMessage() for r in caplog.records if "threading runtime" in r.getMessage()]
    assert len(warnings) == 1 and "uses the omp threading runtime, not TBB" in warnings[0]
    assert "pip install onednn-cpu-tbb==2023.2.0" in warnings[0]


def test_shared_object_loads_without_library_path(cache) -> None:
    exe = compile_text(entry(*DOTS["2d"][:2]), cache)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1])}
    code = ("import numpy as np, sys; from backends.cpu.runtime import Kernel; "
            f"k = Kernel({str(exe.kernel.path)!r}); "
            "print(k.run(np.ones((6, 10), np.float32), np.ones((10, 16), np.float32))[0][0, 0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10.0"


def test_library_ops_inside_a_while_body(cache) -> None:
    text = """HloModule loop
%body (s: (s32[], f32[4,4], f32[4,4])) -> (s32[], f32[4,4], f32[4,4]) {
  %s = (s32[], f32[4,4], f32[4,4]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[4,4] get-tuple-element(%s), index=1
  %w = f32[4,4] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %d = f32[4,4] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[4,4] tanh(%d)
  ROOT %r = (s32[], f32[4,4], f32[4,4]) tuple(%i2, %t, %w)
}
%cond (s: (s32[], f32[4,4], f32[4,4])) -> pred[] {
  %s = (s32[], f32[4,4], f32[4,4]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
ENTRY %main (x: f32[4,4], w: f32[4,4]) -> f32[4,4] {
  %x = f32[4,4] parameter(0)
  %w = f32[4,4] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,4], f32[4,4]) tuple(%zero, %x, %w)
  %loop = (s32[], f32[4,4], f32[4,4]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[4,4] get-tuple-element(%loop), index=1
}
"""
    exe = compile_text(text, cache)
    assert "tfxla_state* const st_ = tfxla_st;" in exe.source
    check_numbers(exe)


# --- against TensorFlow, through the lowering (and the fusion pass) ----------------------------------

@pytest.fixture(scope="module")
def tf():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    return tensorflow


def _lowered(tf, fn, *args, fuse: bool = False):
    from hlo.lowering.tf_function import lower_concrete_function

    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in args]
    module = lower_concrete_function(tf.function(fn, autograph=False).get_concrete_function(*specs))
    if fuse:
        from hlo.passes.fusion import FusionPass
        module = FusionPass().run(module)
    return module


TF_CASES = {  # name -> (function of (tf, *inputs), input shapes); "_fused" cases go through the fusion pass
    "matmul": (lambda tf, x, w: tf.matmul(x, w), [(64, 784), (784, 512)]),
    "matmul_transpose_b": (lambda tf, x, w: tf.matmul(x, w, transpose_b=True), [(8, 33), (20, 33)]),
    "batch_matmul": (lambda tf, x, w: tf.matmul(x, w), [(3, 5, 7), (3, 7, 4)]),
    "conv2d_same_stride2": (lambda tf, x, w: tf.nn.conv2d(x, w, 2, "SAME"), [(2, 15, 15, 8), (3, 3, 8, 16)]),
    "conv2d_valid_dilated": (lambda tf, x, w: tf.nn.conv2d(x, w, 1, "VALID", dilations=2),
                             [(1, 12, 12, 4), (3, 3, 4, 6)]),
    "depthwise_same": (lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
                       [(1, 14, 14, 32), (3, 3, 32, 1)]),
    "depthwise_stride2_multiplier": (lambda tf, x, w: tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME"),
                                     [(1, 15, 15, 8), (3, 3, 8, 2)]),
    "conv_bias_relu": (lambda tf, x, w: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME") + w[0, 0, 0]),
                       [(1, 10, 10, 16), (3, 3, 16, 16)]),
    "dense_bias_relu6_fused": (lambda tf, x, w, b: tf.nn.relu6(tf.nn.bias_add(tf.matmul(x, w), b)),
                               [(16, 24), (24, 32), (32,)]),
    "dense_gelu_tanh_fused": (lambda tf, x, w, b: tf.nn.gelu(tf.matmul(x, w) + b, approximate=True),
                              [(16, 24), (24, 32), (32,)]),
    "dense_silu_fused": (lambda tf, x, w, b: tf.nn.silu(tf.matmul(x, w) + b), [(16, 24), (24, 32), (32,)]),
    "dense_residual_fused": (lambda tf, x, w, b: tf.nn.relu(tf.matmul(x, w) + b) + x, [(16, 24), (24, 24), (24,)]),
}


@pytest.mark.parametrize("case", list(TF_CASES))
def test_against_tensorflow(case: str, tf, cache) -> None:
    fn, shapes = TF_CASES[case]
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    f = lambda *a: fn(tf, *a)  # noqa: E731
    module = _lowered(tf, f, *args, fuse=case.endswith("_fused"))
    exe = compile_module(module, CompileOptions(cache_dir=cache))
    assert uses_dnnl(exe)
    if case.endswith("_fused"):  # the epilogue became post-ops; only relu/relu6 (they keep NaN) run in a loop
        assert "kind=kOutput" in module.to_text()
        has_loop = "for (int64_t" in exe.source[exe.source.index("static int comp_0"):]
        assert has_loop == (case in ("dense_bias_relu6_fused", "dense_residual_fused"))
    (got,) = exe(*args)
    want = f(*[tf.constant(a) for a in args]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, hlo.evaluate(module, *args)[0], rtol=1e-4, atol=1e-4)


def test_primitive_creation_failure_is_an_init_error(cache, monkeypatch) -> None:
    """A primitive oneDNN refuses fails tfxla_init with the instruction and call named; the partly built
    state is torn down (no leak or crash)."""
    from backends.cpu import kernels_dnnl
    from backends.cpu.runtime import KernelError

    real = kernels_dnnl._plan_conv

    def wrong_stride(*args):
        plan = real(*args)
        plan.conv = dataclasses.replace(plan.conv, strides=(3, 3))  # no longer gives the output dims
        return plan
    monkeypatch.setattr(kernels_dnnl, "_plan_conv", wrong_stride)
    monkeypatch.setitem(kernels_dnnl._PLANS, hlo.Opcode.CONVOLUTION, wrong_stride)
    x, w, out, attrs, _ = CONVS["nhwc_stride2_pad"]
    text = entry(f"%x = {x} parameter(0)\n%w = {w} parameter(1)", f"%c = {out} convolution(%x, %w), {attrs}")
    with pytest.raises(KernelError, match=r"kernel init failed: oneDNN convolution for %c: "
                                          r"dnnl_convolution_forward_primitive_desc_create\(.*\) failed: "
                                          r"invalid_arguments"):
        compile_text(text, cache).kernel  # loading the shared object runs tfxla_init


def test_concurrent_calls_on_one_state(cache) -> None:
    """The launch op may call one kernel from several threads with one state (each call its own scratch):
    the oneDNN memory objects in the state are re-pointed under the state's mutex."""
    import ctypes
    import threading

    exe = compile_text(entry("%a = f32[256,96] parameter(0)\n%w = f32[96,512] parameter(1)",
                             "%d = f32[256,512] dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                       cache)
    lib, state = exe.kernel.lib, exe.kernel._state
    rng = np.random.default_rng(5)
    failures: list[str] = []

    def worker(seed: int) -> None:
        a = rng.standard_normal((256, 96)).astype(np.float32) + seed
        w = np.random.default_rng(seed).standard_normal((96, 512)).astype(np.float32)
        want = a @ w
        out = np.empty((256, 512), np.float32)
        ins = (ctypes.c_void_p * 2)(a.ctypes.data, w.ctypes.data)
        outs = (ctypes.c_void_p * 1)(out.ctypes.data)
        dims = (ctypes.c_int64 * 4)(256, 96, 96, 512)
        err = ctypes.create_string_buffer(256)
        scratch = np.empty(64, np.uint8)
        for _ in range(30):
            out[...] = np.nan
            if lib.tfxla_run(state, ins, dims, outs, scratch.ctypes.data, None, err, 256) != 0:
                failures.append(err.value.decode())
                return
            if not np.allclose(out, want, rtol=1e-4, atol=1e-3):
                failures.append(f"thread {seed}: wrong result")
                return
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
