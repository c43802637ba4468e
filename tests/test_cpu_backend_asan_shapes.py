"""Every opcode under AddressSanitizer on size-0, size-1 and odd shapes.

``TEMPLATES`` has, per opcode, a few instructions written against two dims ``a`` and ``b``; each
shape set (``zero``: a = 0, b = 3; ``one``: a = b = 1; ``odd``: a = 7, b = 5) turns all of them
into one module (about a hundred instructions, so three ASan kernels in all). Each kernel is
linked into the exactly-sized heap-buffer harness of ``tests/test_cpu_backend_safety.py`` and must
run without an ASan report and print what ``hlo.evaluate`` gives. Gather and scatter indices, and
dynamic-slice starts, run past both ends of their operands. ``test_every_opcode_runs_on_every_shape``
proves no opcode is left out (the refused ones of test_cpu_backend_opcodes.py aside).

TF's checked gathers (``index_check=``) from an empty operand, and with indices out of range, must
return status 3 with TF's message, having read nothing they should not; a checked scatter with an
index row out of range the same, having written nothing.
"""

from __future__ import annotations

import concurrent.futures
import re
from typing import Callable

import numpy as np
import pytest

import hlo
from hlo.opcodes import Flag, Opcode
from tests.cpu_backend_util import assert_matches, gcc_supports_asan, kernel_cache, module, random_args  # noqa: F401
from tests.test_cpu_backend_opcodes import REFUSED
from tests.test_cpu_backend_safety import _run_harness, build_asan_harness

O = Opcode
SHAPE_SETS = {"zero": (0, 3), "one": (1, 1), "odd": (7, 5)}
Template = Callable[[int, int], tuple[list[str], list[str], list[str]]]  # (a, b) -> params, lines, results


def _pad_dim(n: int, low: int, high: int, interior: int) -> int:
    return low + high + n + max(n - 1, 0) * interior


def _computations(a: int, b: int) -> str:
    """Called computations (names end in ``_c``; template names are prefixed, these are not)."""
    ab, a2 = f"f32[{a},{b}]", 2 * a
    return f"""
%add_c (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}}
%add_s_c (x: s32[], y: s32[]) -> s32[] {{
  %x = s32[] parameter(0)
  %y = s32[] parameter(1)
  ROOT %s = s32[] add(%x, %y)
}}
%ge_c (x: f32[], y: f32[]) -> pred[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %r = pred[] compare(%x, %y), direction=GE
}}
%lt2_c (x: f32[], y: f32[], i: s32[], j: s32[]) -> pred[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %r = pred[] compare(%x, %y), direction=LT
}}
%argmax_c (x: f32[], i: s32[], y: f32[], j: s32[]) -> (f32[], s32[]) {{
  %x = f32[] parameter(0)
  %i = s32[] parameter(1)
  %y = f32[] parameter(2)
  %j = s32[] parameter(3)
  %ge = pred[] compare(%x, %y), direction=GE
  %v = f32[] select(%ge, %x, %y)
  %k = s32[] select(%ge, %i, %j)
  ROOT %t = (f32[], s32[]) tuple(%v, %k)
}}
%mix_c (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %m = f32[] multiply(%x, %y)
  ROOT %s = f32[] add(%m, %y)
}}
%neg_c (x: {ab}) -> {ab} {{
  %x = {ab} parameter(0)
  ROOT %n = {ab} negate(%x)
}}
%dbl_c (x: {ab}) -> {ab} {{
  %x = {ab} parameter(0)
  ROOT %d = {ab} add(%x, %x)
}}
%fused_c (x: {ab}, y: f32[{b}]) -> ({ab}, f32[{a}]) {{
  %x = {ab} parameter(0)
  %y = f32[{b}] parameter(1)
  %yb = {ab} broadcast(%y), dimensions={{1}}
  %m = {ab} multiply(%x, %yb)
  %e = {ab} exponential(%m)
  %z = f32[] constant(0)
  %s = f32[{a}] reduce(%e, %z), dimensions={{1}}, to_apply=%add_c
  ROOT %t = ({ab}, f32[{a}]) tuple(%e, %s)
}}
%fused_cat_c (x: {ab}, y: {ab}) -> f32[{a2},{b}] {{
  %x = {ab} parameter(0)
  %y = {ab} parameter(1)
  %e = {ab} exponential(%x)
  %n = {ab} negate(%y)
  ROOT %c = f32[{a2},{b}] concatenate(%e, %n), dimensions={{0}}
}}
%cond_c (t: (s32[], {ab})) -> pred[] {{
  %t = (s32[], {ab}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}}
%body_c (t: (s32[], {ab})) -> (s32[], {ab}) {{
  %t = (s32[], {ab}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = {ab} get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %x1 = {ab} add(%x, %x)
  ROOT %r = (s32[], {ab}) tuple(%i1, %x1)
}}
"""


