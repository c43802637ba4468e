"""The CUDA generator's structure: which kernel each instruction gets, launch configurations recorded
in the source, the host program, refusals, errors, and that nothing imports PyCUDA before a call.

No GPU and no nvcc are needed here; numbers are checked in test_cuda_emulated.py (kernels run on the
host) and test_cuda_gpu.py (on a GPU), compilation in test_cuda_nvcc.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import backends.cuda as cuda
import hlo
from backends.cuda.pipeline import optimize
from backends.cuda.program import Copy, Launch, Switch, WhileLoop
from tests.gpu.cases import MODULES


def generated(name: str, fuse: bool = True) -> cuda.GeneratedModule:
    module = hlo.parse_module(MODULES[name])
    return cuda.generate(optimize(module) if fuse else module)


def test_importing_and_generating_never_imports_pycuda() -> None:
    code = ("import sys, hlo, backends.cuda as c\n"
            "from tests.gpu.cases import MODULES\n"
            "c.emit_source(hlo.parse_module(MODULES['softmax']))\n"
            "import backends.cpu, backends.cuda.host_emulator\n"
            "assert not [m for m in sys.modules if m.startswith('pycuda')], 'pycuda imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_kernel_has_its_launch_configuration_in_a_comment_and_names_are_deterministic() -> None:
    for name in MODULES:
        g = generated(name)
        for kernel in g.kernels:
            m = re.search(r"/\* launch: grid=\((\d+),(\d+),(\d+)\) block=\((\d+),(\d+),(\d+)\) [^\n]*\*/\n"
                          rf'extern "C" __global__ void __launch_bounds__\((\d+)\) {kernel}\(', g.source)
            assert m, f"{name}: no launch comment above {kernel}"
            launch = next(s for s in g.program.launches() if s.kernel == kernel)
            assert launch.grid == tuple(int(x) for x in m.groups()[:3])
            assert launch.block == tuple(int(x) for x in m.groups()[3:6])
            assert int(m.group(7)) == np.prod(launch.block)
        assert generated(name).source == g.source, f"{name}: generation is not deterministic"
        assert all(re.fullmatch(r"k\d+_\w+", k) for k in g.kernels)


def strategies(name: str) -> dict[str, str]:
    g = generated(name)
    return {k.split("_", 1)[1]: v for k, v in g.strategies.items()}


def test_reductions_get_row_split_and_column_kernels_chosen_from_the_shapes() -> None:
    g = generated("reductions")
    by_kernel = {(s.kernel, s.grid, s.block) for s in g.program.launches()}
    assert sorted(g.strategies.values()) == ["reduce-column", "reduce-column", "reduce-row", "reduce-row"]
    # [64, 300]: a warp per row, 8 rows per block; [8, 20000]: 512 threads per row.
    assert ("k0_fusion_0", (8, 1, 1), (32, 8, 1)) in by_kernel
    assert ("k1_fusion_1", (8, 1, 1), (512, 1, 1)) in by_kernel
    # [10000, 3] -> [3]: one column tile, so the 10000 rows are split over 10 blocks (y);
    # [4, 500, 33] -> [4, 33]: 2 column tiles for each of the 4 kept outer indices, not split.
    assert ("k2_fusion_2", (1, 10, 1), (32, 8, 1)) in by_kernel
    assert ("k3_fusion_3", (8, 1, 1), (32, 8, 1)) in by_kernel
    assert "k2_fusion_2_ticket" in g.source and "k3_fusion_3_ticket" not in g.source
    assert "__shfl_down_sync" not in g.source.split("#undef TFXLA_SHFL")[1]  # kernels use the typed helper
    full = generated("full_reduce")
    assert list(full.strategies.values()) == ["reduce-split"]
    (launch,) = full.program.launches()
    assert launch.grid[0] > 1 and launch.block == (256, 1, 1)
    assert "atomicAdd(&k0_fusion_0_ticket[row], 1u)" in full.source and "= 0u;" in full.source


def test_a_reduce_with_an_elementwise_epilogue_is_one_reduction_kernel() -> None:
    module = hlo.parse_module("""HloModule rms
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[64,512] parameter(0)
  x2 = f32[64,512] multiply(x, x)
  zero = f32[] constant(0)
  s = f32[64] reduce(x2, zero), dimensions={1}, to_apply=add
  eps = f32[] constant(1e-5)
  eb = f32[64] broadcast(eps), dimensions={}
  se = f32[64] add(s, eb)
  ROOT r = f32[64] rsqrt(se)
}
""")
    g = cuda.generate(optimize(module))
    assert list(g.strategies.values()) == ["reduce-row"]
    assert "(1.0f / sqrtf(" in g.source


def test_softmax_and_layer_norm_are_one_row_program_kernel_each() -> None:
    for name, kept_rows in (("softmax", 1), ("layer_norm", 0)):
        g = generated(name)
        assert list(g.strategies.values()) == ["row-program"], name
        (launch,) = g.program.launches()
        assert launch.grid == (37 if name == "softmax" else 64, 1, 1) and launch.block == (256, 1, 1)
        assert f"{kept_rows} row(s)" in g.source
        assert g.program.scratch_bytes == 0  # nothing but the output goes to memory


def test_transposes_dots_and_elementwise_loops_get_their_kernels() -> None:
    assert strategies("transposes") == {"t1": "transpose-tiled", "fusion_0": "transpose-tiled"}
    assert strategies("dots") == {"d1": "dot-tiled", "d2": "dot-wmma", "d3": "dot-tiled"}  # d2 is f16
    g = generated("gelu")
    assert list(g.strategies.values()) == ["loop"]
    assert "reinterpret_cast<const float4*>(p0)[g]" in g.source and "make_float4(" in g.source
    odd = generated("odd_loop_f64_int")  # 91 elements: not a multiple of 4, no float4
    assert "float4" not in odd.source.split("#undef TFXLA_SHFL")[1]


def test_convolutions_are_implicit_gemms_with_their_epilogue_and_depthwise_ones_their_own_kernel() -> None:
    g = generated("convolutions")
    assert sorted(g.strategies.values()) == ["conv-depthwise"] + ["conv-implicit-gemm"] * 3
    assert g.strategies["k2_d"] == "conv-depthwise"  # feature_group_count=8 (depthwise)
    assert "epilogue %cb" in g.source  # the bias add of the output fusion, applied before the store
    launches = {launch.kernel: launch for launch in g.program.launches()}
    assert launches["k0_fusion_0"].grid == (1, 8, 1) and launches["k0_fusion_0"].block == (16, 16, 1)


def test_control_flow_runs_on_the_host_and_sort_and_scatter_in_one_thread() -> None:
    g = generated("control_flow")
    kinds = [type(s) for s in g.program.steps]
    assert WhileLoop in kinds and Switch in kinds
    loop = next(s for s in g.program.steps if isinstance(s, WhileLoop))
    assert any(isinstance(s, Launch) for s in loop.cond) and isinstance(loop.body[-1], Copy)
    assert "while:" in g.program_text and "switch" in g.program_text
    s = generated("sort_scatter")
    serial = [launch for launch in s.program.launches() if s.strategies[launch.kernel] == "serial"]
    assert len(serial) == 2 and all(launch.grid == (1, 1, 1) and launch.block == (1, 1, 1) for launch in serial)
    assert "__device__ __forceinline__ int cmp_0(" in s.source  # the CPU comparator, as a device function


def test_device_code_is_written_in_the_cuda_dialect_not_rewritten_c() -> None:
    """The shared elemental rules and the serial strategy's kernels ask the CUDA dialect for f16's type
    and for loop pragmas: no ``_Float16`` (nvcc has none in device code) and no OpenMP anywhere."""
    for name in MODULES:
        source = generated(name).source
        assert "_Float16" not in source and "#pragma omp" not in source, name
    s = generated("sort_scatter_f16")
    assert set(s.strategies.values()) == {"serial"}
    scatter = s.source[s.source.index("void __launch_bounds__(1) k1_sc("):]
    assert "const float v6 = (float)(__half)((t4 + t5));" in scatter  # the combiner's f16 rounding
    assert "r0[w2 + (s3 * 2)] = (__half)(v6);" in scatter  # and store
    assert "__device__ __forceinline__ int cmp_0(float x0, float x1)" in s.source


def test_scratch_buffers_are_reused_and_inside_the_arena() -> None:
    module = hlo.parse_module("""HloModule chain
