"""The nvcc driver and the CUDA kernel cache (the CPU backend's cache scheme, for fat binaries).

One nvcc call per module compiles every kernel for all target architectures
(``-gencode`` per arch: an ``sm_XX`` cubin each, plus the PTX of the newest
so newer GPUs can JIT it) into one fat binary, which the CUDA driver (PyCUDA's
``module_from_buffer``) loads on any of them. The cache is keyed by sha256 of
(source, the full nvcc command with placeholder paths, ``nvcc --version``);
the archs are part of the command. Entries live at
``<cache_dir>/<key[:2]>/<key>.fatbin`` next to the kept ``.cu``; writes are
atomic and a per-key file lock makes concurrent compiles of one source run
nvcc once. Failures raise ``backends.kernel_cache.CompileError`` (command, stderr,
source path). nvcc needs no GPU, so every generated kernel is compile-checked
on any machine that has it.

``NvccOptions.shared_command`` is the same compile linked into a shared object instead
(``-shared -Xcompiler -fPIC -cudart static``): the host launchers of ``host_launcher.py``, which the
TfxlaLaunch op loads. Their symbols are hidden except the ones marked visible (the static CUDA
runtime's never interpose on another copy in the process). ``require_nvcc`` is the clear error,
before anything is generated or compiled, where no nvcc is installed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from backends import kernel_cache
from backends.kernel_cache import build_cached
from backends.shared_object import LoadError, read_regular_file


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    return kernel_cache.tool_version(nvcc, f"nvcc ({nvcc!r})", timeout=60)


class NvccNotFound(FileNotFoundError):
    """No nvcc to compile CUDA with (the message says where it was looked for)."""


def find_nvcc() -> str:
    env = os.environ.get("TFXLA_NVCC")
    if env:
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(candidate):
            return candidate
    return "nvcc"


def require_nvcc(nvcc: str = "") -> str:
    """The nvcc executable to use (``nvcc`` if given, else ``find_nvcc()``); ``NvccNotFound`` if there is none."""
    exe = nvcc or find_nvcc()
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None:
        raise NvccNotFound(f"backend=cuda needs nvcc (the CUDA toolkit) to compile kernels, and {exe!r} was not found "
                           f"(looked at $TFXLA_NVCC, the PATH and /usr/local/cuda/bin/nvcc); install the CUDA "
                           f"toolkit or set TFXLA_NVCC")
    return found


@dataclass(frozen=True)
class NvccOptions:
    nvcc: str = ""  # empty: $TFXLA_NVCC, else nvcc on the PATH, else /usr/local/cuda/bin/nvcc
    archs: tuple[int, ...] = (80, 90)  # sm_80 (A100) and sm_90 (H100/H200); PTX of the last one too
    opt_flags: tuple[str, ...] = ("-O3",)
    warnings_as_errors: bool = False  # tests turn this on: generated code must compile without warnings
    extra_flags: tuple[str, ...] = ()

    @property
    def executable(self) -> str:
        return self.nvcc or find_nvcc()

    def gencode(self) -> list[str]:
        """One ``-gencode`` per arch: its cubin, and for the last one its PTX as well."""
        out = []
        for k, arch in enumerate(self.archs):
            code = f"[sm_{arch},compute_{arch}]" if k == len(self.archs) - 1 else f"sm_{arch}"
            out.append(f"-gencode=arch=compute_{arch},code={code}")
        return out

    def command(self, source: str, output: str) -> list[str]:
        cmd = [self.executable, "-fatbin", "-std=c++17", *self.opt_flags, *self.gencode()]
        if self.warnings_as_errors:
            cmd += ["-Werror", "all-warnings"]
        cmd += list(self.extra_flags) + [source, "-o", output]
        return cmd

    def shared_command(self, source: str, output: str) -> list[str]:
        """The shared-object build of a host launcher: kernels for every arch plus the host code, linked
        with the static CUDA runtime; only symbols marked visible are exported."""
        cmd = [self.executable, "-shared", "-Xcompiler", "-fPIC", "-cudart", "static", "-std=c++17",
               *self.opt_flags, *self.gencode()]
        if self.warnings_as_errors:
            cmd += ["-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror"]
        cmd += ["-Xcompiler", "-fvisibility=hidden", "-Xlinker", "--exclude-libs,ALL"]
        cmd += list(self.extra_flags) + [source, "-o", output]
        return cmd


def cache_key(source: str, options: NvccOptions, shared: bool = False) -> str:
    cmd = options.shared_command("SOURCE.cu", "OUTPUT.so") if shared else options.command("SOURCE.cu", "OUTPUT.fatbin")
    cmd[0] = os.path.basename(cmd[0])
    return kernel_cache.cache_key(source, cmd, nvcc_version(options.executable))


@dataclass(frozen=True)
class CompiledFatbin:
    path: Path
    source_path: Path
    key: str
    cache_hit: bool
    command: tuple[str, ...]
    stderr: str = ""  # nvcc's diagnostics of the compile that produced it ("" on a hit)
    sha256: str = ""  # of the fatbin, as its cache record says

    def read(self) -> bytes:
        """The fatbin's bytes, read once; they must have the recorded sha256."""
        data = read_regular_file(self.path)
        if self.sha256 and hashlib.sha256(data).hexdigest() != self.sha256:
            raise LoadError(f"{self.path} has sha256 {hashlib.sha256(data).hexdigest()}, but {self.sha256} was "
                            f"recorded for it: it changed after it was built, refusing to load it")
        return data


def compile_fatbin(source: str, options: NvccOptions | None = None, cache_dir: str | os.PathLike | None = None,
                   name: str = "module") -> CompiledFatbin:
    """Compile CUDA ``source`` to a fat binary for ``options.archs``, or return the cached one."""
    options = options or NvccOptions()
    built = build_cached(source, cache_key(source, options), options.command, cache_dir=cache_dir, name=name,
                         source_suffix=".cu", output_suffix=".fatbin", tool="nvcc")
    return CompiledFatbin(built.path, built.source_path, built.key, built.cache_hit, built.command, built.stderr,
                          built.sha256)


def batch_source(sources: list[str]) -> str:
    """Many generated modules as one translation unit, to compile-check them in one nvcc run (nvcc's
    start-up dominates small modules): one prelude, each module's globals and kernels in a namespace
    ``m<j>``, kernels renamed ``m<j>_k<N>_...`` (``extern "C"`` names are global). Kernel bodies are
    unchanged, so what compiles here compiles alone."""
    from backends.cuda.prelude import PRELUDE

    parts = [PRELUDE]
    for j, src in enumerate(sources):
        head, sep, body = src.partition(PRELUDE)
        if not sep:
            raise ValueError(f"source {j} is not a generated CUDA module (no prelude)")
        body = re.sub(r"\b(k\d+_)", f"m{j}_\\1", body)
        parts.append(f"namespace m{j} {{\n{body}\n}}  /* namespace m{j} */\n")
    return "".join(parts)
