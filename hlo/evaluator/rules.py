"""Imports every evaluator rule module so that each registers its rules."""

from hlo.evaluator import (  # noqa: F401
    control, conversions, elementwise, fft, indexing, linalg, reductions, sorting, structural,
)
