"""Odd, prime, zero-size and rank-0 shapes through the CPU backend, checked against the evaluator.

Loop bounds, index arithmetic and the scratch layout are where generated code
goes out of bounds; these shapes ([0,3], [7,13], [1,1,17], [2,0,5], [] and a
[181,191] that crosses the OpenMP threshold) are the ones that find it. One
module per operation holds every shape variant as a tuple element.
``test_cpu_backend_safety`` runs some of the same kernels under AddressSanitizer.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.cpu.pipeline import optimize

from tests.cpu_backend_util import (  # noqa: F401  (kernel_cache is a fixture)
    check_module, compile_many, kernel_cache, module, parse, random_args,
)

SHAPES = ["0,3", "7,13", "1,1,17", "2,0,5", "", "181,191"]

REDUCERS = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%max_s32 (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %m = s32[] maximum(%a, %b)
}
%lt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=LT
}
%lt2 (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT
}
"""


def _fused_elementwise(dims: str) -> str:
    return f"""
%fused_{dims.replace(',', '_') or 'scalar'} (x: f32[{dims}], y: f32[{dims}]) -> f32[{dims}] {{
  %x = f32[{dims}] parameter(0)
  %y = f32[{dims}] parameter(1)
  %m = f32[{dims}] multiply(%x, %y)
  %e = f32[{dims}] exponential(%x)
  %t = f32[{dims}] tanh(%m)
  ROOT %a = f32[{dims}] add(%e, %t)
}}"""


def elementwise() -> str:
    params, lines, results, comps = [], [], [], ""
    for k, d in enumerate(SHAPES):
        params += [f"x{k}: f32[{d}]", f"y{k}: f32[{d}]", f"i{k}: s32[{d}]"]
        tag = d.replace(",", "_") or "scalar"
        comps += _fused_elementwise(d)
        lines += [f"  %a{k} = f32[{d}] add(%x{k}, %y{k})", f"  %m{k} = f32[{d}] multiply(%a{k}, %x{k})",
                  f"  %c{k} = pred[{d}] compare(%m{k}, %y{k}), direction=GT",
                  f"  %s{k} = s32[{d}] select(%c{k}, %i{k}, %i{k})", f"  %n{k} = s32[{d}] negate(%s{k})",
                  f"  %f{k} = f32[{d}] fusion(%x{k}, %y{k}), kind=kLoop, calls=%fused_{tag}"]
        results += [(f"m{k}", f"f32[{d}]"), (f"n{k}", f"s32[{d}]"), (f"f{k}", f"f32[{d}]")]
    return module("elementwise", params, lines, results, comps)


def broadcast() -> str:
    return module("broadcast", ["s: f32[]", "v: f32[13]", "z: f32[0]", "w: s32[17]", "u: f32[5]"], [
        "  %r0 = f32[7,13] broadcast(%s), dimensions={}", "  %r1 = f32[7,13] broadcast(%v), dimensions={1}",
        "  %r2 = f32[3,0] broadcast(%z), dimensions={1}", "  %r3 = s32[1,1,17] broadcast(%w), dimensions={2}",
        "  %r4 = f32[2,0,5] broadcast(%u), dimensions={2}", "  %r5 = f32[] broadcast(%s), dimensions={}",
        "  %r6 = f32[0,3] broadcast(%s), dimensions={}"],
        [("r0", "f32[7,13]"), ("r1", "f32[7,13]"), ("r2", "f32[3,0]"), ("r3", "s32[1,1,17]"),
         ("r4", "f32[2,0,5]"), ("r5", "f32[]"), ("r6", "f32[0,3]")])


def transpose() -> str:
    return module("transpose", ["a: f32[7,13]", "b: f32[2,0,5]", "c: s32[1,1,17]", "d: f32[0,3]",
                                "e: f32[181,191]"], [
        "  %r0 = f32[13,7] transpose(%a), dimensions={1,0}", "  %r1 = f32[5,2,0] transpose(%b), dimensions={2,0,1}",
        "  %r2 = s32[17,1,1] transpose(%c), dimensions={2,1,0}", "  %r3 = f32[3,0] transpose(%d), dimensions={1,0}",
        "  %r4 = f32[191,181] transpose(%e), dimensions={1,0}"],
        [("r0", "f32[13,7]"), ("r1", "f32[5,2,0]"), ("r2", "s32[17,1,1]"), ("r3", "f32[3,0]"),
         ("r4", "f32[191,181]")])