ENTRY main {
  a = f32[128,128] parameter(0)
  d1 = f32[128,128] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[128,128] dot(d1, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d3 = f32[128,128] dot(d2, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT d4 = f32[128,128] dot(d3, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    program = cuda.generate(module).program
    out = {launch.kernel: launch.args[-1] for launch in program.launches()}  # results come last
    # d1 and d2 are live together; d3 takes d1's place; d4 is the output.
    assert program.scratch_bytes == 2 * 128 * 128 * 4
    assert out["k0_d1"].space == "scratch" and out["k2_d3"] == out["k0_d1"]
    assert out["k1_d2"].offset == 128 * 128 * 4 and out["k3_d4"].space == "output"


def test_unsupported_instructions_are_refused_by_name() -> None:
    rng = hlo.parse_module("""HloModule r
ENTRY main {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  ROOT r = f32[4] rng(lo, hi), distribution=rng_uniform
}
""")
    with pytest.raises(cuda.CodegenUnsupported, match=r"%r: .*rng"):
        cuda.emit_source(rng)
    c64 = hlo.parse_module("""HloModule c
ENTRY main {
  x = c64[4] parameter(0)
  ROOT n = c64[4] negate(x)
}
""")
    with pytest.raises(cuda.CodegenUnsupported, match=r"parameter %x.*c64"):
        cuda.emit_source(c64)


def test_without_pycuda_a_call_says_what_is_missing(tmp_path) -> None:
    pytest.importorskip("shutil").which("nvcc") or pytest.skip("nvcc is not installed")
    try:
        import pycuda  # noqa: F401
        pytest.skip("PyCUDA is installed here")
    except ImportError:
        pass
    exe = cuda.compile(hlo.parse_module(MODULES["gelu"]), cuda.CompileOptions(cache_dir=str(tmp_path)))
    with pytest.raises(cuda.CudaUnavailable, match="needs PyCUDA"):
        exe(np.zeros((64, 300), np.float32))
    assert exe.device is None
