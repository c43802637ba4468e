"""Parallel C compiler jobs (``CompilerOptions.jobs``, ``TFXLA_FLAGS=--compile_jobs``): gcc -flto=N builds
the kernel whose results are those of a serial build, under one cache key whatever N (>1); without make
(which gcc's lto-wrapper runs the jobs with) a build stays serial, under the serial key."""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from backends import toolchain
from backends.cpu import CompileOptions, compile as compile_module
from backends.toolchain import CompilerOptions
from tfxla_plugin.cluster_compiler import compile_jobs
from tfxla_plugin.flags import Flags

MODULE = """HloModule jobs
ENTRY %main (x: f32[64,48], w: f32[48,40]) -> (f32[64,40], f32[64,48]) {
  %x = f32[64,48] parameter(0)
  %w = f32[48,40] parameter(1)
  %d = f32[64,40] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %e = f32[64,48] exponential(%x)
  %t = f32[64,48] tanh(%e)
  ROOT %r = (f32[64,40], f32[64,48]) tuple(%d, %t)
}
"""

needs_make = pytest.mark.skipif(not toolchain.make_available(), reason="gcc's parallel LTO jobs need make")


@needs_make
def test_parallel_jobs_build_the_serial_kernels_results(tmp_path):
    module = hlo.parse_module(MODULE)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 40)).astype(np.float32)]
    serial = compile_module(module, CompileOptions(cache_dir=str(tmp_path), jobs=1))
    parallel = compile_module(module, CompileOptions(cache_dir=str(tmp_path), jobs=2))
    assert serial.path != parallel.path and serial.source == parallel.source
    for a, b, want in zip(serial(*args), parallel(*args), hlo.evaluate(module, *args)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)


@needs_make
def test_the_key_tells_parallel_from_serial_but_not_the_job_count():
    source = "int f(int x) { return 2 * x; }\n"
    keys = {jobs: toolchain.cache_key(source, CompilerOptions(jobs=jobs)) for jobs in (1, 2, 8)}
    assert keys[2] == keys[8] != keys[1]
    assert "-flto=8" in CompilerOptions(jobs=8).command("a.c", "a.so")


def test_without_make_a_build_is_serial(monkeypatch):
    monkeypatch.setattr(toolchain, "make_available", lambda: False)
    options = CompilerOptions(jobs=4)
    assert options.parallel_jobs == 1 and not any(f.startswith("-flto") for f in options.command("a.c", "a.so"))
    source = "int f(int x) { return 2 * x; }\n"
    assert toolchain.cache_key(source, options) == toolchain.cache_key(source, CompilerOptions())


def test_compile_jobs_flag_shares_the_cpus_out(monkeypatch):
    monkeypatch.setattr(toolchain.os, "sched_getaffinity", lambda _pid: set(range(8)))
    assert compile_jobs(Flags.parse("--compile_jobs=3"), concurrent=4) == 3
    assert compile_jobs(Flags.parse("--compile_jobs=0")) == 8
    assert compile_jobs(Flags.parse("--compile_jobs=0"), concurrent=3) == 2
    assert compile_jobs(Flags.parse("--compile_jobs=0"), concurrent=16) == 1
    assert compile_jobs(Flags()) == 1  # the default: one compiler process per kernel
