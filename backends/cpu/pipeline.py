"""The CPU backend's HLO pipeline (what ``backends.cpu.compile`` runs before codegen).

``hlo/passes/standard.py``'s passes, then the CPU's own, which annotate the
kernels the C code generator emits (``hlo/annotations.py``):
``RowPrograms`` (runs of row-wise fusions, softmax's four and others, as one
loop over rows), ``ColumnReductions`` (reduces of the leading dims streamed with interchanged
loops) and ``DnnlEpilogues`` (the part of an output fusion's epilogue oneDNN
computes as post-ops). (Buffer assignment runs in the code generator, which
owns the schedule.)
"""

from __future__ import annotations

from hlo.passes import HloPass
from hlo.passes.standard import BackendPipeline, OptimizeOptions


def backend_passes() -> list[HloPass]:
    from backends.cpu.column_reductions import ColumnReductions
    from backends.cpu.dnnl_epilogues import DnnlEpilogues
    from backends.cpu.row_programs import RowPrograms

    return [RowPrograms(), ColumnReductions(), DnnlEpilogues()]


PIPELINE = BackendPipeline("cpu", backend_passes)
passes, optimize, optimize_with_passes, prepare = PIPELINE.entry_points()
cpu_passes = passes

__all__ = ["OptimizeOptions", "PIPELINE", "backend_passes", "cpu_passes", "optimize", "optimize_with_passes",
           "passes", "prepare"]
