"""No generated CPU kernel uses OpenMP: no OpenMP team is ever created by our kernels.

Kernels run their parallel loops on the caller's threads (kernel ABI 2: the TF launch op's TBB pool,
the Python runtime's pool) and are compiled with ``-fopenmp-simd``, which keeps the SIMD pragmas and links
no runtime. Checked on the shared objects of an elementwise kernel, a split reduction, a oneDNN
convolution and the Python runtime's pool: none has an undefined ``GOMP_*`` or ``omp_*`` symbol
(``nm -D --undefined-only``) or needs libgomp; and a fresh process that runs them on several threads
through ``backends.cpu`` has no libgomp mapped (``/proc/self/maps``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hlo
from backends.cpu import CodegenOptions, CompileOptions, compile as compile_module, dnnl
from backends.cpu import thread_pool
from tests.cpu_backend_util import kernel_cache  # noqa: F401  (a fixture)

ELEMENTWISE = """HloModule ew
ENTRY e {
  x = f32[64,1024] parameter(0)
  ROOT t = f32[64,1024] tanh(x)
}"""
REDUCTION = """HloModule red
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%f (x: f32[65536]) -> f32[] {
  %x = f32[65536] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%add
}
ENTRY e {
  x = f32[65536] parameter(0)
  ROOT r = f32[] fusion(x), kind=kLoop, calls=%f
}"""
CONV = """HloModule conv
ENTRY e {
  x = f32[1,16,16,8] parameter(0)
  w = f32[3,3,8,16] parameter(1)
  ROOT c = f32[1,14,14,16] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}"""


def _with_dnnl() -> list[str]:
    return [CONV] if dnnl.find_install() is not None else []


def _needs_gomp(path: str) -> bool:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return "libgomp" in out


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("readelf") is None, reason="binutils not installed")
def test_no_kernel_object_uses_openmp(kernel_cache) -> None:  # noqa: F811
    paths = []
    for text in [ELEMENTWISE, REDUCTION, *_with_dnnl()]:
        exe = compile_module(hlo.parse_module(text), CompileOptions(cache_dir=str(kernel_cache)))
        assert "tfxla_parallel(" in exe.source or "dnnl_primitive_execute(" in exe.source
        paths.append(str(exe.path))
    paths.append(str(thread_pool.build().path))
    for path in paths:
        out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True, check=True).stdout
        symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
        assert symbols, f"{path}: nm listed nothing"
        assert not [s for s in symbols if s.startswith(("GOMP_", "omp_", "__kmpc_"))], path
        assert not _needs_gomp(path), path


SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import backends.cpu, hlo
    from backends.cpu.runtime import Kernel

    for text in sys.argv[1:]:
        exe = backends.cpu.compile(hlo.parse_module(text))
        args = [np.random.default_rng(0).standard_normal(p.shape.dims).astype(np.float32)
                for p in exe.module.entry.parameters]
        kernel = Kernel(exe.path, exe.sha256, num_threads=3)
        for got, want in zip(kernel.run(*args), hlo.evaluate(exe.module, *args)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    print("MAPPED", sorted({line.split()[-1] for line in open("/proc/self/maps") if "gomp" in line or "libiomp" in line}))
""")


def test_running_kernels_loads_no_openmp_runtime() -> None:
    kernels = [ELEMENTWISE, REDUCTION]
    install = dnnl.installation()
    if install is not None and not any(_needs_gomp(str(p)) for p in Path(install.lib_dir).glob("libdnnl.so*")):
        kernels += _with_dnnl()  # (oneDNN's GNU OpenMP build would load libgomp itself)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *kernels], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MAPPED []" in proc.stdout, proc.stdout
