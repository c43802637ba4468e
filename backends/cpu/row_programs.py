"""The CPU pipeline's ``RowPrograms`` pass: runs of row-wise instructions (softmax, layer norm) the C
backend emits as one loop over rows (``row_program.py``).

The analysis is ``hlo/passes/row_programs.py`` (shared with the CUDA backend); here are the CPU's limits:
any row length up to ``MAX_K`` floats, the rows a group keeps (on the stack of the thread running a
block of rows) within ``MAX_KEPT_BYTES``, arrays of any rank (rows are the leading dims), at least
``MIN_ROWS`` rows (a single row is better split by columns, as the generic loops do).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.passes import row_programs as shared

MAX_K = 1 << 16
MAX_KEPT_BYTES = 128 * 1024
MIN_ROWS = 2
LIMITS = shared.RowLimits(min_cols=1, max_cols=MAX_K, max_kept_bytes=MAX_KEPT_BYTES, max_rank=8, min_rows=MIN_ROWS)


@dataclass(frozen=True)
class RowPrograms(shared.RowPrograms):
    """Annotates the row programs of every scheduled computation (``row_program=``), the CPU's limits."""

    limits: shared.RowLimits = LIMITS
