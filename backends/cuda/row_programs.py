"""The CUDA pipeline's ``RowPrograms`` pass: runs of consecutive row-wise instructions the CUDA backend
emits as one kernel with a block per row (softmax, layer norm and other normalizations).

The analysis is ``hlo/passes/row_programs.py`` (shared with the CPU backend); here are CUDA's limits:
a row of ``MIN_K`` to ``MAX_K`` floats, the rows a group keeps within ``MAX_SHARED_BYTES`` of shared
memory, ``[R, K]`` arrays only (``backends/cuda/kernel_rows.py`` indexes ``(row, k)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.passes import row_programs as shared
from hlo.passes.row_programs import epilogue_reduce  # noqa: F401  (kernel_reduce.py reads it from here)

MAX_SHARED_BYTES = 40 * 1024
MIN_K, MAX_K = 256, 16384
LIMITS = shared.RowLimits(min_cols=MIN_K, max_cols=MAX_K, max_kept_bytes=MAX_SHARED_BYTES, max_rank=2)


@dataclass(frozen=True)
class RowPrograms(shared.RowPrograms):
    """Annotates the row programs of every scheduled computation (``row_program=``), CUDA's limits."""

    limits: shared.RowLimits = LIMITS
