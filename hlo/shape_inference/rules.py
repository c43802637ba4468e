"""Imports every shape-rule module so that each registers its rules."""

from hlo.shape_inference import (  # noqa: F401
    control, data_movement, elementwise, fft, indexing, linalg, reductions,
)
