"""TF's run-time check of gather indices: the meaning of ``index_check=`` on a gather.

XLA's gather clamps every start index into its operand. TF's GatherV2 and GatherNd kernels instead
fail with InvalidArgumentError at the first index outside the operand (row-major order of the
indices). The TF lowering marks its gathers (``hlo.IndexCheck``), and the evaluator and every backend
then check before the gather reads anything, with TF's messages:

* ``tf_gather`` (GatherV2: one scalar index per position, ``index_vector_dim`` = the indices' rank, one
  ``start_index_map`` dim of size n): nothing is checked when the result is empty; otherwise every
  index must be in [0, n), else ``indices[1,0] = 5 is not in [0, 3)`` followed, as in TF's graph
  errors, by ``\n\t [[{{node NAME}}]]``. An empty operand dim (n = 0) admits no index.
* ``tf_gather_nd`` (GatherNd: the index vector is the indices' last dim, its q components map to
  ``start_index_map``): nothing is checked without index rows; an empty operand fails with
  ``Requested more than 0 entries, but params is empty.  Params shape: [0,4]``; otherwise every row
  must lie inside the operand, else ``indices[1] = [3, 0] does not index into param shape [3,4],
  node name: NAME`` (NAME: the TF node of the instruction's metadata, else the instruction's name).

Positions are TF's ``SliceDebugString``: empty for rank 0, ``[i]`` for rank 1, ``[i,j,...]`` above.
One compare per index component, never per output element.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hlo.attributes import IndexCheck


def structure_problem(kind: IndexCheck, indices_rank: int, index_vector_dim: int,
                      start_index_map: Sequence[int]) -> str | None:
    """Why a gather of this structure cannot carry ``kind``, or None (the verifier's check)."""
    if kind is IndexCheck.TF_GATHER:
        if index_vector_dim != indices_rank or len(start_index_map) != 1:
            return (f"index_check={kind.value} needs scalar indices (index_vector_dim = {indices_rank}, the "
                    f"indices' rank) and one start_index_map dim, got index_vector_dim={index_vector_dim}, "
                    f"start_index_map={list(start_index_map)}")
    elif indices_rank < 1 or index_vector_dim != indices_rank - 1:
        return (f"index_check={kind.value} needs the index vector in the indices' last dim "
                f"({indices_rank - 1}), got index_vector_dim={index_vector_dim}")
    return None


def position_text(dims: Sequence[int], flat: int) -> str:
    """TF's ``SliceDebugString``: the multi-index of row-major position ``flat`` in ``dims``."""
    if not dims:
        return ""
    parts = []
    for n in reversed(dims):
        parts.append(flat % n if n else 0)
        flat //= max(n, 1)
    return "[" + ",".join(str(p) for p in reversed(parts)) + "]"


def dims_text(dims: Sequence[int]) -> str:
    """TF's ``TensorShape::DebugString``: ``[3,4]``."""
    return "[" + ",".join(str(n) for n in dims) + "]"


def range_message(position: str, value: int, limit: int, node: str) -> str:
    return f"indices{position} = {value} is not in [0, {limit})\n\t [[{{{{node {node}}}}}]]"


def empty_params_message(operand_dims: Sequence[int]) -> str:
    return f"Requested more than 0 entries, but params is empty.  Params shape: {dims_text(operand_dims)}"


def nd_message(position: str, vector: Sequence[int], operand_dims: Sequence[int], node: str) -> str:
    return (f"indices{position} = [{', '.join(str(v) for v in vector)}] does not index into param shape "
            f"{dims_text(operand_dims)}, node name: {node}")


def violation(kind: IndexCheck, operand_dims: Sequence[int], indices: np.ndarray, start_index_map: Sequence[int],
              result_elements: int, node: str) -> str | None:
    """TF's message for the first index of ``indices`` that fails ``kind``, or None when all pass."""
    indices = np.asarray(indices).astype(np.int64)
    if kind is IndexCheck.TF_GATHER:
        if result_elements == 0:
            return None
        limit = operand_dims[start_index_map[0]]
        bad = np.flatnonzero((indices < 0) | (indices >= limit))
        if not bad.size:
            return None
        return range_message(position_text(indices.shape, int(bad[0])), int(indices.reshape(-1)[bad[0]]), limit,
                             node)
    rows_dims = indices.shape[:-1]
    rows = indices.reshape(int(np.prod(rows_dims, dtype=np.int64)), indices.shape[-1])
    if not rows.shape[0]:
        return None
    if 0 in operand_dims:
        return empty_params_message(operand_dims)
    limits = np.array([operand_dims[d] for d in start_index_map], np.int64)
    bad = np.flatnonzero(np.any((rows < 0) | (rows >= limits), axis=-1))
    if not bad.size:
        return None
    return nd_message(position_text(rows_dims, int(bad[0])), [int(v) for v in rows[bad[0]]], operand_dims, node)


def node_name(inst) -> str:
    """The TF node an instruction came from (its metadata's op_name), else the instruction's name."""
    metadata = inst.attr("metadata", None)
    name = metadata.op_name if metadata is not None else None
    return name or inst.name
