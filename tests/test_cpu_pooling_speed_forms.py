"""The CPU's parallel select-and-scatter (backends/cpu/select_scatter.py, TF's MaxPoolGrad): the forms it
takes (split over the batch, channels innermost) and its results, bit for bit against the HLO evaluator
and TF's MaxPoolGrad: 2x2/2 and overlapping 3x3/2 windows, SAME and VALID padding, odd sizes, NaN
inputs, ties, batch 1 (left to the serial kernel) and > 1, channel counts that are not a multiple of
the vector width, one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

import hlo
import backends.cpu as cpu
from backends.cpu.codegen import CodegenOptions

_COMPS = """
ge_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  lt = pred[] compare(a, b), direction=LT
  ROOT n = pred[] not(lt)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def _out_dim(n: int, k: int, s: int, same: bool) -> tuple[int, int, int]:
    """TF's output size and (pad_low, pad_high) of one spatial dim."""
    if not same:
        return (n - k) // s + 1, 0, 0
    o = -(-n // s)
    pad = max((o - 1) * s + k - n, 0)
    return o, pad // 2, pad - pad // 2


def pool_grad_hlo(shape, k: int, s: int, same: bool) -> tuple[str, tuple[int, ...]]:
    n, h, w, c = shape
    oh, hl, hh = _out_dim(h, k, s, same)
    ow, wl, wh = _out_dim(w, k, s, same)
    src = (n, oh, ow, c)
    d, sd = ",".join(map(str, shape)), ",".join(map(str, src))
    text = f"""HloModule pool_grad
{_COMPS}
ENTRY main {{
  x = f32[{d}] parameter(0)
  g = f32[{sd}] parameter(1)
  zero = f32[] constant(0)
  ROOT r = f32[{d}] select-and-scatter(x, g, zero), window={{size=1x{k}x{k}x1 stride=1x{s}x{s}x1 pad=0_0x{hl}_{hh}x{wl}_{wh}x0_0}}, select=ge_f32, scatter=add_f32
}}
"""
    return text, src


def _run(text: str, *args, num_threads: int | None = None, threshold: int = 1 << 10):
    exe = cpu.compile(hlo.parse_module(text), cpu.CompileOptions(
        codegen=CodegenOptions(parallel_threshold=threshold), num_threads=num_threads))
    return exe, exe(*args)[0]


def _inputs(shape, src, ties: bool, nan: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if ties:
        x = np.round(x).astype(np.float32)  # many equal values in a window: the first gets the gradient
    if nan:
        x.reshape(-1)[rng.choice(x.size, x.size // 7, replace=False)] = np.nan
    return x, rng.standard_normal(src).astype(np.float32)


CASES = [  # (shape, window, stride, SAME, ties, nan)
    ((4, 8, 8, 32), 2, 2, False, False, False),
    ((3, 9, 7, 19), 2, 2, False, True, False),
    ((3, 9, 7, 19), 2, 2, True, False, True),
    ((2, 11, 10, 5), 3, 2, True, True, False),
    ((2, 11, 10, 5), 3, 2, False, False, True),
    ((1, 10, 10, 16), 2, 2, False, True, False),
]


@pytest.mark.parametrize("shape,k,s,same,ties,nan", CASES)
def test_pool_grad_matches_the_evaluator_on_one_and_two_threads(shape, k, s, same, ties, nan) -> None:
    text, src = pool_grad_hlo(shape, k, s, same)
    x, g = _inputs(shape, src, ties, nan)
    (want,) = hlo.evaluate(hlo.parse_module(text), x, g)
    exe, one = _run(text, x, g, num_threads=1)
    _, two = _run(text, x, g, num_threads=2)
    if shape[0] > 1:
        assert f"tfxla_parallel({shape[0]}," in exe.source  # split over the batch
        assert "best_v[" in exe.source  # channels innermost
    np.testing.assert_array_equal(one, want)
    np.testing.assert_array_equal(two, want)


@pytest.mark.parametrize("shape,k,s,same,ties", [(c[0], c[1], c[2], c[3], c[4]) for c in CASES if not c[5]])
def test_pool_grad_matches_tf_max_pool_grad(shape, k, s, same, ties) -> None:
    tf = pytest.importorskip("tensorflow")
    text, src = pool_grad_hlo(shape, k, s, same)
    x, g = _inputs(shape, src, ties, False)
    padding = "SAME" if same else "VALID"
    y = tf.nn.max_pool2d(x, k, s, padding)
    assert tuple(y.shape) == src
    want = tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=g, ksize=[1, k, k, 1], strides=[1, s, s, 1],
                                  padding=padding).numpy()
    _, got = _run(text, x, g, num_threads=2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # overlapping windows may add in another order


def test_a_trailing_window_dim_leaves_the_channel_loop_out() -> None:
    """A window over the last dim (NCHW pooling) is split over the batch, one element at a time."""
    text = f"""HloModule nchw
{_COMPS}
ENTRY main {{
  x = f32[3,4,9,8] parameter(0)
  g = f32[3,4,4,4] parameter(1)
  zero = f32[] constant(0)
  ROOT r = f32[3,4,9,8] select-and-scatter(x, g, zero), window={{size=1x1x3x2 stride=1x1x2x2}}, select=ge_f32, scatter=add_f32
}}
"""
    x, g = _inputs((3, 4, 9, 8), (3, 4, 4, 4), True, True, seed=3)
    (want,) = hlo.evaluate(hlo.parse_module(text), x, g)
    exe, got = _run(text, x, g, num_threads=2)
    assert "tfxla_parallel(12," in exe.source and "best_v[" not in exe.source
    np.testing.assert_array_equal(got, want)


def max_pool_hlo(shape, k: int, s: int, same: bool, op: str = "maximum", init: str = "-inf") -> str:
    n, h, w, c = shape
    oh, hl, hh = _out_dim(h, k, s, same)
    ow, wl, wh = _out_dim(w, k, s, same)
    d, od = ",".join(map(str, shape)), f"{n},{oh},{ow},{c}"
    return f"""HloModule pool
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] {op}(a, b)
}}
ENTRY main {{
  x = f32[{d}] parameter(0)
  i = f32[] constant({init})
  ROOT r = f32[{od}] reduce-window(x, i), window={{size=1x{k}x{k}x1 stride=1x{s}x{s}x1 pad=0_0x{hl}_{hh}x{wl}_{wh}x0_0}}, to_apply=red
}}
"""


@pytest.mark.parametrize("shape,k,s,same,ties,nan", CASES)
@pytest.mark.parametrize("op,init", [("maximum", "-inf"), ("minimum", "inf"), ("add", "0")])
def test_pooling_forward_matches_the_evaluator(shape, k, s, same, ties, nan, op, init) -> None:
    text = max_pool_hlo(shape, k, s, same, op, init)
    x, _ = _inputs(shape, shape, ties, nan)
    (want,) = hlo.evaluate(hlo.parse_module(text), x)
    exe, one = _run(text, x, num_threads=1)
    _, two = _run(text, x, num_threads=2)
    assert "for (int64_t w" not in exe.source  # the window unrolled
    np.testing.assert_array_equal(one, two)
    if op == "add":  # the evaluator's sums round differently (so did the loop form before the unrolling)
        np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(one, want)  # NaN where the evaluator has NaN


def test_max_pool_matches_tf() -> None:
    tf = pytest.importorskip("tensorflow")
    for shape, k, s, same, ties, nan in CASES:
        x, _ = _inputs(shape, shape, ties, False)
        want = tf.nn.max_pool2d(x, k, s, "SAME" if same else "VALID").numpy()
        _, got = _run(max_pool_hlo(shape, k, s, same), x, num_threads=2)
        np.testing.assert_array_equal(got, want)


ARGMAX_POOL = """HloModule argmax_pool
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  ge = pred[] compare(a, b), direction=GE
  none = s32[] constant(-1)
  unset = pred[] compare(bi, none), direction=EQ
  keep = pred[] or(ge, unset)
  v = f32[] select(keep, a, b)
  i = s32[] select(keep, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  x = f32[2,9,8,5] parameter(0)
  ix = s32[2,9,8,5] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  none = s32[] constant(-1)
  ROOT r = (f32[2,5,4,5], s32[2,5,4,5]) reduce-window(x, ix, ninf, none), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=argmax
}
"""


def test_a_variadic_reduce_window_is_unrolled_too() -> None:
    """XLA's argmax pooling (a value and an index reduced together), padded: selects for both."""
    x, _ = _inputs((2, 9, 8, 5), (1,), True, True, seed=5)
    want = hlo.evaluate(hlo.parse_module(ARGMAX_POOL), x)
    exe = cpu.compile(hlo.parse_module(ARGMAX_POOL))
    got = exe(x)
    assert "for (int64_t w" not in exe.source
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_padded_window_over_an_empty_dim_reads_nothing() -> None:
    text = """HloModule empty_pool
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
ENTRY main {
  x = f32[3,0] parameter(0)
  i = f32[] constant(-7)
  ROOT r = f32[2,4] reduce-window(x, i), window={size=2x1 stride=2x1 pad=0_1x2_2}, to_apply=mx
}
"""
    exe = cpu.compile(hlo.parse_module(text))
    assert ": -1)" not in exe.source  # no read clamped into the empty dim
    np.testing.assert_array_equal(exe(np.zeros((3, 0), np.float32))[0], np.full((2, 4), -7, np.float32))
