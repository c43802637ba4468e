"""Column reductions inside a fusion whose root is something else (backends/cpu/column_reduce.py
``column_members``): a bias gradient ``reduce(g, dims={0,1,2})`` of an NHWC value fused with an SGD
update, BatchNorm's mean and variance (the variance reads the mean: two passes) and its gradients' sums
(the sum of dy and of dy*x: one pass over dy). Each is annotated ``column_reduce=true``, streamed into a
local array before the fusion's loop, matches ``hlo.evaluate`` (sums rtol 1e-5 / atol 1e-4 for f32:
reassociated by the parts and the vectorizer, over up to 28800 terms of N(0,1) values; max exact) and
is bitwise the same for 1, 2, 3 and 8 threads (the parts are fixed at code generation). Odd sizes:
C not a multiple of 16, N*H*W = 1, C = 1."""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from backends.cpu import CodegenOptions, CompileOptions, compile as compile_module, pipeline
from backends.cpu.column_reduce import column_parts
from backends.cpu.column_reductions import ColumnReductions
from backends.cpu.runtime import Kernel
from hlo.annotations import COLUMN_REDUCE
from tests.cpu_backend_util import kernel_cache  # noqa: F401  (a fixture)

THREADS = (1, 2, 3, 8)

REDUCERS = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] maximum(%a, %b)
}
"""

# The bias gradient of a convolution fused with SGD with momentum: (new weight, new velocity), plus the
# max of g over the rows (a second reducer in the same pass).
BIAS = """HloModule bias
{reducers}
%f (v: f32[{c}], g: f32[{x}], lr: f32[], w: f32[{c}]) -> (f32[{c}], f32[{c}], f32[{c}]) {{
  %v = f32[{c}] parameter(0)
  %g = f32[{x}] parameter(1)
  %lr = f32[] parameter(2)
  %w = f32[{c}] parameter(3)
  %z = f32[] constant(0)
  %ninf = f32[] constant(-inf)
  %m9 = f32[] constant(0.9)
  %bm = f32[{c}] broadcast(%m9), dimensions={{}}
  %mv = f32[{c}] multiply(%bm, %v)
  %db = f32[{c}] reduce(%g, %z), dimensions={{0,1,2}}, to_apply=%add
  %mx = f32[{c}] reduce(%g, %ninf), dimensions={{0,1,2}}, to_apply=%max
  %bl = f32[{c}] broadcast(%lr), dimensions={{}}
  %s = f32[{c}] multiply(%bl, %db)
  %u = f32[{c}] subtract(%mv, %s)
  %nw = f32[{c}] add(%w, %u)
  ROOT %t = (f32[{c}], f32[{c}], f32[{c}]) tuple(%nw, %u, %mx)
}}
ENTRY %main (v: f32[{c}], g: f32[{x}], lr: f32[], w: f32[{c}]) -> (f32[{c}], f32[{c}], f32[{c}]) {{
  %v = f32[{c}] parameter(0)
  %g = f32[{x}] parameter(1)
  %lr = f32[] parameter(2)
  %w = f32[{c}] parameter(3)
  ROOT %r = (f32[{c}], f32[{c}], f32[{c}]) fusion(%v, %g, %lr, %w), kind=kLoop, calls=%f
}}
"""

# BatchNorm training statistics (variance reads the mean: a second pass) and its gradient's two sums
# (sum dy, sum dy * (x - mean): one pass), in one multi-output fusion.
BATCHNORM = """HloModule bn
{reducers}
%f (x: f32[{x}], dy: f32[{x}]) -> (f32[{c}], f32[{c}], f32[{c}], f32[{c}]) {{
  %x = f32[{x}] parameter(0)
  %dy = f32[{x}] parameter(1)
  %z = f32[] constant(0)
  %n = f32[] constant({rows})
  %bn = f32[{c}] broadcast(%n), dimensions={{}}
  %sum = f32[{c}] reduce(%x, %z), dimensions={{0,1,2}}, to_apply=%add
  %mean = f32[{c}] divide(%sum, %bn)
  %bmean = f32[{x}] broadcast(%mean), dimensions={{3}}
  %xc = f32[{x}] subtract(%x, %bmean)
  %sq = f32[{x}] multiply(%xc, %xc)
  %ss = f32[{c}] reduce(%sq, %z), dimensions={{0,1,2}}, to_apply=%add
  %var = f32[{c}] divide(%ss, %bn)
  %sdy = f32[{c}] reduce(%dy, %z), dimensions={{0,1,2}}, to_apply=%add
  %dyx = f32[{x}] multiply(%dy, %xc)
  %sdyx = f32[{c}] reduce(%dyx, %z), dimensions={{0,1,2}}, to_apply=%add
  ROOT %t = (f32[{c}], f32[{c}], f32[{c}], f32[{c}]) tuple(%mean, %var, %sdy, %sdyx)
}}
ENTRY %main (x: f32[{x}], dy: f32[{x}]) -> (f32[{c}], f32[{c}], f32[{c}], f32[{c}]) {{
  %x = f32[{x}] parameter(0)
  %dy = f32[{x}] parameter(1)
  ROOT %r = (f32[{c}], f32[{c}], f32[{c}], f32[{c}]) fusion(%x, %dy), kind=kLoop, calls=%f
}}
"""


def _text(template: str, dims: tuple[int, ...]) -> str:
    return template.format(reducers=REDUCERS, c=dims[-1], x=",".join(map(str, dims)), rows=float(np.prod(dims[:-1])))


def _check(exe, args) -> list[np.ndarray]:
    outs = {t: Kernel(exe.path, exe.sha256, num_threads=t).run(*args) for t in THREADS}
    for t in THREADS[1:]:
        for k, (a, b) in enumerate(zip(outs[1], outs[t])):
            assert a.tobytes() == b.tobytes(), f"output {k}: {t} threads differ from 1"
    return outs[1]


# (dims, parallel_threshold): the default threshold (the CNN's size runs in 16 parts) and a low one, so
# that odd sizes take the parallel pass too.
SIZES = [((32, 30, 30, 32), None), ((7, 9, 11, 129), 512), ((64, 16, 16, 1), 512), ((1, 1, 1, 17), 512),
         ((7, 1, 1, 1), 2), ((2, 3, 3, 40), None)]


def _compile(text: str, threshold, cache) -> object:
    codegen = CodegenOptions() if threshold is None else CodegenOptions(parallel_threshold=threshold)
    return compile_module(hlo.parse_module(text), CompileOptions(codegen=codegen, cache_dir=str(cache)))


@pytest.mark.parametrize("dims, threshold", SIZES)
def test_a_bias_gradient_fused_with_its_update_streams_its_input(dims, threshold, kernel_cache) -> None:  # noqa: F811
    exe = _compile(_text(BIAS, dims), threshold, kernel_cache)
    fused = exe.module.computation("f")
    assert [i.name for i in fused.instructions if i.attr(COLUMN_REDUCE)] == ["db", "mx"]
    assert exe.source.count("column reduction: the input is streamed once") == 1  # one pass for both
    parts = column_parts(int(np.prod(dims[:-1])), dims[-1], 2, threshold or CodegenOptions().parallel_threshold)
    assert parts == {(32, 30, 30, 32): 16, (7, 9, 11, 129): 10, (64, 16, 16, 1): 2}.get(dims, 1)
    assert (f"tfxla_parallel({parts}, " in exe.source) == (parts > 1)
    rng = np.random.default_rng(0)
    c = dims[-1]
    args = [rng.standard_normal(c).astype(np.float32), rng.standard_normal(dims).astype(np.float32),
            np.float32(0.01), rng.standard_normal(c).astype(np.float32)]
    got = _check(exe, args)
    want = [np.asarray(w) for w in hlo.evaluate(exe.module, *args)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[2], want[2])
    db = args[1].reshape(-1, c).astype(np.float64).sum(0)  # and the sum itself, against NumPy in f64
    np.testing.assert_allclose(got[1], 0.9 * args[0] - 0.01 * db, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dims, threshold", [((8, 12, 12, 24), 512), ((3, 5, 7, 19), 512)])
def test_batchnorm_statistics_and_gradient_sums(dims, threshold, kernel_cache) -> None:  # noqa: F811
    exe = _compile(_text(BATCHNORM, dims), threshold, kernel_cache)
    fused = exe.module.computation("f")
    assert [i.name for i in fused.instructions if i.attr(COLUMN_REDUCE)] == ["sum", "ss", "sdy", "sdyx"]
    # sum, then (ss, sdy, sdyx) together: ss reads the mean, so it cannot share sum's pass.
    assert exe.source.count("column reduction: the input is streamed once") == 2
    parts = column_parts(int(np.prod(dims[:-1])), dims[-1], 1, threshold)  # 3 for both passes, or serial
    assert exe.source.count(f"tfxla_parallel({parts}, ") == (2 if parts > 1 else 0)
    rng = np.random.default_rng(1)
    args = [(rng.standard_normal(dims) * 2 + 1).astype(np.float32), rng.standard_normal(dims).astype(np.float32)]
    got = _check(exe, args)
    x, dy = (a.reshape(-1, dims[-1]).astype(np.float64) for a in args)
    mean = x.mean(0)
    for g, w in zip(got, [mean, ((x - mean) ** 2).mean(0), dy.sum(0), (dy * (x - mean)).sum(0)]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
    for g, w in zip(got, hlo.evaluate(exe.module, *args)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-4)


def test_a_member_too_large_for_a_local_array_keeps_the_generic_loop() -> None:
    m = hlo.parse_module(_text(BIAS, (2, 1, 1, 20000)))
    m = pipeline.optimize(m)
    assert [i.name for i in m.computation("f").instructions if i.attr(COLUMN_REDUCE)] == []
    assert ColumnReductions().run(m) is m


def test_the_members_of_one_fusion_share_a_budget() -> None:
    """Five members of 16384 elements: the first four fill FUSION_MEMBER_ELEMENTS, the fifth stays generic."""
    n = 16384
    reduces = "\n".join(f"  %r{k} = f32[{n}] reduce(%x{k}, %z), dimensions={{0}}, to_apply=%add" for k in range(5))
    scaled = "\n".join(f"  %c{k} = f32[] constant({k + 1})\n  %b{k} = f32[2,{n}] broadcast(%c{k}), dimensions={{}}\n"
                       f"  %x{k} = f32[2,{n}] multiply(%x, %b{k})" for k in range(5))
    total = "  %s1 = f32[{n}] add(%r0, %r1)\n  %s2 = f32[{n}] add(%s1, %r2)\n  %s3 = f32[{n}] add(%s2, %r3)\n" \
            "  ROOT %s4 = f32[{n}] add(%s3, %r4)".format(n=n)
    text = f"""HloModule budget
{REDUCERS}
%f (x: f32[2,{n}]) -> f32[{n}] {{
  %x = f32[2,{n}] parameter(0)
  %z = f32[] constant(0)
{scaled}
{reduces}
{total}
}}
ENTRY %main (x: f32[2,{n}]) -> f32[{n}] {{
  %x = f32[2,{n}] parameter(0)
  ROOT %r = f32[{n}] fusion(%x), kind=kLoop, calls=%f
}}
"""
    m = ColumnReductions().run(hlo.parse_module(text))
    assert [i.name for i in m.computation("f").instructions if i.attr(COLUMN_REDUCE)] == ["r0", "r1", "r2", "r3"]
