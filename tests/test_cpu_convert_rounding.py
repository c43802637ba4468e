"""Narrowing converts in generated C round once, to nearest-even, from the source type.

The expected values are worked out by hand (the comments say why), not taken from the evaluator or from
XLA: XLA:CPU's f64 -> f16 rounds through f32 on CPUs without AVX512-FP16 (1 + 2^-11 + 2^-30 becomes 1,
a tie after the first rounding) and directly on CPUs with it, and a kernel must answer the same on every
CPU. Every result here is also checked against ``hlo.evaluate``, the spec the backend is tested against.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from tests.cpu_backend_util import compile_text, kernel_cache, module  # noqa: F401  (fixture)

INF, NAN = np.inf, np.nan

# (source type, inputs, correctly rounded f16 results)
CASES = {
    "f64": (np.array([1 + 2**-11 + 2**-30, 1 + 2**-11, -(1 + 2**-11 + 2**-40), 65520.0, 65519.99, 2.0**-25,
                      2.0**-25 + 2.0**-60, 1e-300, NAN, -INF], np.float64),
            # above the tie -> up; exact tie -> even (1); 65520 is the tie between 65504 and 2^16 -> inf;
            # half the smallest subnormal ties to 0, a hair more rounds up to 2^-24
            np.array([1 + 2**-10, 1, -(1 + 2**-10), INF, 65504, 0, 2.0**-24, 0, NAN, -INF], np.float16)),
    "f32": (np.array([1 + 2**-11 + 2**-20, 1 + 2**-11, 65520.0, 2.0**-25, 3e38], np.float32),
            np.array([1 + 2**-10, 1, INF, 0, INF], np.float16)),
    "s64": (np.array([2049, 2051, 65519, 65520, -(2**62), 2**24 + 1], np.int64),
            # 2049 ties between 2048 and 2050 -> 2048 (even); 2051 ties -> 2052
            np.array([2048, 2052, 65504, INF, -INF, INF], np.float16)),
    "u64": (np.array([2**64 - 1, 4097, 6143], np.uint64),
            # spacing 4 above 4096: 4097 -> 4096; 6143 -> 6144
            np.array([INF, 4096, 6144], np.float16)),
}


@pytest.mark.parametrize("src", list(CASES))
def test_convert_to_f16_rounds_once(src: str, kernel_cache) -> None:
    x, want = CASES[src]
    n = x.size
    text = module(f"to_f16_{src}", [f"x: {src}[{n}]"], [f"  %r = f16[{n}] convert(%x)"], [("r", f"f16[{n}]")])
    exe = compile_text(text, kernel_cache)
    (got,) = exe(x)
    (spec,) = hlo.evaluate(exe.module, x)
    for name, value in (("kernel", got), ("evaluator", np.asarray(spec))):
        assert value.dtype == np.float16
        np.testing.assert_array_equal(value, want, err_msg=f"{name}, convert {src} -> f16 of {x!r}")