def reduce() -> str:
    variants = [  # (operand dims, reduced dims, result dims)
        ("7,13", "1", "7"), ("7,13", "0", "13"), ("7,13", "0,1", ""), ("0,3", "0", "3"), ("0,3", "1", "0"),
        ("2,0,5", "1", "2,5"), ("2,0,5", "0,2", "0"), ("1,1,17", "2", "1,1"), ("1,1,17", "0,1", "17"),
        ("181,191", "1", "181"), ("181,191", "0", "191"), ("181,191", "0,1", ""), ("", "", ""),
    ]
    params, lines, results = [], ["  %z = f32[] constant(0)", "  %lo = s32[] constant(-100)"], []
    for k, (src, red, out) in enumerate(variants):
        params += [f"x{k}: f32[{src}]", f"i{k}: s32[{src}]"]
        lines += [f"  %r{k} = f32[{out}] reduce(%x{k}, %z), dimensions={{{red}}}, to_apply=%add",
                  f"  %q{k} = s32[{out}] reduce(%i{k}, %lo), dimensions={{{red}}}, to_apply=%max_s32"]
        results += [(f"r{k}", f"f32[{out}]"), (f"q{k}", f"s32[{out}]")]
    return module("reduce", params, lines, results, REDUCERS)


def dot() -> str:
    variants = [  # (lhs, rhs, out, attrs)
        ("7,13", "13,5", "7,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
        ("0,3", "3,4", "0,4", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
        ("3,0", "0,4", "3,4", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
        ("1,17", "17,1", "1,1", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
        ("2,0,5", "2,5,3", "2,0,3", "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                                    "rhs_contracting_dims={1}"),
        ("13", "13", "", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
        ("", "", "", "lhs_contracting_dims={}, rhs_contracting_dims={}"),
    ]
    params, lines, results = [], [], []
    for k, (a, b, out, attrs) in enumerate(variants):
        params += [f"a{k}: f32[{a}]", f"b{k}: f32[{b}]"]
        lines.append(f"  %r{k} = f32[{out}] dot(%a{k}, %b{k}), {attrs}")
        results.append((f"r{k}", f"f32[{out}]"))
    return module("dot", params, lines, results)


def concatenate_pad_slice() -> str:
    return module("concat_pad_slice", [
        "a: f32[7,13]", "b: f32[7,0]", "c: f32[7,2]", "d: f32[0,3]", "e: f32[2,3]", "f: s32[1,1,17]",
        "g: f32[2,0,5]", "v: f32[]"], [
        "  %c0 = f32[7,15] concatenate(%a, %b, %c), dimensions={1}",
        "  %c1 = f32[2,3] concatenate(%d, %e, %d), dimensions={0}",
        "  %c2 = s32[1,1,34] concatenate(%f, %f), dimensions={2}",
        "  %c3 = f32[2,0,10] concatenate(%g, %g), dimensions={2}",
        "  %p0 = f32[15,10] pad(%a, %v), padding=2_0_1x-3_0",
        "  %p1 = f32[2,5] pad(%d, %v), padding=1_1x1_1",
        "  %p2 = f32[2,3,5] pad(%g, %v), padding=0_0x1_2x0_0",
        "  %p3 = f32[0,13] pad(%a, %v), padding=-4_-3x0_0",
        "  %s0 = f32[2,3] slice(%a), slice={[1:7:3], [0:13:5]}",
        "  %s1 = f32[2,0,3] slice(%g), slice={[0:2], [0:0], [1:4]}",
        "  %s2 = s32[1,1,1] slice(%f), slice={[0:1], [0:1], [16:17]}",
        "  %s3 = f32[0,13] slice(%a), slice={[3:3], [0:13]}"],
        [("c0", "f32[7,15]"), ("c1", "f32[2,3]"), ("c2", "s32[1,1,34]"), ("c3", "f32[2,0,10]"),
         ("p0", "f32[15,10]"), ("p1", "f32[2,5]"), ("p2", "f32[2,3,5]"), ("p3", "f32[0,13]"),
         ("s0", "f32[2,3]"), ("s1", "f32[2,0,3]"), ("s2", "s32[1,1,1]"), ("s3", "f32[0,13]")])


def gather_scatter() -> str:
    rows = ("offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
            "slice_sizes={1,13}")
    scatter_rows = ("update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                    "index_vector_dim=1, to_apply=%add")
    return module("gather_scatter", [
        "x: f32[7,13]", "i: s32[11,1]", "e: s32[0,1]", "g: f32[2,0,5]", "j: s32[3,1]", "u: f32[11,13]",
        "w: f32[0,13]", "h: f32[3,0,5]"], [
        f"  %g0 = f32[11,13] gather(%x, %i), {rows}",
        f"  %g1 = f32[0,13] gather(%x, %e), {rows}",
        "  %g2 = f32[3,0,5] gather(%g, %j), offset_dims={1,2}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=1, slice_sizes={1,0,5}",
        "  %g3 = f32[3,13] gather(%x, %j), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=1, slice_sizes={1,13}",
        f"  %s0 = f32[7,13] scatter(%x, %i, %u), {scatter_rows}",
        f"  %s1 = f32[7,13] scatter(%x, %e, %w), {scatter_rows}",
        "  %s2 = f32[2,0,5] scatter(%g, %j, %h), update_window_dims={1,2}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add"],
        [("g0", "f32[11,13]"), ("g1", "f32[0,13]"), ("g2", "f32[3,0,5]"), ("g3", "f32[3,13]"), ("s0", "f32[7,13]"),
         ("s1", "f32[7,13]"), ("s2", "f32[2,0,5]")], REDUCERS)


def sort() -> str:
    variants = [("7,13", 1), ("7,13", 0), ("0,3", 1), ("0,3", 0), ("1,1,17", 2), ("2,0,5", 2), ("2,0,5", 1),
                ("181,191", 1)]
    params, lines, results = [], [], []
    for k, (d, dim) in enumerate(variants):
        params += [f"x{k}: f32[{d}]", f"i{k}: s32[{d}]"]
        lines += [f"  %r{k} = f32[{d}] sort(%x{k}), dimensions={{{dim}}}, to_apply=%lt",
                  f"  %t{k} = (f32[{d}], s32[{d}]) sort(%x{k}, %i{k}), dimensions={{{dim}}}, to_apply=%lt2",
                  f"  %v{k} = f32[{d}] get-tuple-element(%t{k}), index=0",
                  f"  %w{k} = s32[{d}] get-tuple-element(%t{k}), index=1"]
        results += [(f"r{k}", f"f32[{d}]"), (f"v{k}", f"f32[{d}]"), (f"w{k}", f"s32[{d}]")]
    return module("sort", params, lines, results, REDUCERS)


def layouts() -> str:
    """Entry buffers in non-row-major layouts: the ABI passes them in their own layout."""
    return module("layouts", ["x: f32[3,5]{0,1}", "y: s32[2,3,4]{1,2,0}"], [
        "  %r0 = f32[3,5]{0,1} negate(%x)", "  %r1 = f32[3,5]{1,0} copy(%x)", "  %r2 = s32[2,3,4]{0,1,2} abs(%y)",
        "  %r3 = f32[5,3]{1,0} transpose(%x), dimensions={1,0}"],
        [("r0", "f32[3,5]{0,1}"), ("r1", "f32[3,5]{1,0}"), ("r2", "s32[2,3,4]{0,1,2}"), ("r3", "f32[5,3]{1,0}")])


MODULES = {"elementwise": elementwise, "layouts": layouts, "broadcast": broadcast, "transpose": transpose,
           "reduce": reduce, "dot": dot, "concatenate_pad_slice": concatenate_pad_slice,
           "gather_scatter": gather_scatter, "sort": sort}


@pytest.fixture(scope="module")
def compiled(kernel_cache):
    return compile_many({name: make() for name, make in MODULES.items()}, kernel_cache)


def _inputs(name: str, exe) -> list[np.ndarray]:
    args = random_args(exe.module, seed=3)
    if name == "gather_scatter":  # indices in [-3, 10): some windows start outside [0, 7)
        rng = np.random.default_rng(5)
        args = [rng.integers(-3, 10, a.shape).astype(a.dtype) if a.dtype == np.int32 else a for a in args]
    if name == "sort":  # rounded keys: ties, so stability shows
        args = [np.round(a) if a.dtype == np.float32 else a for a in args]
    return args


# f32 sums of up to 181 terms (34571 for a full reduce) in another order than the evaluator's
# (NumPy sums pairwise along a contiguous axis): measured differences to the exact f64 sum are
# <= 6e-5 on both sides for these inputs (~N(0, 2)); the worst-case bound n*u*sum|x| is ~4e-3.
TOLERANCE = {"reduce": (1e-5, 2e-4), "dot": (1e-5, 2e-4)}


@pytest.mark.parametrize("name", list(MODULES))
def test_odd_and_empty_shapes_match_evaluator(name: str, compiled) -> None:
    exe = compiled[name].get()
    rtol, atol = TOLERANCE.get(name, (None, None))
    check_module(exe, _inputs(name, exe), rtol=rtol, atol=atol, what=name)


def test_shapes_cover_zero_size_prime_and_rank_0() -> None:
    dims = set()
    for make in MODULES.values():
        module_ = parse(make())
        for inst in module_.entry.instructions:
            for leaf in inst.shape.leaves():
                dims.add(leaf.dims)
    for want in [(0, 3), (7, 13), (1, 1, 17), (2, 0, 5), (), (181, 191)]:
        assert want in dims, f"no instruction of dims {list(want)}"


def test_concatenate_of_a_computed_operand_then_clamp_in_a_width_3_loop_nest(kernel_cache) -> None:
    """concatenate(x, 1/y) along rows of width 3, then min/max: GCC 12.2 at -O3 -march=native with
    AVX-512 if-converted the branchy concatenate into masked stride-3 group loads and gave some rows
    of 1/y the value of x's branch (-1.5 instead of -2.857; found by tests/fuzz, seed 0 graph 368).
    The concatenate is now a select among clamped reads."""
    for dtype, rows in (("f64", (50, 20)), ("f64", (5, 2)), ("f32", (50, 20))):
        text = module(f"concat_clamp_{dtype}_{rows[0]}", [f"x: {dtype}[{rows[0]},3]", f"y: {dtype}[{rows[1]},3]"], [
            f"  %one = {dtype}[] constant(1)",
            f"  %ones = {dtype}[{rows[1]},3] broadcast(%one), dimensions={{}}",
            f"  %r = {dtype}[{rows[1]},3] divide(%ones, %y)",
            f"  %c = {dtype}[{sum(rows)},3] concatenate(%x, %r), dimensions={{0}}",
            f"  %hi = {dtype}[] constant(-1.5)",
            f"  %his = {dtype}[{sum(rows)},3] broadcast(%hi), dimensions={{}}",
            f"  %m = {dtype}[{sum(rows)},3] minimum(%c, %his)",
            f"  %lo = {dtype}[] constant(-3.5)",
            f"  %los = {dtype}[{sum(rows)},3] broadcast(%lo), dimensions={{}}",
            f"  %out = {dtype}[{sum(rows)},3] maximum(%m, %los)"], [("out", f"{dtype}[{sum(rows)},3]")])
        exe = compile_many({"m": optimize(parse(text))}, kernel_cache)["m"].get()  # one fused loop nest
        np_type = np.float64 if dtype == "f64" else np.float32
        x = np.full((rows[0], 3), 7.0, np_type)
        y = (-(np.arange(rows[1] * 3) % 7) / 10.0 - 0.35).astype(np_type).reshape(rows[1], 3)
        got = check_module(exe, [x, y], what=f"concat clamp {dtype} {rows}")
        np.testing.assert_allclose(got[0][rows[0]:], np.clip(1 / y, -3.5, -1.5), rtol=1e-6)


def test_pad_rows_of_width_2(kernel_cache) -> None:
    """f64[3,2] padded by [[1,2],[0,0]]: GCC 12.2 (-O3 -march=native, AVX-512) vectorized the branchy
    ``if (inside) a = x[..]`` into masked loads that zeroed source row 1 (found by tests/fuzz seed 0
    graph 9794). The pad is now a select of a clamped read."""
    for dtype in ("f64", "f32"):
        text = module(f"pad_rows_{dtype}", [f"x: {dtype}[3,2]"], [
            f"  %v = {dtype}[] constant(-1)",
            f"  %out = {dtype}[6,2] pad(%x, %v), padding=1_2x0_0"], [("out", f"{dtype}[6,2]")])
        exe = compile_many({"m": optimize(parse(text))}, kernel_cache)["m"].get()
        np_type = np.float64 if dtype == "f64" else np.float32
        x = np.arange(1, 7, dtype=np_type).reshape(3, 2)
        got = check_module(exe, [x], what=f"pad rows {dtype}")
        np.testing.assert_array_equal(got[0], np.pad(x, [[1, 2], [0, 0]], constant_values=-1))
