"""``tfxla_vexpf_nonpos`` (``backends/cpu/vmath.py``): the row programs' exp of ``x - max(x)``, for x <= 0
or NaN only. Bit for bit ``tfxla_vexpf`` on a sweep of that domain (every 512th float32 of the negative
half, dense runs around the subnormal and underflow thresholds and 0, -inf, NaNs), in both builds (FMA and
baseline x86-64), and its loop vectorizes with fewer vector instructions than ``tfxla_vexpf``'s."""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest

from backends.cpu.vmath import VMATH_C
from backends.toolchain import CompilerOptions, compile_shared_object
from tests.test_vmath import BUILDS, around

_LOOPS = "".join(f"void apply_{f}(const float *restrict x, float *restrict y, int64_t n) {{\n"
                 f"  for (int64_t i = 0; i < n; i++) y[i] = {f}(x[i]);\n}}\n"
                 for f in ("tfxla_vexpf", "tfxla_vexpf_nonpos"))
SOURCE = "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n" + VMATH_C + _LOOPS


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, ctypes.CDLL]:
    cache = tmp_path_factory.mktemp("vexp_rows")
    return {build: ctypes.CDLL(str(compile_shared_object(SOURCE, CompilerOptions(target_flags=flags, openmp=False),
                                                         cache, name=build).path)) for build, flags in BUILDS.items()}


def apply(lib: ctypes.CDLL, fn: str, x: np.ndarray) -> np.ndarray:
    y = np.empty_like(x)
    getattr(lib, f"apply_{fn}")(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data),
                                ctypes.c_int64(x.size))
    return y


def nonpositive_sweep() -> np.ndarray:
    negative_half = (np.arange(0x80000000, 1 << 32, 512, dtype=np.uint64).astype(np.uint32)).view(np.float32)
    thresholds = [-87.33654, -103.27893, -103.97208, -104.0, -0.3466, -1e-30, -2.0 ** -149]
    dense = np.concatenate([around(t) for t in thresholds])
    specials = np.array([0.0, -0.0, -np.inf, np.nan, -np.nan, -np.finfo(np.float32).max], np.float32)
    x = np.concatenate([negative_half, dense[dense <= 0], specials, np.arange(0x7FC00000, 0x7FC00400,
                                                                             dtype=np.uint32).view(np.float32)])
    return np.ascontiguousarray(x, np.float32)


@pytest.mark.parametrize("build", list(BUILDS))
def test_nonpositive_exp_is_vexpf_bit_for_bit(libs, build) -> None:
    x = nonpositive_sweep()
    want = apply(libs[build], "tfxla_vexpf", x)
    got = apply(libs[build], "tfxla_vexpf_nonpos", x)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    bad = np.nonzero(~same)[0]
    assert bad.size == 0, f"{build}: differs at {[(x[i], got[i], want[i]) for i in bad[:5]]}"
    assert np.isnan(got[np.isnan(x)]).all() and (got[x == -np.inf] == 0).all()


def _vector_instructions(asm: str, fn: str) -> int:
    """Vector instructions in the longest zmm/ymm block of ``apply_fn`` (its main vectorized loop)."""
    body = asm.split(f"apply_{fn}:")[1].split(".cfi_endproc")[0]
    blocks = re.split(r"\n\.L\d+:", body)
    return max(sum(1 for line in b.splitlines() if re.search(r"%[yz]mm", line)) for b in blocks)


def test_nonpositive_exp_loop_vectorizes_shorter(tmp_path) -> None:
    src = tmp_path / "vexp.c"
    src.write_text(SOURCE)
    proc = subprocess.run(["gcc", "-std=c11", "-O3", "-march=native", "-mprefer-vector-width=512",
                           "-fopt-info-vec-optimized", "-S", str(src), "-o", str(tmp_path / "vexp.s")],
                          capture_output=True, text=True, check=True)
    line = SOURCE.splitlines().index("  for (int64_t i = 0; i < n; i++) y[i] = tfxla_vexpf_nonpos(x[i]);") + 1
    assert re.search(rf"vexp\.c:{line}:\d+: optimized: loop vectorized", proc.stderr), proc.stderr
    asm = (tmp_path / "vexp.s").read_text()
    assert _vector_instructions(asm, "tfxla_vexpf_nonpos") < _vector_instructions(asm, "tfxla_vexpf")
