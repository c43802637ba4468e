"""The tiled transpose kernel: 32x32 tiles through shared memory, both global accesses coalesced.

Taken for a transpose (alone, or the root of a fusion whose other
instructions feed it) whose permutation, after dropping size-1 dims and
merging dims that stay adjacent, swaps the last two of ``[B, X, Y]``
(``{1,0}`` or ``{0,2,1}``): a 32x8 block reads a tile along ``Y`` (the input's
contiguous dim), computing each element with the elemental rules, and
writes it along ``X`` (the output's contiguous dim); the tile row is padded
to 33 to avoid shared-memory bank conflicts. Small or degenerate
transposes go to the elemental loop.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.cuda import dialect as D
from backends.cuda.kernels import KernelBuilder, ceil_div, delinearize, prod, strategy
from hlo.opcodes import Opcode

TILE = 32
MIN_ELEMENTS = 1024


def _row_major(shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


def collapse(perm: tuple[int, ...], dims: tuple[int, ...]) -> tuple[list[list[int]], tuple[int, ...]]:
    """Input dims grouped into runs that stay adjacent in the output (size-1 dims dropped), in input
    order, and the permutation of those groups (output group g reads input group perm[g])."""
    kept = [d for d in perm if dims[d] != 1]
    runs: list[list[int]] = []
    for d in kept:
        if runs and runs[-1][-1] + 1 == d or (runs and _only_unit_between(runs[-1][-1], d, dims)):
            runs[-1].append(d)
        else:
            runs.append([d])
    order = sorted(range(len(runs)), key=lambda g: runs[g][0])
    groups = [runs[g] for g in order]
    return groups, tuple(order.index(g) for g in range(len(runs)))


def _only_unit_between(a: int, b: int, dims) -> bool:
    return b > a and all(dims[d] == 1 for d in range(a + 1, b))


@strategy("transpose-tiled")
def transpose_kernel(kb: KernelBuilder):
    root = kb.root
    if root.opcode is not Opcode.TRANSPOSE or len(kb.outs) != 1:
        return None
    src = kb.shape_of(root.operands[0])
    out = kb.outs[0]
    if not (_row_major(src) and _row_major(out.shape)) or out.shape.num_elements < MIN_ELEMENTS:
        return None
    groups, gperm = collapse(tuple(root.attr("dimensions")), src.dims)
    if gperm == (1, 0):
        batch_dims, xg, yg = [], groups[0], groups[1]
    elif gperm == (0, 2, 1):
        batch_dims, xg, yg = groups[0], groups[1], groups[2]
    else:
        return None
    nb = prod(src.dims[d] for d in batch_dims)
    nx, ny = prod(src.dims[d] for d in xg), prod(src.dims[d] for d in yg)
    if nb > 65535 or ceil_div(nx, TILE) > 65535:
        return None
    body = IndentedBuffer()
    em = kb.emitter(body)
    t = D.compute(out.shape.dtype)
    body.line(f"__shared__ {t} tile[{TILE}][{TILE + 1}];")
    body.line("const int64_t bt = blockIdx.z;")
    body.line(f"const int64_t x0 = (int64_t)blockIdx.y * {TILE}, y0 = (int64_t)blockIdx.x * {TILE};")
    with body.block(f"for (int j = threadIdx.y; j < {TILE}; j += 8)"):
        body.line("const int64_t x = x0 + j, y = y0 + threadIdx.x;")
        with body.block(f"if (x < {nx} && y < {ny})"):
            em.push()
            idx = ["0"] * src.rank
            for group, coord in ((batch_dims, "bt"), (xg, "x"), (yg, "y")):
                for d, e in zip(group, delinearize(coord, [src.dims[d] for d in group])):
                    idx[d] = e
            body.line(f"tile[j][threadIdx.x] = {em.emit(root.operands[0], tuple(idx))};")
            em.pop()
    body.line("__syncthreads();")
    with body.block(f"for (int j = threadIdx.y; j < {TILE}; j += 8)"):
        body.line("const int64_t y = y0 + j, x = x0 + threadIdx.x;")
        with body.block(f"if (x < {nx} && y < {ny})"):
            body.line(f"{kb.pointer(out, write=True)}[(bt * {ny} + y) * {nx} + x] = "
                      f"{D.store(out.shape.dtype, 'tile[threadIdx.x][j]')};")
    note = f"tiled transpose [{nb}, {nx}, {ny}] -> [{nb}, {ny}, {nx}] through {TILE}x{TILE + 1} shared tiles"
    return kb.finish(body, (ceil_div(ny, TILE), ceil_div(nx, TILE), nb), (TILE, 8), note)
