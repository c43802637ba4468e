"""AlgebraicSimplifier sweeps against the evaluator: composing data-movement rules and dots on random
configurations, every single-op reducer over no/size-1 dims, and every convert chain over all real types."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import hlo
from hlo.dtypes import PrimitiveType
from hlo.passes.algsimp import AlgebraicSimplifier
from hlo.passes.algsimp.rules_convert import chain_collapses, lossless
from tests.test_pass_algsimp import FLOAT_SPECIALS, assert_same_bits, assert_same_numbers, expr, module, simplify


# --- random sweeps of the composing rules ---------------------------------------------------------


def _dims_text(dtype: str, dims) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def _random_slice(rng: np.random.Generator, dims) -> tuple[str, list[int]]:
    parts, out = [], []
    for d in dims:
        start = int(rng.integers(0, d + 1))
        limit = int(rng.integers(start, d + 1))
        stride = int(rng.integers(1, 4))
        parts.append(f"[{start}:{limit}:{stride}]")
        out.append(len(range(start, limit, stride)))
    return ", ".join(parts), out


@pytest.mark.parametrize("seed", range(40))
def test_data_movement_chains_sweep(seed: int) -> None:
    """slice of slice, transpose of transpose, broadcast, reshape and dynamic-slice with clamped starts."""
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(0, 7, rng.integers(1, 4))]
    s1, d1 = _random_slice(rng, dims)
    s2, d2 = _random_slice(rng, d1)
    p1, p2 = [[int(p) for p in rng.permutation(len(d2))] for _ in range(2)]
    d3 = [d2[p] for p in p1]
    d4 = [d3[p] for p in p2]
    bdims = sorted(int(b) for b in rng.choice(len(d4) + 2, len(d4), replace=False))
    d5 = [3] * (len(d4) + 2)
    for i, b in enumerate(bdims):
        d5[b] = d4[i]
    sizes = [min(1, d) for d in d5]
    body = f"""
        %a = {_dims_text("f32", d1)} slice(%x), slice={{{s1}}}
        %b = {_dims_text("f32", d2)} slice(%a), slice={{{s2}}}
        %t = {_dims_text("f32", d3)} transpose(%b), dimensions={{{",".join(map(str, p1))}}}
        %u = {_dims_text("f32", d4)} transpose(%t), dimensions={{{",".join(map(str, p2))}}}
        %v = {_dims_text("f32", d5)} broadcast(%u), dimensions={{{",".join(map(str, bdims))}}}
        %w = {_dims_text("f32", d5)} reshape(%v)
        %i = s32[] constant({int(rng.integers(-3, 9))})
        ROOT %r = {_dims_text("f32", sizes)} dynamic-slice(%w, {", ".join(["%i"] * len(d5))}), \
dynamic_slice_sizes={{{",".join(map(str, sizes))}}}"""
    m = module(body, f"x: {_dims_text('f32', dims)}")
    out, p = simplify(m)
    assert p.applied["dynamic_slice_constant_starts"] == 1
    text = expr(out.entry)
    assert "slice(slice(" not in text and "transpose(transpose(" not in text, text
    assert_same_numbers(m, out, seeds=(seed,))
    assert AlgebraicSimplifier().run(out) is out


@pytest.mark.parametrize("seed", range(40))
def test_dot_single_product_sweep(seed: int) -> None:
    """Dots with batch dims, any operand dim order and 0-2 contracting dims of size 1, in several types."""
    rng = np.random.default_rng(seed)
    batch = [int(d) for d in rng.integers(1, 3, rng.integers(0, 2))]
    lfree = [int(d) for d in rng.integers(0, 4, rng.integers(0, 3))]
    rfree = [int(d) for d in rng.integers(0, 4, rng.integers(0, 3))]
    k = int(rng.integers(0, 3))
    logical_l, logical_r = batch + lfree + [1] * k, batch + [1] * k + rfree
    lp, rp = [int(p) for p in rng.permutation(len(logical_l))], [int(p) for p in rng.permutation(len(logical_r))]
    lhs, rhs = [logical_l[j] for j in lp], [logical_r[j] for j in rp]
    nb = len(batch)
    lb, lc = [lp.index(j) for j in range(nb)], [lp.index(j) for j in range(nb + len(lfree), len(lp))]
    rb, rc = [rp.index(j) for j in range(nb)], [rp.index(j) for j in range(nb, nb + k)]
    free_l = [lhs[d] for d in range(len(lhs)) if d not in lb + lc]
    free_r = [rhs[d] for d in range(len(rhs)) if d not in rb + rc]
    dtype = str(rng.choice(["f32", "bf16", "f16", "s32", "f64"]))
    j = lambda v: ",".join(map(str, v))  # noqa: E731
    m = module(f"ROOT %r = {_dims_text(dtype, batch + free_l + free_r)} dot(%x, %y), lhs_batch_dims={{{j(lb)}}}, "
               f"lhs_contracting_dims={{{j(lc)}}}, rhs_batch_dims={{{j(rb)}}}, rhs_contracting_dims={{{j(rc)}}}",
               f"x: {_dims_text(dtype, lhs)}, y: {_dims_text(dtype, rhs)}")
    out, p = simplify(m)
    assert p.applied["dot_single_product"] == 1
    assert "dot" not in expr(out.entry)
    assert_same_numbers(m, out, seeds=(seed,))


# --- reductions of nothing: every single-op reducer, type and init against the evaluator ----------------

REDUCERS = {"f32": ["add", "multiply", "maximum", "minimum"], "f16": ["add", "multiply", "maximum", "minimum"],
            "bf16": ["add", "maximum"], "s32": ["add", "multiply", "maximum", "minimum", "and", "or", "xor"],
            "u8": ["maximum", "minimum", "and", "or"], "pred": ["and", "or", "xor", "maximum", "minimum"]}
INITS = {"f32": ["0", "-0", "1", "-inf", "inf", "nan", "2.5"], "f16": ["0", "-0", "1", "-inf", "inf", "nan"],
         "bf16": ["0", "-0", "-inf", "nan"], "s32": ["0", "1", "-1", "-2147483648", "2147483647"],
         "u8": ["0", "255", "7"], "pred": ["true", "false"]}


@pytest.mark.parametrize("dtype, op", [(t, op) for t, ops in REDUCERS.items() for op in ops],
                         ids=[f"{t}-{op}" for t, ops in REDUCERS.items() for op in ops])
def test_reduce_of_nothing_matches_the_reduction(dtype: str, op: str) -> None:
    """reduce(x, init) over no dims or size-1 dims, with the body written op(p1, p0)."""
    body = f"""
