"""Imports every top-level kernel module so that each registers its opcodes."""

from backends.cpu import elemental_data, elemental_math, elemental_window  # noqa: F401  (elemental rules)
from backends.cpu import kernels_control, kernels_scatter, kernels_sort  # noqa: F401