def _elementwise() -> dict[Opcode, Template]:
    """One template per elementwise opcode: [a, b] operands of a type the opcode takes."""
    types = {O.NOT: "pred", O.POPCNT: "s32", O.CLZ: "s32", O.AND: "pred", O.OR: "pred", O.XOR: "s32",
             O.SHIFT_LEFT: "s32", O.SHIFT_RIGHT_LOGICAL: "s32", O.SHIFT_RIGHT_ARITHMETIC: "s32",
             O.REMAINDER: "s32", O.SELECT: None, O.CLAMP: None, O.REAL: "c64", O.IMAG: "c128"}
    out_types = {O.IS_FINITE: "pred", O.COMPARE: "pred", O.CONVERT: "s32", O.COMPLEX: "c64", O.REAL: "f32",
                 O.IMAG: "f64"}
    attrs = {O.COMPARE: ", direction=LT", O.REDUCE_PRECISION: ", exponent_bits=5, mantissa_bits=10"}
    table: dict[Opcode, Template] = {}
    for op in Opcode:
        if not op.is_elementwise or op in REFUSED or op in (O.SELECT, O.CLAMP):
            continue

        def template(a, b, op=op):
            t = types.get(op, "f32")
            args = [f"x{k}" for k in range(op.arity)]
            lines = [f"%r = {out_types.get(op, t)}[{a},{b}] {op.text}({', '.join('%' + x for x in args)})"
                     f"{attrs.get(op, '')}"]
            return [f"{x}: {t}[{a},{b}]" for x in args], lines, ["r"]
        table[op] = template
    table[O.SELECT] = lambda a, b: ([f"p: pred[{a},{b}]", f"x: f32[{a},{b}]", f"y: f32[{a},{b}]"],
                                    [f"%r = f32[{a},{b}] select(%p, %x, %y)"], ["r"])
    table[O.CLAMP] = lambda a, b: (["lo: f32[]", f"x: f32[{a},{b}]", "hi: f32[]"],
                                   [f"%r = f32[{a},{b}] clamp(%lo, %x, %hi)"], ["r"])
    return table


def _constant(a, b):
    values = ", ".join(f"{k + 0.5}" for k in range(a))
    return [f"x: f32[{a}]"], [f"%k = f32[{a}] constant({{{values}}})", f"%r = f32[{a}] add(%x, %k)"], ["r"]