%f (a: {dtype}[], b: {dtype}[]) -> {dtype}[] {{
  %a = {dtype}[] parameter(0)
  %b = {dtype}[] parameter(1)
  ROOT %s = {dtype}[] {op}(%b, %a)
}}
"""
    for init in INITS[dtype]:
        for x, result, dims in [("[3,1]", "[3]", "{1}"), ("[4]", "[4]", "{}"), ("[1,2,1]", "[2]", "{0,2}")]:
            m = module(f"%z = {dtype}[] constant({init})\nROOT %r = {dtype}{result} reduce(%x, %z), "
                       f"dimensions={dims}, to_apply=%f", f"x: {dtype}{x}", body)
            out, _ = simplify(m)
            if out is m:  # only a max/min whose init is a zero: the tie between -0 and +0 is unspecified
                assert op in ("maximum", "minimum") and init in ("0", "-0", "false"), init
                continue
            assert "reduce" not in expr(out.entry)
            assert_same_numbers(m, out, seeds=range(4))


# --- convert chains: the table against the evaluator, over every pair of real types -------------------

REAL_TYPES = [t for t in PrimitiveType if t.is_array_type and not t.is_complex]


def _every_value(t: PrimitiveType) -> np.ndarray:
    """Every value of 8-bit (and smaller) types, specials and random bit patterns of wider ones."""
    if t.is_pred:
        return np.array([False, True])
    if t.bit_width <= 8:
        if t.is_integral:
            info = ml_dtypes.iinfo(t.numpy)
            return np.arange(int(info.min), int(info.max) + 1).astype(t.numpy)
        return np.arange(256, dtype=np.uint8).view(t.numpy)
    rng = np.random.default_rng(t.bit_width)
    bits = rng.integers(0, 1 << t.bit_width, 2000, dtype=np.uint64, endpoint=False) if t.bit_width < 64 else \
        rng.integers(0, np.iinfo(np.uint64).max, 2000, dtype=np.uint64)
    values = bits.astype(np.dtype(f"u{t.byte_size}")).view(t.numpy)
    if t.is_float:
        with np.errstate(all="ignore"):
            specials = np.array(FLOAT_SPECIALS + [65504, 65520, 2.0**24 + 1, 3e38, -3e38, 1e-8]).astype(t.numpy)
        values = np.concatenate([specials, values, (rng.standard_normal(500) * 1e4).astype(t.numpy)])
    else:
        info = np.iinfo(t.numpy)
        values = np.concatenate([np.array([info.min, info.max, 0, 1, 2], dtype=t.numpy), values])
    return values


def _chain(a: PrimitiveType, b: PrimitiveType, c: PrimitiveType, n: int) -> hlo.HloModule:
    return module(f"%m = {b}[{n}] convert(%x)\nROOT %r = {c}[{n}] convert(%m)", f"x: {a}[{n}]")


@pytest.mark.parametrize("a", REAL_TYPES, ids=str)
def test_convert_chains_collapse_exactly_when_the_values_agree(a: PrimitiveType) -> None:
    """For each chain a -> b -> c the rule collapses, the evaluator gives identical results with and
    without the middle step; and each lossless pair round-trips every value."""
    values = _every_value(a)
    n = values.size
    for b, c in itertools.product(REAL_TYPES, REAL_TYPES):
        if a is b or b is c:
            continue
        chain = _chain(a, b, c, n)
        out = AlgebraicSimplifier().run(chain)
        assert (out is not chain) == chain_collapses(a, b, c), (a, b, c)
        if out is not chain:
            assert_same_bits(hlo.evaluate(out, values)[0], hlo.evaluate(chain, values)[0], f"{a}->{b}->{c}")
    for b in REAL_TYPES:
        if lossless(a, b) and a is not b:
            back = hlo.evaluate(_chain(a, b, a, n), values)[0]
            assert_same_bits(back, values, f"{a}->{b}->{a}")
