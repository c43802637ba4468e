"""Imports every top-level kernel module so that each registers its opcodes: the CPU's own
(``TOP_LEVEL``) and the serial kernels every backend shares (``backends.codegen.serial.SERIAL``)."""

import backends.codegen.serial  # noqa: F401
from backends.cpu import kernels_control, kernels_dnnl, kernels_fft, kernels_misc, select_scatter  # noqa: F401
