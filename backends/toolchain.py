"""The native C/C++ toolchain every backend shares: gcc (or ``$CC``) building shared objects.

The CPU backend compiles its kernels with it, the CUDA backend its host emulator (``cuda/host_emulator.py``,
g++). Shared objects live in the content-addressed cache of ``backends.kernel_cache``, keyed by sha256 of
(source, full compiler command, compiler version, and what ``-march=native`` resolves to on this CPU),
under ``<cache_dir>/<key[:2]>/<key>.so``; a failed compile raises ``CompileError`` (command, stderr, kept
source).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from backends import kernel_cache
from backends.kernel_cache import CompileError, build_cached


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    return kernel_cache.tool_version(cc, f"the C compiler {cc!r}", timeout=30)


@functools.lru_cache(maxsize=None)
def native_target(cc: str, target_flags: tuple[str, ...]) -> str:
    """What ``-march=native`` (or any ``native`` target flag) means on this machine, as ``cc`` resolves it:
    the target options it enables (``-Q --help=target``). Empty when no flag says ``native``.

    Part of the cache key: the command line reads the same on every CPU, the code it produces does not,
    so a cache shared between machines (a network home, a copied image) must not hand one CPU's kernel to
    another that lacks its instructions.
    """
    if not any("native" in f for f in target_flags):
        return ""
    cmd = [cc, *target_flags, "-Q", "--help=target"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"cannot run the C compiler {cc!r}: {e}", cmd, "", "") from e
    if out.returncode != 0:
        raise CompileError(f"the C compiler {cc!r} cannot resolve {' '.join(target_flags)}", cmd, out.stderr, "")
    return out.stdout


@dataclass(frozen=True)
class CompilerOptions:
    cc: str = field(default_factory=lambda: os.environ.get("CC", "gcc"))
    # -fno-tree-slp-vectorize: GCC 12.2's SLP vectorizer miscompiled generated kernels twice (dropped the
    # rounding in (float)(_Float16)x; zeroed the last row of a small 2-D f64 convert/subtract loop nest).
    # The loop vectorizer, which does the work in our loop nests, is kept.
    opt_flags: tuple[str, ...] = ("-O3", "-fno-tree-slp-vectorize")
    # -mno-avx512fp16: GCC 12's SLP vectorizer drops the rounding in (float)(_Float16)x with AVX512-FP16.
    # -mprefer-vector-width=512: GCC defaults to 256-bit vectors here; 512 measured 1.25x faster on gelu.
    target_flags: tuple[str, ...] = ("-march=native", "-mno-avx512fp16", "-mprefer-vector-width=512")
    # The OpenMP SIMD pragmas (``#pragma omp simd``, ``declare reduction``): -fopenmp-simd, which links no
    # OpenMP runtime. Kernels never use OpenMP threads (they run on the caller's: kernel ABI 2).
    openmp: bool = True
    extra_flags: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ("-lm",)
    include_dirs: tuple[str, ...] = ()
    library_dirs: tuple[str, ...] = ()
    sanitize: tuple[str, ...] = ()  # e.g. ("address",) for AddressSanitizer builds
    # >1: gcc optimizes and generates the kernel's functions in that many parallel jobs (-flto=N: one
    # translation unit, partitioned after whole-program analysis; lto-wrapper runs them through make,
    # so without make on PATH it stays 1). The output does not depend on N (``cache_key``).
    jobs: int = 1

    @property
    def parallel_jobs(self) -> int:
        """``jobs``, or 1 where gcc could not run them (no make)."""
        return self.jobs if self.jobs > 1 and make_available() else 1

    def command(self, source: str, output: str) -> list[str]:
        cmd = [self.cc, "-std=c11", "-shared", "-fPIC", *self.opt_flags, *self.target_flags]
        if self.openmp:
            cmd.append("-fopenmp-simd")
        if self.parallel_jobs > 1:
            cmd.append(f"-flto={self.parallel_jobs}")
        cmd += [f"-fsanitize={s}" for s in self.sanitize]
        cmd += [f"-I{d}" for d in self.include_dirs] + list(self.extra_flags)
        cmd += [source, "-o", output]
        # DT_RPATH, not DT_RUNPATH: it also finds what those libraries need from their own directory
        # (oneDNN's TBB build needs libtbb and libimf beside it and has no rpath of its own).
        cmd += [f"-L{d}" for d in self.library_dirs] + [f"-Wl,-rpath,{d}" for d in self.library_dirs]
        cmd += ["-Wl,--disable-new-dtags"] if self.library_dirs else []
        cmd += list(self.libraries)
        return cmd


def cache_key(source: str, options: CompilerOptions) -> str:
    # The command is hashed with placeholder paths so the key does not depend on where we compile, and with
    # one job count for every parallel build: -flto's partitions depend on the code, not on how many jobs
    # compile them (a parallel build is keyed apart from a serial one, whose code may differ).
    keyed = dataclasses.replace(options, jobs=min(options.parallel_jobs, 2))
    return kernel_cache.cache_key(source, keyed.command("SOURCE.c", "OUTPUT.so"), compiler_version(options.cc),
                                  native_target(options.cc, options.target_flags))


@functools.lru_cache(maxsize=None)
def make_available() -> bool:
    """Whether gcc's lto-wrapper finds ``make`` (``$MAKE``) to run parallel jobs with."""
    return shutil.which(os.environ.get("MAKE") or "make") is not None


def default_jobs(concurrent: int = 1) -> int:
    """Compiler jobs for each of ``concurrent`` kernels compiling at once: the CPUs this process may use,
    shared out (at least 1, at most ``MAX_JOBS``)."""
    return max(1, min(MAX_JOBS, len(os.sched_getaffinity(0)) // max(concurrent, 1)))


MAX_JOBS = 16


@dataclass(frozen=True)
class CompiledKernel:
    path: Path
    source_path: Path
    key: str
    cache_hit: bool
    command: tuple[str, ...]
    sha256: str = ""  # of the shared object (its cache record)


def compile_shared_object(source: str, options: CompilerOptions | None = None,
                          cache_dir: str | os.PathLike | None = None, name: str = "kernel") -> CompiledKernel:
    """Compile ``source`` to a shared object, or return the cached one."""
    options = options or CompilerOptions()
    built = build_cached(source, cache_key(source, options), options.command, cache_dir=cache_dir, name=name,
                         source_suffix=".c", output_suffix=".so", tool="C compiler")
    return CompiledKernel(built.path, built.source_path, built.key, built.cache_hit, built.command, built.sha256)