TEMPLATES: dict[Opcode, Template] = {
    **_elementwise(),
    O.PARAMETER: lambda a, b: ([f"x: f32[{a},{b}]"], [], ["x"]),
    O.CONSTANT: _constant,
    O.IOTA: lambda a, b: ([], [f"%r = s32[{a},{b}] iota(), iota_dimension=1"], ["r"]),
    O.AFTER_ALL: lambda a, b: ([f"x: f32[{a}]"], ["%t = token[] after-all()", f"%r = f32[{a}] negate(%x)"], ["r"]),
    O.PARTITION_ID: lambda a, b: ([], ["%r = u32[] partition-id()"], ["r"]),
    O.REPLICA_ID: lambda a, b: ([], ["%r = u32[] replica-id()"], ["r"]),
    O.BITCAST_CONVERT: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = s32[{a},{b}] bitcast-convert(%x)"], ["r"]),
    O.BROADCAST: lambda a, b: ([f"x: f32[{b}]", f"y: f32[{a}]"], [
        f"%r = f32[{a},{b}] broadcast(%x), dimensions={{1}}", f"%s = f32[{a},{b},2] broadcast(%y), dimensions={{0}}"],
        ["r", "s"]),
    O.RESHAPE: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = f32[{a * b}] reshape(%x)",
                                                    f"%s = f32[{b},1,{a}] reshape(%x)"], ["r", "s"]),
    O.DYNAMIC_RESHAPE: lambda a, b: ([f"x: s32[{a},{b}]", "n: s32[]", "m: s32[]"],
                                     [f"%r = s32[<={a},<={b}] dynamic-reshape(%x, %n, %m)"], ["r"]),
    O.BITCAST: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = f32[{b},{a}]{{0,1}} bitcast(%x)"], ["r"]),
    O.TRANSPOSE: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = f32[{b},{a}] transpose(%x), dimensions={{1,0}}"],
                               ["r"]),
    O.SLICE: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = f32[{a},{b - 1}] slice(%x), slice={{[0:{a}], [1:{b}]}}",
                                                  f"%s = f32[{(a + 1) // 2},1] slice(%x), slice={{[0:{a}:2], [0:1]}}"],
                           ["r", "s"]),
    O.DYNAMIC_SLICE: lambda a, b: ([f"x: f32[{a},{b}]", "i: s32[]", "j: s32[]"], [
        f"%r = f32[{a},1] dynamic-slice(%x, %i, %j), dynamic_slice_sizes={{{a},1}}"], ["r"]),
    O.DYNAMIC_UPDATE_SLICE: lambda a, b: ([f"x: f32[{a},{b}]", f"u: f32[{a},1]", "i: s32[]", "j: s32[]"], [
        f"%r = f32[{a},{b}] dynamic-update-slice(%x, %u, %i, %j)"], ["r"]),
    O.CONCATENATE: lambda a, b: ([f"x: f32[{a},{b}]", f"y: f32[{a},2]", f"z: f32[1,{b}]"], [
        f"%r = f32[{a},{b + 2}] concatenate(%x, %y), dimensions={{1}}",
        f"%s = f32[{a + 1},{b}] concatenate(%x, %z), dimensions={{0}}"], ["r", "s"]),
    O.PAD: lambda a, b: ([f"x: f32[{a},{b}]", "v: f32[]"], [
        f"%r = f32[{_pad_dim(a, 1, 2, 1)},{_pad_dim(b, 0, -1, 0)}] pad(%x, %v), padding=1_2_1x0_-1"], ["r"]),
    O.REVERSE: lambda a, b: ([f"x: f32[{a},{b}]"], [f"%r = f32[{a},{b}] reverse(%x), dimensions={{0,1}}"], ["r"]),
    O.GATHER: lambda a, b: ([f"x: f32[{a},{b}]", "i: s32[4,1]", f"y: f32[5,{b}]", f"j: s32[{a},1]", "k: s32[3,2]"], [
        f"%r = f32[4,{b}] gather(%x, %i), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, "
        f"index_vector_dim=1, slice_sizes={{{min(a, 1)},{b}}}",
        f"%s = f32[{a},{b}] gather(%y, %j), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, "
        f"index_vector_dim=1, slice_sizes={{1,{b}}}",
        f"%t = f32[3,{min(a, 2)},1] gather(%x, %k), offset_dims={{1,2}}, collapsed_slice_dims={{}}, "
        f"start_index_map={{0,1}}, index_vector_dim=1, slice_sizes={{{min(a, 2)},1}}"], ["r", "s", "t"]),
    O.SCATTER: lambda a, b: ([f"x: f32[{a},{b}]", "i: s32[4,1]", f"u: f32[4,{b}]", f"y: f32[5,{b}]", f"j: s32[{a},1]",
                              f"w: f32[{a},{b}]"], [
        f"%r = f32[{a},{b}] scatter(%x, %i, %u), update_window_dims={{1}}, inserted_window_dims={{0}}, "
        f"scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%add_c",
        f"%s = f32[5,{b}] scatter(%y, %j, %w), update_window_dims={{1}}, inserted_window_dims={{0}}, "
        f"scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=%add_c"], ["r", "s"]),
    O.GET_DIMENSION_SIZE: lambda a, b: ([f"x: f32[{a},{b}]"], ["%r = s32[] get-dimension-size(%x), dimensions={0}"],
                                        ["r"]),
    O.SET_DIMENSION_SIZE: lambda a, b: ([f"x: f32[{a},{b}]"], [
        f"%n = s32[] constant({a // 2})", f"%r = f32[<={a},{b}] set-dimension-size(%x, %n), dimensions={{0}}"],
        ["r"]),
    O.REDUCE: lambda a, b: ([f"x: f32[{a},{b}]", f"k: s32[{a},{b}]"], [
        "%z = f32[] constant(0)", "%m = s32[] constant(-1)",
        f"%r = f32[{a}] reduce(%x, %z), dimensions={{1}}, to_apply=%add_c",
        f"%s = f32[{b}] reduce(%x, %z), dimensions={{0}}, to_apply=%add_c",
        "%t = f32[] reduce(%x, %z), dimensions={0,1}, to_apply=%add_c",
        f"%v = (f32[{a}], s32[{a}]) reduce(%x, %k, %z, %m), dimensions={{1}}, to_apply=%argmax_c",
        f"%v0 = f32[{a}] get-tuple-element(%v), index=0", f"%v1 = s32[{a}] get-tuple-element(%v), index=1"],
        ["r", "s", "t", "v0", "v1"]),
    O.REDUCE_WINDOW: lambda a, b: ([f"x: f32[{a},{b}]"], [
        "%z = f32[] constant(0)",
        f"%r = f32[{a + 1},{b + 1}] reduce-window(%x, %z), window={{size=2x2 pad=1_1x1_1}}, to_apply=%add_c"],
        ["r"]),
    O.SELECT_AND_SCATTER: lambda a, b: ([f"x: f32[{a},{b}]", f"s: f32[{a + 1},{b + 1}]"], [
        "%z = f32[] constant(0)",
        f"%r = f32[{a},{b}] select-and-scatter(%x, %s, %z), window={{size=2x2 pad=1_1x1_1}}, select=%ge_c, "
        f"scatter=%add_c"], ["r"]),
    O.DOT: lambda a, b: ([f"x: f32[{a},{b}]", f"w: f32[{b},4]", f"y: f32[3,{a}]", f"v: f32[{a},2]"], [
        f"%r = f32[{a},4] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
        "%s = f32[3,2] dot(%y, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}"], ["r", "s"]),
    O.CONVOLUTION: lambda a, b: ([f"x: f32[1,{a},{b},2]", "w: f32[2,2,2,3]"], [
        f"%r = f32[1,{a + 1},{b + 1},3] convolution(%x, %w), window={{size=2x2 pad=1_1x1_1}}, "
        f"dim_labels=b01f_01io->b01f"], ["r"]),
    O.TUPLE: lambda a, b: ([f"x: f32[{a},{b}]", "y: s32[]"], [f"%t = (f32[{a},{b}], s32[]) tuple(%x, %y)",
                                                              f"%r = f32[{a},{b}] get-tuple-element(%t), index=0"],
                           ["r"]),
    O.GET_TUPLE_ELEMENT: lambda a, b: ([f"x: f32[{a},{b}]", f"y: s32[{b}]"], [
        f"%t = (f32[{a},{b}], s32[{b}]) tuple(%x, %y)", f"%r = s32[{b}] get-tuple-element(%t), index=1"], ["r"]),
    O.CALL: lambda a, b: ([f"x: f32[{a},{b}]", "p: f32[]", "q: f32[]"], [
        f"%r = f32[{a},{b}] call(%x), to_apply=%neg_c", "%s = f32[] call(%p, %q), to_apply=%mix_c"], ["r", "s"]),
    O.FUSION: lambda a, b: ([f"x: f32[{a},{b}]", f"y: f32[{b}]"], [
        f"%f = (f32[{a},{b}], f32[{a}]) fusion(%x, %y), kind=kLoop, calls=%fused_c",
        f"%r = f32[{a},{b}] get-tuple-element(%f), index=0", f"%s = f32[{a}] get-tuple-element(%f), index=1",
        f"%u = f32[{2 * a},{b}] fusion(%x, %r), kind=kLoop, calls=%fused_cat_c"],  # a concatenate root: per part
        ["r", "s", "u"]),
    O.WHILE: lambda a, b: ([f"x: f32[{a},{b}]"], [
        "%z = s32[] constant(0)", f"%t = (s32[], f32[{a},{b}]) tuple(%z, %x)",
        f"%w = (s32[], f32[{a},{b}]) while(%t), condition=%cond_c, body=%body_c",
        f"%r = f32[{a},{b}] get-tuple-element(%w), index=1"], ["r"]),
    O.CONDITIONAL: lambda a, b: (["p: pred[]", "k: s32[]", f"x: f32[{a},{b}]"], [
        f"%r = f32[{a},{b}] conditional(%p, %x, %x), true_computation=%neg_c, false_computation=%dbl_c",
        f"%s = f32[{a},{b}] conditional(%k, %x, %x), branch_computations={{%neg_c, %dbl_c}}"], ["r", "s"]),
    O.MAP: lambda a, b: ([f"x: f32[{a},{b}]", f"y: f32[{a},{b}]"], [
        f"%r = f32[{a},{b}] map(%x, %y), dimensions={{0,1}}, to_apply=%mix_c"], ["r"]),
    O.SORT: lambda a, b: ([f"x: f32[{a},{b}]", f"k: s32[{a},{b}]"], [
        f"%t = (f32[{a},{b}], s32[{a},{b}]) sort(%x, %k), dimensions={{1}}, to_apply=%lt2_c",
        f"%r = f32[{a},{b}] get-tuple-element(%t), index=0", f"%s = s32[{a},{b}] get-tuple-element(%t), index=1",
        f"%u = (f32[{a},{b}], s32[{a},{b}]) sort(%x, %k), dimensions={{0}}, is_stable=true, to_apply=%lt2_c",
        f"%v = s32[{a},{b}] get-tuple-element(%u), index=1"], ["r", "s", "v"]),
    O.TOPK: lambda a, b: ([f"x: f32[{a},7]", f"y: f32[3,{b}]"], [
        f"%t = (f32[{a},3], s32[{a},3]) topk(%x), k=3, largest=true",
        f"%r = f32[{a},3] get-tuple-element(%t), index=0", f"%s = s32[{a},3] get-tuple-element(%t), index=1",
        "%u = (f32[3,1], s32[3,1]) topk(%y), k=1, largest=false", "%v = s32[3,1] get-tuple-element(%u), index=1"],
        ["r", "s", "v"]),
    O.CUSTOM_CALL: lambda a, b: ([f"x: f32[{a},7]"], [
        f"%t = (f32[{a},2], s32[{a},2]) custom-call(%x), custom_call_target=\"TopK\", called_computations={{%ge_c}}",
        f"%r = f32[{a},2] get-tuple-element(%t), index=0", f"%s = s32[{a},2] get-tuple-element(%t), index=1"],
        ["r", "s"]),
    O.FFT: lambda a, b: ([f"x: c64[{a},{b}]", f"y: f32[{a},{b}]"], [
        f"%r = c64[{a},{b}] fft(%x), fft_type=FFT, fft_length={{{b}}}",
        f"%s = c64[{a},{b // 2 + 1}] fft(%y), fft_type=RFFT, fft_length={{{b}}}",
        f"%u = f32[{a},{b}] fft(%s), fft_type=IRFFT, fft_length={{{b}}}",
        f"%v = c64[{a},{b}] fft(%x), fft_type=IFFT, fft_length={{{a},{b}}}"], ["r", "s", "u", "v"]),
    O.OPTIMIZATION_BARRIER: lambda a, b: ([f"x: f32[{a},{b}]"], [
        f"%t = (f32[{a},{b}]) tuple(%x)", f"%o = (f32[{a},{b}]) opt-barrier(%t)",
        f"%r = f32[{a},{b}] get-tuple-element(%o), index=0"], ["r"]),
}

