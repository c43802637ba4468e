"""Kernel-shape annotations: typed attributes a backend's own HLO passes attach to instructions.

A grouping a backend needs is decided once, by a pass of that backend's
pipeline, and written into the optimized HLO as one of these values; the
code generator reads it instead of rediscovering the structure while it
emits (the dumps and TensorBoard show the decision for free). Each is
printed and parsed by ``hlo/text/annotation_codecs.py`` and checked by
``hlo/verifier/annotations.py``; the evaluator ignores them (an annotated
instruction means what it meant before).

* ``row_program=`` (CUDA, ``backends/cuda/row_programs.py``) on each member of a run of consecutive
  row-wise instructions the backend emits as one kernel with a block per row;
* ``post_ops=`` (CPU, ``backends/cpu/dnnl_epilogues.py``) on an output fusion: the part of its epilogue
  a library call computes as post-ops (``cut``, the chain) and the NaN-masking full chain, if any;
* ``column_reduce=true`` (CPU, ``backends/cpu/column_reductions.py``) on a reduce of the leading dims
  that is emitted with interchanged loops, streaming its input once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

ROW_PROGRAM = "row_program"
POST_OPS = "post_ops"
COLUMN_REDUCE = "column_reduce"


class RowRole(enum.Enum):
    """What a member of a row program computes per row of ``[rows, cols]``."""

    REDUCE = "reduce"  # a reduction over the last dim: [rows, cols] -> [rows] (possibly with an epilogue)
    FULL = "full"  # elementwise, producing [rows, cols]
    ROW = "row"  # elementwise, producing [rows]


@dataclass(frozen=True)
class RowProgram:
    """``row_program={group=0,role=reduce,rows=128,cols=1024,reduce=%reduce.3}``: the instruction is a
    member of row program ``group`` (numbered per computation; its members are consecutive in the
    schedule, parameters and constants aside). ``reduce`` names the reduce a ``reduce`` member computes:
    the instruction itself, or the reduce inside its fused computation. A member of rank above 2 (the CPU
    backend's) is ``[..., cols]`` or ``[...]`` with ``rows`` elements in the leading dims."""

    group: int
    role: RowRole
    rows: int
    cols: int
    reduce: str | None = None


@dataclass(frozen=True)
class PostOp:
    """One post-op of a library call: an elementwise function ``alg(x; alpha, beta)``, or, when ``operand``
    is set, a binary op with that instruction of the fused computation (a parameter, a constant, or a
    small value computed from them) where ``dims[d]`` is the operand dim read at output dim ``d`` (None:
    broadcast)."""

    alg: str
    alpha: float = 0.0
    beta: float = 0.0
    operand: str | None = None
    dims: tuple[int | None, ...] = ()

    @property
    def is_binary(self) -> bool:
        return self.operand is not None


@dataclass(frozen=True)
class PostOpChain:
    """``post_ops={cut=%add.1,ops={add(%p.2,dims={_,1}),relu},fast={...}}`` on an output fusion: the
    library computes instruction ``cut`` of the fused computation (its dot or convolution followed by
    ``ops``), the elemental code the rest. ``fast``, when present, is a chain for the whole fusion that
    is exact only while no NaN arises (the backend guards it at run time)."""

    cut: str
    ops: tuple[PostOp, ...] = ()
    fast: tuple[PostOp, ...] | None = None

    @property
    def operands(self) -> tuple[str, ...]:
        return tuple(op.operand for op in self.ops + (self.fast or ()) if op.operand is not None)
