"""Generated source grows linearly with a nest of concatenates or pads, not exponentially.

A concatenate or pad writes its operand's index more than once (the clamp into the operand, the select);
written as text, a fused nest of them doubled the text at every level: DenseNet121's chain of fused
concatenates (each dense block concatenates onto the last) made a 2.2 GB C source that gcc ran for
minutes on. ``ElementalEmitter.shared_index`` names such an index once. Numbers against the evaluator.
"""

from __future__ import annotations

import numpy as np

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
