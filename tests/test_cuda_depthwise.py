"""The depthwise convolution kernel (``backends/cuda/kernel_depthwise.py``): which convolutions it takes, the
launch it chooses, and its numbers on the host emulator against the evaluator.

``tests.gpu.cases.MODULES["depthwise"]`` (NHWC 3x3 with a bias + relu6 epilogue, stride 2 with asymmetric
padding, multiplier 2, f16 5x5, NCHW with rhs dilation and reversal, 1-D f64 stride 3) also runs in
test_cuda_emulated.py and compiles in test_cuda_nvcc.py; the modules here add bf16, a 3-D window, a
permuted output layout, fused operand producers and the small-problem launch, and compile with nvcc
(sm_80, sm_90, warnings as errors). Tolerances: ``tests.gpu.cases.compare`` (f32 rtol 1e-4 / atol 1e-5,
f64 rtol 1e-9 / atol 1e-11, f16/bf16 1e-2).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

import backends.cuda as cuda
import hlo
from backends.cuda.compiler import NvccOptions, compile_fatbin
from backends.cuda.host_emulator import CUDA_INCLUDE, host_executables
from backends.cuda.pipeline import optimize
from tests.gpu.cases import MODULES, compare, random_args

EXTRA = {
    # bf16, multiplier 3, a 3-D window with a stride in the middle dim (two outer window loops).
    "bf16_3d": """HloModule bf16_3d
ENTRY main {
  x = bf16[2,5,9,12,4] parameter(0)
  w = bf16[3,3,3,1,12] parameter(1)
  ROOT c = bf16[2,5,5,12,12] convolution(x, w), window={size=3x3x3 stride=1x2x1 pad=1_1x1_1x1_1}, dim_labels=b012f_012io->b012f, feature_group_count=4
}
""",
    # The output's spatial dims in the other order (b10f): positions are read through dim_labels.
    "permuted": """HloModule permuted
ENTRY main {
  x = f32[2,6,13,32] parameter(0)
  w = f32[3,2,1,32] parameter(1)
  ROOT c = f32[2,13,6,32] convolution(x, w), window={size=3x2 pad=1_1x0_1 rhs_reversal=1x0}, dim_labels=b01f_01io->b10f, feature_group_count=32
}
""",
    # Operand producers fused into the convolution (convert, exponential) and a multiply epilogue.
    "fused_operands": """HloModule fused_operands