_NAME = re.compile(r"%([A-Za-z_][\w.]*)")


def shape_module(shape_set: str) -> str:
    """One module with every template at the shape set's dims; instruction names get the opcode's prefix."""
    a, b = SHAPE_SETS[shape_set]
    params, lines, results = [], [], []
    for op, template in TEMPLATES.items():
        prefix = op.text.replace("-", "_") + "_"
        ps, ls, rs = template(a, b)
        params += [prefix + p for p in ps]
        body = [_NAME.sub(lambda m: m.group(0) if m.group(1).endswith("_c") else f"%{prefix}{m.group(1)}", line)
                for line in ls]
        lines += ["  " + line for line in body]
        shapes = {p.split(":")[0]: p.split(": ")[1] for p in params}
        shapes.update({m.group(1): m.group(2) for m in (re.match(r"%(\S+) = (\S+) ", x) for x in body) if m})
        results += [(prefix + r, shapes[prefix + r]) for r in rs]
    return module(f"asan_shapes_{shape_set}", params, lines, results, _computations(a, b))


def shape_inputs(mod: hlo.HloModule, shape_set: str) -> list[np.ndarray]:
    """Random inputs; indices and starts run past both ends of their operands (by up to 3)."""
    rng = np.random.default_rng(len(shape_set))
    args = random_args(mod, seed=7)
    a, b = SHAPE_SETS[shape_set]
    for k, p in enumerate(mod.entry.parameters):
        if p.name in ("gather_i", "gather_j", "gather_k", "scatter_i", "scatter_j", "dynamic_slice_i",
                      "dynamic_slice_j", "dynamic_update_slice_i", "dynamic_update_slice_j"):
            args[k] = rng.integers(-3, 9, args[k].shape).astype(np.int32)
        elif p.name in ("dynamic_reshape_n", "dynamic_reshape_m"):
            args[k] = np.int32(a if p.name.endswith("n") else b)
        elif p.name == "conditional_k":
            args[k] = np.int32(1)
        elif p.name in ("sort_x", "sort_k"):
            args[k] = np.round(args[k])  # ties: the stable sort's order shows
    return args


