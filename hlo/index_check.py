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

Scatters (ScatterNd: ``tf_scatter_nd``; TensorScatterUpdate/Add/Sub/Min/Max: ``tf_tensor_scatter``)
replace XLA's skip of an out-of-bounds update window. First TF's checks of the shapes alone, which
fail whatever the indices hold (``scatter_shape_problem``): index rows or updates for an empty
output (``Indices and updates specified for empty output shape``; for ScatterNd with index rows and
updates but an empty shape ``Indices and updates specified for empty output.  indices shape:
[1,1]``), a rank-0 output, an index depth outside TF's supported 1..7 (``Only indices.shape[-1]
values between 1 and 5 are currently supported.  Requested rank: 0``, sic). Then, unless the output
is empty, every index row must lie inside the output, else ``indices[1] = [5] does not index into
shape [4]``: the LAST bad row in row-major order (TF's CPU functor applies the good rows and keeps
the location of the last bad one), nothing written. Scatter messages end in ``\n\t [[{{node
NAME}}]]`` as TF's graph errors do. A scatter whose rows all pass writes every update window whole
(the verifier demands TF's layout, ``scatter_structure_problem``), so it then agrees with XLA's.

Positions are TF's ``SliceDebugString``: empty for rank 0, ``[i]`` for rank 1, ``[i,j,...]`` above.
One compare per index component, never per output element.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from hlo.attributes import IndexCheck


def structure_problem(kind: IndexCheck, indices_rank: int, index_vector_dim: int,
                      start_index_map: Sequence[int]) -> str | None:
    """Why a gather of this structure cannot carry ``kind``, or None (the verifier's check)."""
    if kind.is_scatter:
        return f"index_check={kind.value} is a scatter's check, not a gather's"
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


def graph_suffix(node: str) -> str:
    """What TF's graph executor appends to a kernel's error."""
    return f"\n\t [[{{{{node {node}}}}}]]"


def range_message(position: str, value: int, limit: int, node: str) -> str:
    return f"indices{position} = {value} is not in [0, {limit}){graph_suffix(node)}"


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


# --- scatters ---------------------------------------------------------------------------------

# TF's scatter functors exist for index depths 1..7; the message says 5 (TF 2.21).
MAX_SCATTER_DEPTH = 7


def scatter_structure_problem(kind: IndexCheck, operand_dims: Sequence[int], indices_dims: Sequence[int],
                              updates_dims: Sequence[int], attrs) -> str | None:
    """Why a scatter of this structure cannot carry ``kind``, or None (the verifier's check). ``attrs``
    reads the scatter's attributes (``attrs(name, default)``). The layout is TF's: index rows in the
    indices' last dim, their q components scatter into operand dims 0..q-1 (inserted), and each update
    window is the whole of the remaining operand dims."""
    if not kind.is_scatter:
        return f"index_check={kind.value} is a gather's check, not a scatter's"
    rank = len(indices_dims)
    if rank < 1 or attrs("index_vector_dim", rank) != rank - 1:
        return (f"index_check={kind.value} needs the index rows in the indices' last dim ({rank - 1}), got "
                f"index_vector_dim={attrs('index_vector_dim', rank)}")
    q = indices_dims[-1]
    lead = tuple(range(q))
    if (tuple(attrs("scatter_dims_to_operand_dims", ())) != lead or tuple(attrs("inserted_window_dims", ())) != lead
            or attrs("input_batching_dims", ())):
        return (f"index_check={kind.value} needs scatter_dims_to_operand_dims = inserted_window_dims = "
                f"{{{','.join(map(str, lead))}}} and no batching dims")
    windows = tuple(range(rank - 1, len(updates_dims)))
    if (tuple(attrs("update_window_dims", ())) != windows
            or tuple(updates_dims[rank - 1:]) != tuple(operand_dims[q:])):
        return (f"index_check={kind.value} needs update windows spanning operand dims {q}.. whole "
                f"(update_window_dims={{{','.join(map(str, windows))}}} of sizes {list(operand_dims[q:])})")
    return None


def scatter_shape_problem(kind: IndexCheck, operand_dims: Sequence[int], indices_dims: Sequence[int],
                          updates_elements: int, node: str) -> str | None:
    """TF's message for a scatter that fails on its shapes alone (whatever the indices), or None."""
    rows_or_updates = math.prod(indices_dims) or updates_elements
    outputs = math.prod(operand_dims)
    room = len(operand_dims) if kind is IndexCheck.TF_SCATTER_ND else outputs
    message = None
    if rows_or_updates and not (math.prod(indices_dims) and updates_elements and room):
        message = "Indices and updates specified for empty output shape"
    elif not operand_dims:
        message = "Output must be at least 1-D, got shape: []"
    elif rows_or_updates and not outputs:
        message = f"Indices and updates specified for empty output.  indices shape: {dims_text(indices_dims)}"
    elif outputs and not 1 <= indices_dims[-1] <= MAX_SCATTER_DEPTH:
        message = (f"Only indices.shape[-1] values between 1 and 5 are currently supported.  Requested rank: "
                   f"{indices_dims[-1]}")
    return None if message is None else message + graph_suffix(node)


def scatter_row_message(position: str, vector: Sequence[int], operand_dims: Sequence[int], node: str) -> str:
    return (f"indices{position} = [{', '.join(str(v) for v in vector)}] does not index into shape "
            f"{dims_text(operand_dims)}{graph_suffix(node)}")


def scatter_violation(kind: IndexCheck, operand_dims: Sequence[int], indices: np.ndarray, updates_elements: int,
                      node: str) -> str | None:
    """TF's message for a scatter that ``kind`` refuses (its shapes, else its last bad index row), or None."""
    indices = np.asarray(indices).astype(np.int64)
    problem = scatter_shape_problem(kind, operand_dims, indices.shape, updates_elements, node)
    if problem or not math.prod(operand_dims):
        return problem
    rows_dims, q = indices.shape[:-1], indices.shape[-1]
    rows = indices.reshape(math.prod(rows_dims), q)
    limits = np.array(operand_dims[:q], np.int64)
    bad = np.flatnonzero(np.any((rows < 0) | (rows >= limits), axis=-1))
    if not bad.size:
        return None
    return scatter_row_message(position_text(rows_dims, int(bad[-1])), [int(v) for v in rows[bad[-1]]],
                               operand_dims, node)
