"""Golden tests: the generated CUDA of representative kernels, pinned as text.

``tests/test_cuda_golden/<name>.cu`` holds one kernel (its comment lines and body) of a module
in ``tests.gpu.cases.MODULES`` after our HLO pipeline: an elementwise loop fusion (float4),
a row reduction (warp per row), a column reduction, a tiled transpose of a fused exponential,
a tiled dot, an f16 dot on the tensor cores, and a depthwise convolution with a bias + relu6
epilogue. A change to the generator that changes them
must update the files (``TFXLA_UPDATE_GOLDEN=1``) and be read by a person; the files were checked by hand when written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import backends.cuda as cuda
from backends.cuda.pipeline import optimize
import hlo
from tests.gpu.cases import MODULES

GOLDEN = Path(__file__).parent / "test_cuda_golden"

CASES = {  # golden file -> (module, kernel)
    "loop_gelu": ("gelu", "k0_fusion_0"),
    "row_reduce_exp_sum": ("reductions", "k0_fusion_0"),
    "column_reduce": ("reductions", "k2_fusion_2"),
    "transpose_exp": ("transposes", "k1_fusion_0"),
    "dot": ("dots", "k0_d1"),
    "dot_wmma": ("dots", "k1_d2"),
    "depthwise": ("depthwise", "k0_fusion_0"),
}


def kernel_text(source: str, kernel: str) -> str:
    """The comment lines and definition of ``kernel`` in a generated source."""
    lines = source.splitlines()
    start = next(k for k, line in enumerate(lines) if f" {kernel}(" in line and line.startswith('extern "C"'))
    while start > 0 and lines[start - 1].startswith("/*"):
        start -= 1
    end = next(k for k in range(start, len(lines)) if lines[k] == "}")
    return "\n".join(lines[start:end + 1]) + "\n"


@pytest.mark.parametrize("golden", sorted(CASES))
def test_generated_kernel_matches_golden(golden: str) -> None:
    module_name, kernel = CASES[golden]
    source = cuda.emit_source(optimize(hlo.parse_module(MODULES[module_name])))
    text = kernel_text(source, kernel)
    path = GOLDEN / f"{golden}.cu"
    if os.environ.get("TFXLA_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{golden}: generated kernel differs from {path}"
