"""Regenerates the polynomial coefficients of ``backends/cpu/vmath.py`` (not a test; about 30 s).

    python -m bench.vmath_fit

Each polynomial is a weighted minimax fit computed by Lawson's algorithm
(iteratively reweighted least squares, which converges to the minimax
solution) in float64 on a dense grid, so that the weighted error is the
relative error of the function (or, for erf's tail, the absolute error of erf).
Printed: the max weighted error of the float64 fit in units of 2^-24, and the
coefficients rounded to float32 as C hex literals, lowest degree first (the C
code evaluates them by Horner's rule from the highest).
"""

from __future__ import annotations

import math

import numpy as np

U = 2.0 ** -24


def lawson(x: np.ndarray, g: np.ndarray, w: np.ndarray, powers, iters: int = 300) -> tuple[np.ndarray, float]:
    """Coefficients c minimizing max |w (g - sum_k c_k x^p_k)| over the grid x, and that max."""
    basis = np.stack([x ** p for p in powers], 1)
    lw = np.full(x.shape, 1.0 / x.size)
    for _ in range(iters):
        s = w * np.sqrt(lw)
        c, *_ = np.linalg.lstsq(basis * s[:, None], g * s, rcond=None)
        e = np.abs((basis @ c - g) * w)
        lw = lw * e + 1e-300
        lw /= lw.sum()
    return c, float(e.max())


def c_literal(v: float) -> str:
    mant, exp = float(np.float32(v)).hex().split("p")
    return f"{mant.rstrip('0').rstrip('.')}p{exp}f"


def fits() -> dict[str, tuple[np.ndarray, float]]:
    erf, erfc = np.vectorize(math.erf), np.vectorize(math.erfc)
    out = {}
    r = np.linspace(-0.35, 0.35, 40000)  # |r| <= ln2/2 after reduction; even count avoids r = 0
    out["expm1: expm1(r) = r + r^2 P(r), relative"] = lawson(
        r, (np.expm1(r) - r) / r ** 2, np.abs(r ** 2 / np.expm1(r)), range(5))
    f = np.linspace(math.sqrt(0.5) - 1 - 1e-3, math.sqrt(2) - 1 + 1e-3, 60000)
    f = f[f != 0]
    out["log: log1p(f) = f - f^2/2 + f^3 P(f), relative"] = lawson(
        f, (np.log1p(f) - f + f * f / 2) / f ** 3, np.abs(f ** 3 / np.log1p(f)), range(8))
    x = np.linspace(1e-4, 0.625, 40000)
    out["tanh: x + x^3 P(x^2) on [0, 0.625], relative"] = lawson(
        x * x, (np.tanh(x) - x) / x ** 3, x ** 3 / np.tanh(x), range(5))
    x = np.linspace(1e-4, 1.0, 40000)
    c0 = 2 / math.sqrt(math.pi)  # kept exact (as a float pair) in the C code
    out["erf: x (2/sqrt(pi) + x^2 P(x^2)) on [0, 1], relative"] = lawson(
        x * x, erf(x) / x - c0, x / erf(x), range(1, 7))
    x = np.linspace(1.0, 4.0, 40000)
    out["erf: 1 - e^(-x^2) R(x - 2.5) on [1, 4], absolute"] = lawson(
        x - 2.5, erfc(x) * np.exp(x * x), np.exp(-x * x), range(9))
    return out


def main() -> None:
    for name, (c, err) in fits().items():
        print(f"{name}: max error {err / U:.4f} * 2^-24")
        print("   ", ", ".join(c_literal(v) for v in c))


if __name__ == "__main__":
    main()
