"""The CPU row-program strategy (backends/cpu/row_program.py, the pass backends/cpu/row_programs.py):
which runs it groups, that a group is one loop over rows, and its numbers against the HLO evaluator and
NumPy (row lengths that are not a multiple of the vector width, rank 3, rows of length 1, NaN and inf
rows as TF's softmax gives them, a group that must fall back, any thread count)."""

from __future__ import annotations

import numpy as np
import pytest

import hlo
import backends.cpu as cpu
from backends.cpu.codegen import generate
from backends.cpu.pipeline import optimize
from backends.cpu.vmath import VMATH_C
from hlo.annotations import ROW_PROGRAM, RowRole

_REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
"""


def softmax_hlo(dims: tuple[int, ...]) -> str:
    """TF's Softmax as our lowering writes it: over the last dim of ``dims``."""
    d = ",".join(map(str, dims))
    lead = ",".join(map(str, dims[:-1]))
    keep = ",".join(map(str, range(len(dims) - 1)))
    last = len(dims) - 1
    return f"""HloModule softmax
{_REDUCERS}
ENTRY main {{
  x = f32[{d}] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[{lead}] reduce(x, ninf), dimensions={{{last}}}, to_apply=max
  mb = f32[{d}] broadcast(m), dimensions={{{keep}}}
  s = f32[{d}] subtract(x, mb)
  e = f32[{d}] exponential(s)
  t = f32[{lead}] reduce(e, zero), dimensions={{{last}}}, to_apply=add
  tb = f32[{d}] broadcast(t), dimensions={{{keep}}}
  ROOT y = f32[{d}] divide(e, tb)
}}
"""


LAYER_NORM = f"""HloModule layer_norm
{_REDUCERS}
ENTRY main {{
  x = f32[24,300] parameter(0)
  g = f32[300] parameter(1)
  zero = f32[] constant(0)
  n = f32[] constant(0.0033333334)
  eps = f32[] constant(1e-5)
  s = f32[24] reduce(x, zero), dimensions={{1}}, to_apply=add
  nb = f32[24] broadcast(n), dimensions={{}}
  mean = f32[24] multiply(s, nb)
  mb = f32[24,300] broadcast(mean), dimensions={{0}}
  c = f32[24,300] subtract(x, mb)
  c2 = f32[24,300] multiply(c, c)
  v = f32[24] reduce(c2, zero), dimensions={{1}}, to_apply=add
  var = f32[24] multiply(v, nb)
  eb = f32[24] broadcast(eps), dimensions={{}}
  ve = f32[24] add(var, eb)
  r = f32[24] rsqrt(ve)
  rb = f32[24,300] broadcast(r), dimensions={{0}}
  y = f32[24,300] multiply(c, rb)
  gb = f32[24,300] broadcast(g), dimensions={{1}}
  ROOT out = f32[24,300] multiply(y, gb)
}}
"""


def reference_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def roles(module: hlo.HloModule) -> list[tuple[int, RowRole]]:
    return [(i.attr(ROW_PROGRAM).group, i.attr(ROW_PROGRAM).role) for i in module.entry.instructions
            if i.attr(ROW_PROGRAM) is not None]


def compile_and_run(text: str, *args, num_threads=None):
    module = optimize(hlo.parse_module(text))
    exe = cpu.compile(module, cpu.CompileOptions(prepared=True, num_threads=num_threads))
    return module, exe, exe(*args)[0]


def test_softmax_is_one_loop_over_rows_keeping_the_exponentials() -> None:
    module = optimize(hlo.parse_module(softmax_hlo((37, 1000))))
    assert roles(module) == [(0, RowRole.REDUCE), (0, RowRole.FULL), (0, RowRole.REDUCE), (0, RowRole.FULL)]
    generated = generate(module)
    src = generated.source
    assert src.count("row program over [37, 1000]") == 1
    assert "float row" in src and "__attribute__((aligned(64)))" in src  # the kept exponentials
    assert "reduction(max:" in src  # the NaN-tracked max
    assert generated.scratch_bytes == 0  # no intermediate in memory


@pytest.mark.parametrize("dims", [(37, 1000), (9, 17), (3, 5, 33), (8, 1), (2, 4096)])
def test_softmax_matches_the_evaluator_and_numpy(dims) -> None:
    x = (np.random.default_rng(sum(dims)).standard_normal(dims) * 4).astype(np.float32)
    text = softmax_hlo(dims)
    module, _, got = compile_and_run(text, x)
    assert bool(roles(module)) == (dims[-1] > 1)  # a reduce of a length-1 row simplifies away
    (want,) = hlo.evaluate(hlo.parse_module(text), x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got, reference_softmax(x), rtol=1e-5, atol=1e-7)


def test_softmax_of_nan_and_inf_rows_is_tf_s() -> None:
    """A row holding NaN or +inf gives NaN everywhere (as TF's CPU kernel); -inf logits give 0; a row of
    only -inf gives NaN (-inf - -inf)."""
    x = np.random.default_rng(5).standard_normal((6, 40)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 39] = np.inf
    x[3, ::3] = -np.inf
    x[4, :] = -np.inf
    x[5, 0] = np.nan
    x[5, 1] = np.inf
    text = softmax_hlo((6, 40))
    _, _, got = compile_and_run(text, x)
    (want,) = hlo.evaluate(hlo.parse_module(text), x)
    for row in (1, 2, 4, 5):
        assert np.isnan(got[row]).all(), row
    assert (got[3, ::3] == 0).all()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)  # NaN where the evaluator has NaN
    np.testing.assert_allclose(got[[0, 3]], reference_softmax(x[[0, 3]]), rtol=1e-5, atol=1e-7)