@pytest.fixture(scope="module")
def harnesses(kernel_cache, tmp_path_factory):
    ok, stderr = gcc_supports_asan()
    assert ok, f"gcc cannot link -fsanitize=address (install libasan)\n{stderr}"
    directory = tmp_path_factory.mktemp("asan_shapes")
    texts = {name: shape_module(name) for name in SHAPE_SETS}
    texts["checked"] = CHECKED
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(build_asan_harness, name, text, directory, kernel_cache)
                   for name, text in texts.items()}
        return {name: f.result() for name, f in futures.items()}


def _assert_clean(proc) -> str:
    stderr = proc.stderr.decode(errors="replace")
    assert "ERROR: AddressSanitizer" not in stderr and "ERROR: LeakSanitizer" not in stderr, stderr
    assert proc.returncode == 0, stderr
    return stderr


def test_every_opcode_runs_on_every_shape() -> None:
    missing = [op.text for op in Opcode if op not in TEMPLATES and op not in REFUSED]
    assert not missing, f"opcodes without an AddressSanitizer shape template: {missing}"
    for name in SHAPE_SETS:
        used = {inst.opcode for comp in hlo.parse_module(shape_module(name)).computations
                for inst in comp.instructions}
        assert set(TEMPLATES) <= used, [op.text for op in TEMPLATES if op not in used]


