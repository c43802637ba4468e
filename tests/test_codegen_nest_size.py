"""Generated source grows linearly with a nest of concatenates or pads, not exponentially; a large
computation's loop nests are functions of their own.

A concatenate or pad writes its operand's index more than once (the clamp into the operand, the select);
written as text, a fused nest of them doubled the text at every level: DenseNet121's chain of fused
concatenates (each dense block concatenates onto the last) made a 2.2 GB C source that gcc ran for
minutes on. ``ElementalEmitter.shared_index`` names such an index once. gcc's cost grows faster than
linearly with a function's size, so a computation of ``OUTLINE_NESTS_FROM`` instructions or more outlines
its serial nests too (``backends/cpu/parallel.py`` ``emit_nest``). Numbers against the evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from backends import cpu
from tests.cpu_backend_util import check_module

# (the prelude alone is ~28 kB; as text, 16 levels of concatenates made 1.2 MB, 10 of pads 3.3 MB)
CONCATS, PADS, BOUND = 16, 10, 100_000


def _concat_nest(levels: int) -> str:
    params = ", ".join(f"p{k}: f32[2,1]" for k in range(levels + 1))
    body = [f"  %p{k} = f32[2,1] parameter({k})" for k in range(levels + 1)]
    body.append("  %c0 = f32[2,1] negate(%p0)")
    for k in range(1, levels + 1):
        body.append(f"  %c{k} = f32[2,{k + 1}] concatenate(%c{k - 1}, %p{k}), dimensions={{1}}")
    body[-1] = body[-1].replace(f"  %c{levels}", f"  ROOT %c{levels}")
    entry = [f"  %x{k} = f32[2,1] parameter({k})" for k in range(levels + 1)]
    args = ", ".join(f"%x{k}" for k in range(levels + 1))
    entry.append(f"  ROOT %f = f32[2,{levels + 1}] fusion({args}), kind=kLoop, calls=%fused")
    return (f"HloModule concat_nest\n\n%fused ({params}) -> f32[2,{levels + 1}] {{\n" + "\n".join(body) +
            f"\n}}\n\nENTRY e {{\n" + "\n".join(entry) + "\n}\n")


def _pad_nest(levels: int) -> str:
    body = ["  %p = f32[3] parameter(0)", "  %z = f32[] parameter(1)", "  %q0 = f32[3] negate(%p)"]
    for k in range(1, levels + 1):
        body.append(f"  %q{k} = f32[{3 + 2 * k}] pad(%q{k - 1}, %z), padding=1_1")
    body[-1] = body[-1].replace(f"  %q{levels}", f"  ROOT %q{levels}")
    n = 3 + 2 * levels
    return (f"HloModule pad_nest\n\n%fused (p: f32[3], z: f32[]) -> f32[{n}] {{\n" + "\n".join(body) +
            f"\n}}\n\nENTRY e {{\n  %x = f32[3] parameter(0)\n  %v = f32[] parameter(1)\n"
            f"  ROOT %f = f32[{n}] fusion(%x, %v), kind=kLoop, calls=%fused\n}}\n")


def test_a_nest_of_concatenates_writes_each_index_once(tmp_path):
    exe = cpu.compile(hlo.parse_module(_concat_nest(CONCATS)), cpu.CompileOptions(cache_dir=str(tmp_path)))
    assert len(exe.source) < BOUND
    check_module(exe)


def test_a_nest_of_pads_writes_each_index_once(tmp_path):
    exe = cpu.compile(hlo.parse_module(_pad_nest(PADS)), cpu.CompileOptions(cache_dir=str(tmp_path)))
    assert len(exe.source) < BOUND
    (got,) = check_module(exe, [np.arange(1.0, 4.0, dtype=np.float32), np.float32(-7.0)])
    assert got[PADS] == -1.0 and got[0] == -7.0


def _long_chain(n: int) -> str:
    """An entry of ``n`` + 3 instructions: ``n`` small unfused elementwise nests (serial: little work each)."""
    lines = ["  %x = f32[4,33] parameter(0)", "  %y = f32[4,33] parameter(1)", "  %v0 = f32[4,33] negate(%x)"]
    ops = ("add", "multiply", "subtract", "maximum")
    for k in range(1, n):
        lines.append(f"  %v{k} = f32[4,33] {ops[k % 4]}(%v{k - 1}, %y)")
    lines.append(f"  ROOT %out = f32[4,33] tanh(%v{n - 1})")
    return "HloModule chain\n\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


def test_a_large_computation_outlines_its_serial_nests(tmp_path, monkeypatch):
    from backends.cpu import computation

    module = hlo.parse_module(_long_chain(computation.OUTLINE_NESTS_FROM))
    exe = cpu.compile(module, cpu.CompileOptions(cache_dir=str(tmp_path)))
    nests = exe.source.count("__attribute__((noinline)) static void comp_0_seq")
    assert nests >= computation.OUTLINE_NESTS_FROM - 1  # one function per serial nest, called directly
    assert exe.source.count("_seq") > 2 * nests and "tfxla_parallel(" not in exe.source.split("comp_0(")[-1]
    args = [np.random.default_rng(0).uniform(-1.0, 1.0, (4, 33)).astype(np.float32) for _ in range(2)]
    got = check_module(exe, args)
    monkeypatch.setattr(computation, "OUTLINE_NESTS_FROM", 10**9)  # the same module, nests inline
    inline = cpu.compile(module, cpu.CompileOptions(cache_dir=str(tmp_path)))
    assert "_seq" not in inline.source
    np.testing.assert_array_equal(inline(*args)[0], got[0])


def _dot_chain(n: int) -> str:
    """``n`` oneDNN matmuls, each followed by a tanh (2n + 3 instructions)."""
    lines = ["  %x = f32[4,33] parameter(0)", "  %w = f32[33,33] parameter(1)", "  %t0 = f32[4,33] negate(%x)"]
    for k in range(1, n + 1):
        lines += [f"  %d{k} = f32[4,33] dot(%t{k - 1}, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                  f"  %t{k} = f32[4,33] tanh(%d{k})"]
    lines[-1] = lines[-1].replace(f"  %t{n}", f"  ROOT %t{n}")
    return "HloModule dots\n\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


def test_a_large_computation_outlines_its_onednn_calls(tmp_path, monkeypatch):
    from backends.cpu import computation, dnnl

    if dnnl.installation() is None:
        pytest.skip("oneDNN is not installed")
    module = hlo.parse_module(_dot_chain(computation.OUTLINE_NESTS_FROM // 2))
    exe = cpu.compile(module, cpu.CompileOptions(cache_dir=str(tmp_path)))
    calls = exe.source.count("if (tfxla_dnnl_run_")
    assert calls == computation.OUTLINE_NESTS_FROM // 2 and "dnnl_primitive_execute" not in exe.source.split(
        "static int comp_0(")[-1].split("TFXLA_EXPORT")[0]  # none left in the computation function
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1.0, 1.0, (4, 33)).astype(np.float32), rng.uniform(-0.3, 0.3, (33, 33)).astype(np.float32)]
    got = check_module(exe, args, rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(computation, "OUTLINE_NESTS_FROM", 10**9)
    inline = cpu.compile(module, cpu.CompileOptions(cache_dir=str(tmp_path)))
    assert "tfxla_dnnl_run_" not in inline.source
    np.testing.assert_array_equal(inline(*args)[0], got[0])