def test_layer_norm_is_one_row_program_matching_the_evaluator() -> None:
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((24, 300)).astype(np.float32) * 3 + 1, rng.standard_normal(300).astype(np.float32)
    module, exe, got = compile_and_run(LAYER_NORM, x, g)
    assert roles(module) == [(0, RowRole.REDUCE), (0, RowRole.REDUCE), (0, RowRole.FULL)]
    assert exe.source.count("row program over [24, 300]") == 1
    (want,) = hlo.evaluate(hlo.parse_module(LAYER_NORM), x, g)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_results_do_not_depend_on_the_thread_count() -> None:
    x = np.random.default_rng(9).standard_normal((256, 300)).astype(np.float32)
    text = softmax_hlo((256, 300))
    _, exe, one = compile_and_run(text, x, num_threads=1)
    assert "tfxla_parallel(256," in exe.source  # split over rows
    _, _, two = compile_and_run(text, x, num_threads=2)
    np.testing.assert_array_equal(one, two)


# The exponentials are read by a reverse along the rows: a read outside the row, so the group is
# emitted member by member (still correct).
REVERSED_ROWS = f"""HloModule reversed
{_REDUCERS}
ENTRY main {{
  x = f32[5,40] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[5] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[5,40] broadcast(m), dimensions={{0}}
  d = f32[5,40] subtract(x, mb)
  e = f32[5,40] exponential(d)
  t = f32[5] reduce(e, zero), dimensions={{1}}, to_apply=add
  tb = f32[5,40] broadcast(t), dimensions={{0}}
  re = f32[5,40] reverse(e), dimensions={{0}}
  ROOT y = f32[5,40] divide(re, tb)
}}
"""


def test_a_group_reading_outside_its_row_is_emitted_member_by_member() -> None:
    x = np.random.default_rng(11).standard_normal((5, 40)).astype(np.float32)
    module, exe, got = compile_and_run(REVERSED_ROWS, x)
    assert roles(module), "expected the pass to group it"
    assert "row program over" not in exe.source
    (want,) = hlo.evaluate(hlo.parse_module(REVERSED_ROWS), x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_a_single_row_is_left_to_the_generic_loops() -> None:
    """One row offers no rows to split: the generic loops split its reductions over columns instead."""
    assert roles(optimize(hlo.parse_module(softmax_hlo((1, 5000))))) == []


def test_softmax_exp_is_the_nonpositive_exp() -> None:
    """exp(x - max(x)): its argument is <= 0 (or NaN), so the kernel calls ``tfxla_vexpf_nonpos``."""
    source = generate(optimize(hlo.parse_module(softmax_hlo((37, 1000))))).source
    body = source.split(VMATH_C)[-1]  # the kernels, not the prelude
    assert "tfxla_vexpf_nonpos(" in body and "tfxla_vexpf(" not in body


# exp(x - max(y)) with y another array: x - max(y) may be positive (here up to 85, where the non-positive exp's
# one-step scaling would be wrong), so the generic exp stays.
EXP_MINUS_MAX_OF_ANOTHER = f"""HloModule exp_minus_max_of_another
{_REDUCERS}
ENTRY main {{
  x = f32[16,300] parameter(0)
  y = f32[16,300] parameter(1)
  ninf = f32[] constant(-inf)
  m = f32[16] reduce(y, ninf), dimensions={{1}}, to_apply=max
  mb = f32[16,300] broadcast(m), dimensions={{0}}
  s = f32[16,300] subtract(x, mb)
  ROOT e = f32[16,300] exponential(s)
}}
"""


def test_exp_minus_the_max_of_another_array_keeps_the_generic_exp() -> None:
    rng = np.random.default_rng(17)
    x = np.minimum(rng.standard_normal((16, 300)) + 83, 87).astype(np.float32)  # x - max(y) up to ~85
    y = rng.standard_normal((16, 300)).astype(np.float32)
    module, exe, got = compile_and_run(EXP_MINUS_MAX_OF_ANOTHER, x, y)
    assert roles(module) and "row program over [16, 300]" in exe.source
    assert "tfxla_vexpf(" in exe.source.split(VMATH_C)[-1]
    assert "tfxla_vexpf_nonpos(" not in exe.source.split(VMATH_C)[-1]
    (want,) = hlo.evaluate(hlo.parse_module(EXP_MINUS_MAX_OF_ANOTHER), x, y)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


LOG_SOFTMAX = f"""HloModule log_softmax
{_REDUCERS}
ENTRY main {{
  x = f32[20,700] parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[20] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[20,700] broadcast(m), dimensions={{0}}
  s = f32[20,700] subtract(x, mb)
  e = f32[20,700] exponential(s)
  t = f32[20] reduce(e, zero), dimensions={{1}}, to_apply=add
  tb = f32[20,700] broadcast(t), dimensions={{0}}
  l = f32[20,700] log(tb)
  ROOT y = f32[20,700] subtract(s, l)
}}
"""


def test_log_softmax_sums_the_nonpositive_exp() -> None:
    """Log softmax's exp(x - max) is inside its sum's fusion (a reduce member): the same exp."""
    x = (np.random.default_rng(19).standard_normal((20, 700)) * 6).astype(np.float32)
    x[2, 5], x[3, :], x[4, 9] = np.nan, -np.inf, -np.inf
    module, exe, got = compile_and_run(LOG_SOFTMAX, x)
    assert "row program over [20, 700]" in exe.source
    assert "tfxla_vexpf_nonpos(" in exe.source.split(VMATH_C)[-1]
    (want,) = hlo.evaluate(hlo.parse_module(LOG_SOFTMAX), x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
