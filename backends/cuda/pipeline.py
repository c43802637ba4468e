"""The CUDA backend's HLO pipeline (what the API runs before ``backends.cuda.generate``).

``hlo/passes/standard.py``'s passes, then the CUDA backend's own, which
annotate the kernels it emits (``hlo/annotations.py``): ``RowPrograms``
(runs of row-wise fusions, such as softmax's four and layer norm's three,
emitted as one kernel with a block per row).
"""

from __future__ import annotations

from hlo.passes import HloPass
from hlo.passes.standard import BackendPipeline, OptimizeOptions


def backend_passes() -> list[HloPass]:
    from backends.cuda.row_programs import RowPrograms

    return [RowPrograms()]


PIPELINE = BackendPipeline("cuda", backend_passes)
passes, optimize, optimize_with_passes, prepare = PIPELINE.entry_points()
cuda_passes = passes

__all__ = ["OptimizeOptions", "PIPELINE", "backend_passes", "cuda_passes", "optimize", "optimize_with_passes",
           "passes", "prepare"]