@pytest.mark.parametrize("shape_set", list(SHAPE_SETS))
def test_every_opcode_is_clean_under_address_sanitizer(shape_set: str, harnesses) -> None:
    mod, exe = harnesses[shape_set]
    args = shape_inputs(mod, shape_set)
    proc = _run_harness(exe, args)
    _assert_clean(proc)
    want = hlo.evaluate(mod, *args)
    got, offset = [], 0
    for w, shape in zip(want, mod.entry.root.shape.leaves()):
        n = w.size * w.dtype.itemsize
        m2m = shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major else None
        major = list(reversed(m2m)) if m2m else list(range(w.ndim))  # the buffer holds dims in this order
        flat = np.frombuffer(proc.stdout[offset:offset + n], w.dtype)
        got.append(flat.reshape([w.shape[d] for d in major]).transpose(np.argsort(major)))
        offset += n
    assert offset == len(proc.stdout), "the harness printed more bytes than the outputs hold"
    assert_matches(got, want, atol=1e-4, what=f"asan shapes {shape_set}")


# r2 (a checked scatter) runs before r1, whose operand is empty, so it always fails last.
CHECKED = module("asan_checked", ["x: f32[3,4]", "j: s32[2,1]", "e: f32[0,4]", "i: s32[2]", "y: f32[4,3]",
                                  "k: s32[2,1]", "w: f32[2,3]"], [
    "  %r0 = f32[2,4] gather(%x, %j), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
    "index_vector_dim=1, slice_sizes={1,4}, index_check=tf_gather_nd",
    "  %r2 = f32[4,3] scatter(%y, %k, %w), update_window_dims={1}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add_c, index_check=tf_tensor_scatter",
    "  %r1 = f32[2,4] gather(%e, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
    "index_vector_dim=1, slice_sizes={0,4}, index_check=tf_gather"],
    [("r0", "f32[2,4]"), ("r1", "f32[2,4]"), ("r2", "f32[4,3]")], comps="""
%add_c (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}""")