fused {
  p0 = f16[2,8,9,16] parameter(0)
  p1 = f32[3,3,1,16] parameter(1)
  p2 = f32[2,8,9,16] parameter(2)
  xf = f32[2,8,9,16] convert(p0)
  e = f32[2,8,9,16] exponential(xf)
  c = f32[2,8,9,16] convolution(e, p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=16
  ROOT m = f32[2,8,9,16] multiply(c, p2)
}

ENTRY main {
  x = f16[2,8,9,16] parameter(0)
  w = f32[3,3,1,16] parameter(1)
  s = f32[2,8,9,16] parameter(2)
  ROOT f = f32[2,8,9,16] fusion(x, w, s), kind=kOutput, calls=fused
}
""",
    # Few outputs: one per thread (more threads rather than more reuse).
    "small": """HloModule small
ENTRY main {
  x = f32[1,4,4,8] parameter(0)
  w = f32[3,3,1,8] parameter(1)
  ROOT c = f32[1,4,4,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
}
""",
}

DECLINED = {  # -> the elemental loop takes them
    "grouped, not depthwise": ("f32[2,8,8,8]", "f32[3,3,4,8]", "f32[2,8,8,8]", "size=3x3 pad=1_1x1_1", 2),
    "lhs dilation": ("f32[2,8,8,8]", "f32[3,3,1,8]", "f32[2,15,15,8]", "size=3x3 pad=1_1x1_1 lhs_dilate=2x2", 8),
    "81 taps": ("f32[2,8,8,8]", "f32[9,9,1,8]", "f32[2,8,8,8]", "size=9x9 pad=4_4x4_4", 8),
    "integer": ("s32[2,8,8,8]", "s32[3,3,1,8]", "s32[2,8,8,8]", "size=3x3 pad=1_1x1_1", 8),
}


def _module(name: str) -> hlo.HloModule:
    return hlo.parse_module(MODULES[name] if name in MODULES else EXTRA[name])


def _prepared(name: str) -> hlo.HloModule:
    return _module(name) if name == "fused_operands" else optimize(_module(name))  # already fused


def _launch_notes(g: cuda.GeneratedModule) -> dict[str, str]:
    return {k: re.search(rf"/\* launch: (.*) \*/\n[^\n]* {k}\(", g.source).group(1) for k in g.kernels}


def test_every_depthwise_convolution_gets_the_depthwise_kernel() -> None:
    for name in ("depthwise", *EXTRA):
        g = cuda.generate(_prepared(name))
        assert set(g.strategies.values()) == {"conv-depthwise"}, (name, g.strategies)
    assert cuda.generate(optimize(_module("convolutions"))).strategies["k2_d"] == "conv-depthwise"


def test_the_launch_is_chosen_from_the_shapes_and_recorded() -> None:
    g = cuda.generate(optimize(_module("depthwise")))
    notes = _launch_notes(g)
    launches = {launch.kernel: launch for launch in g.program.launches()}
    # [2, 9, 11, 24]: 24 features x 9 rows x ceil(11 / 4) column chunks x 2 images = 1296 threads.
    assert launches["k0_fusion_0"].grid == (6, 1, 1) and launches["k0_fusion_0"].block == (256, 1, 1)
    assert "4 output(s) per thread along output dim 2 (6 input loads for 4x3 products" in notes["k0_fusion_0"]
    assert "epilogue %relu6" in notes["k0_fusion_0"]
    assert "(9 input loads for 4x3 products" in notes["k1_s"]  # stride 2: 3 * 2 + 3 positions
    assert "16 features (8 inputs x multiplier 2)" in notes["k2_m"]
    assert "along output dim 3" in notes["k4_n"]  # NCHW: the last spatial dim is dim 3
    assert "(8 input loads for 4x2 products" in notes["k5_o"]  # stride 3 > window 2: no reuse, holes unread
    assert "double accumulation" in notes["k5_o"] and "float accumulation" in notes["k3_h"]
    (small,) = _launch_notes(cuda.generate(optimize(_module("small")))).values()
    assert "1 output(s) per thread" in small  # 32 threads with 4 per thread would be too few


def test_the_fast_case_reads_and_writes_with_the_feature_fastest_across_threads() -> None:
    g = cuda.generate(optimize(_module("depthwise")))
    assert "const int64_t feat = lin % 24;" in g.source
    assert "p0[chan + (at * 24) + (i6 * 264) + (b1 * 2376)]" in g.source  # consecutive threads, consecutive chans
    assert "r0[feat + ((x3 + q) * 24) + (x2 * 264) + (b1 * 2376)] = v12;" in g.source
    assert "const int64_t chan = feat / 2;" in g.source  # multiplier 2: output o reads input o / 2


@pytest.mark.parametrize("what", sorted(DECLINED))
def test_other_convolutions_are_declined(what: str) -> None:
    lhs, rhs, out, window, groups = DECLINED[what]
    text = f"""HloModule declined
ENTRY main {{
  x = {lhs} parameter(0)
  w = {rhs} parameter(1)
  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f, feature_group_count={groups}
}}
"""
    g = cuda.generate(hlo.parse_module(text))
    assert list(g.strategies.values()) == ["loop"]


@pytest.mark.skipif(not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_fp16.h")), reason="no CUDA headers")
def test_it_matches_the_evaluator_on_the_host_emulator(tmp_path) -> None:
    names = ["depthwise", *EXTRA]
    exes = host_executables([_prepared(n) for n in names], str(tmp_path))
    for name, exe in zip(names, exes):
        module = _module(name)
        for seed in (0, 1):
            args = random_args(module, seed)
            problems = compare(exe(*args), hlo.evaluate(module, *args), name)
            assert not problems, "\n".join(problems)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_it_compiles_for_sm80_and_sm90_without_warnings(tmp_path) -> None:
    for name in EXTRA:
        result = compile_fatbin(cuda.emit_source(_prepared(name)), NvccOptions(warnings_as_errors=True), tmp_path, name)
        assert result.stderr == "" and result.path.stat().st_size > 0
