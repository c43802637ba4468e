"""Micro benchmark of ``backends/cpu/vmath.py`` (not a test): throughput on 1e7 float32 values.

    python -m bench.vmath_bench [--n 10000000] [--repeats 7]

One thread throughout. For each function, a plain C loop ``y[i] = f(x[i])`` is
compiled like generated kernels (``-O3 -march=native``, gcc's default 256-bit
vectors), once calling our ``tfxla_v*f`` function, once more with
``-mprefer-vector-width=512`` (AVX-512 zmm), and once calling glibc's libm
(``expf``, ``expm1f``, ``logf``, ``log1pf``, ``tanhf``, ``erff``; logistic as
``1 / (1 + expf(-x))``, the prelude's former ``tfxla_logisticf``). NumPy's
float32 ufunc (``out=`` preallocated; logistic as three ufuncs; erf from SciPy
if installed) runs on the same inputs. Prints the median time per call in ms,
ns per element and the speedups of our 256-bit loop over libm and NumPy.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from typing import Callable

import numpy as np

from backends.toolchain import CompilerOptions, compile_shared_object
from backends.cpu.vmath import VMATH_C, VMATH_FUNCTIONS

LIBM = {"exp": "expf(v)", "expm1": "expm1f(v)", "log": "logf(v)", "log1p": "log1pf(v)", "tanh": "tanhf(v)",
        "logistic": "1.0f / (1.0f + expf(-v))", "erf": "erff(v)"}
INPUT_RANGE = {"exp": (-80, 80), "expm1": (-10, 10), "log": (1e-3, 1e3), "log1p": (-0.9, 100),
               "tanh": (-5, 5), "logistic": (-20, 20), "erf": (-4, 4)}


def _numpy_functions() -> dict[str, Callable[[np.ndarray, np.ndarray], object] | None]:
    def logistic(x, y):
        np.negative(x, out=y)
        np.exp(y, out=y)
        y += np.float32(1)
        np.reciprocal(y, out=y)
    try:
        from scipy.special import erf as scipy_erf
        erf = lambda x, y: scipy_erf(x, out=y)  # noqa: E731
    except ImportError:
        erf = None
    return {"exp": lambda x, y: np.exp(x, out=y), "expm1": lambda x, y: np.expm1(x, out=y),
            "log": lambda x, y: np.log(x, out=y), "log1p": lambda x, y: np.log1p(x, out=y),
            "tanh": lambda x, y: np.tanh(x, out=y), "logistic": logistic, "erf": erf}


def _source() -> str:
    loops = []
    for name, c in VMATH_FUNCTIONS.items():
        loops.append(f"void ours_{name}(const float *restrict x, float *restrict y, int64_t n) {{\n"
                     f"  for (int64_t i = 0; i < n; i++) y[i] = {c}(x[i]);\n}}\n")
        loops.append(f"void libm_{name}(const float *restrict x, float *restrict y, int64_t n) {{\n"
                     f"  for (int64_t i = 0; i < n; i++) {{ float v = x[i]; y[i] = {LIBM[name]}; }}\n}}\n")
    return "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n" + VMATH_C + "".join(loops)


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up: page in the output, load the code
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    base = CompilerOptions(openmp=False)
    wide = CompilerOptions(openmp=False, target_flags=base.target_flags + ("-mprefer-vector-width=512",))
    with tempfile.TemporaryDirectory() as cache:
        lib256 = ctypes.CDLL(str(compile_shared_object(_source(), base, cache, "vmath256").path))
        lib512 = ctypes.CDLL(str(compile_shared_object(_source(), wide, cache, "vmath512").path))
        rng = np.random.default_rng(0)
        numpy_fns = _numpy_functions()
        print(f"n = {args.n}, one thread, median of {args.repeats}; ms per call (ns per element)")
        header = ("function", "ours ymm", "ours zmm", "libm", "numpy", "vs libm", "vs numpy")
        print("{:<9} {:>15} {:>15} {:>15} {:>15} {:>8} {:>8}".format(*header))
        for name in VMATH_FUNCTIONS:
            lo, hi = INPUT_RANGE[name]
            x = rng.uniform(lo, hi, args.n).astype(np.float32)
            y = np.empty_like(x)
            px, py, n = ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(x.size)

            def c_call(lib, sym):
                f = getattr(lib, sym)
                return lambda: f(px, py, n)
            ours = _median_ms(c_call(lib256, f"ours_{name}"), args.repeats)
            ours512 = _median_ms(c_call(lib512, f"ours_{name}"), args.repeats)
            libm = _median_ms(c_call(lib256, f"libm_{name}"), args.repeats)
            npf = numpy_fns[name]
            numpy_ms = _median_ms(lambda: npf(x, y), args.repeats) if npf is not None else float("nan")
            cell = lambda ms: f"{ms:7.2f} ({ms * 1e6 / args.n:5.2f})"  # noqa: E731
            print(f"{name:<9} {cell(ours)} {cell(ours512)} {cell(libm)} {cell(numpy_ms)} "
                  f"{libm / ours:7.1f}x {numpy_ms / ours:7.1f}x")


if __name__ == "__main__":
    main()