def _checked_args(j, k) -> list[np.ndarray]:
    return [np.ones((3, 4), np.float32), np.array(j, np.int32), np.zeros((0, 4), np.float32),
            np.array([0, 0], np.int32), np.ones((4, 3), np.float32), np.array(k, np.int32),
            np.ones((2, 3), np.float32)]


@pytest.mark.parametrize("j, message", [
    ([[0], [3]], "indices[1] = [3] does not index into param shape [3,4], node name: r0"),
    ([[-1], [0]], "indices[0] = [-1] does not index into param shape [3,4], node name: r0"),
    ([[2], [0]], "indices[0] = 0 is not in [0, 0)\n\t [[{{node r1}}]]"),  # any index of an empty operand
], ids=["nd-high", "nd-negative", "empty-operand"])
def test_checked_gathers_refuse_bad_indices_without_reading(j, message, harnesses) -> None:
    """TF's checks: status 3 and TF's message, nothing read past a buffer (the operand of r1 is empty)."""
    mod, exe = harnesses["checked"]
    args = _checked_args(j, [[3], [0]])
    proc = _run_harness(exe, args, "invalid")
    _assert_clean(proc)
    assert proc.stdout.decode() == message
    with pytest.raises(hlo.HloInvalidArgumentError, match=re.escape(message)):
        hlo.evaluate(mod, *args)


@pytest.mark.parametrize("k, row", [([[1], [4]], "indices[1] = [4]"), ([[-1], [9]], "indices[1] = [9]"),
                                    ([[-4], [0]], "indices[0] = [-4]")], ids=["high", "last-bad", "negative"])
def test_checked_scatter_refuses_bad_rows_without_writing(k, row, harnesses) -> None:
    """TF's check: status 3 and TF's message (its last bad row), nothing written to the scatter's result."""
    mod, exe = harnesses["checked"]
    args = _checked_args([[2], [0]], k)
    proc = _run_harness(exe, args, "invalid", "outputs")
    _assert_clean(proc)
    message, outputs = proc.stdout.split(b"\0", 1)
    assert message.decode() == f"{row} does not index into shape [4,3]\n\t [[{{{{node r2}}}}]]"
    assert len(outputs) == 4 * (8 + 8 + 12) and set(outputs[-4 * 12:]) == {0xAB}, "the refused scatter wrote"
    with pytest.raises(hlo.HloInvalidArgumentError, match=re.escape(message.decode())):
        hlo.evaluate(mod, *args)
