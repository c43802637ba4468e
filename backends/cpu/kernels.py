"""Imports every top-level kernel module so that each registers its opcodes."""

from backends.cpu import kernels_control, kernels_dnnl, kernels_misc, kernels_scatter, kernels_sort  # noqa: F401
