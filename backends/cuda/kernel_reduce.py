"""Reduction kernels: row, column and split (full) reductions, each one pass over memory.

A reduce (alone, or in a fusion whose other instructions feed it or form an
elementwise epilogue of its result, such as the rsqrt of a variance)
over a row-major input whose reduced dims are contiguous is viewed as
``[A, K, B]`` (kept outer dims, reduced dims, kept inner dims); reduced
elements are computed on the fly by the elemental rules, so the fused
producers never reach memory. The reducer computation is inlined; partial
results are combined with it too (XLA's assumption: the init value is the
reducer's identity and the reducer is associative).

* row (``B == 1``, enough rows): a warp per row (block 32x8) when ``K`` is
  small, else a block of 256/512 threads per row; lanes stride over the row,
  then warp shuffles (``tfxla_shfl_down``) and, across warps, shared memory.
* split (``B == 1``, few long rows, e.g. a full reduction to a scalar): a
  grid of ``G`` blocks per row; each block reduces a grid-strided share, writes
  its partial to a ``__device__`` array, and the last block to finish (an
  atomic ticket after ``__threadfence``) combines the partials and writes the
  result, resetting its ticket for the next launch: still one kernel and one
  pass over the input. Partials and tickets are per-kernel globals, so one
  executable must not run concurrently on two streams.
* column (``B > 1``): block 32x8, the 32 lanes of a warp on 32 consecutive
  kept columns (coalesced), the 8 warps on interleaved reduced rows, combined
  through a padded shared tile. With few column tiles and a long reduced dim,
  the reduced dim is split over ``grid.y`` slices whose partial columns the
  last block of each tile combines (as the split reduction does).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.codegen.buffer import IndentedBuffer
from backends.cuda import dialect as D
from backends.cuda.kernels import KernelBuilder, ceil_div, delinearize, prod, strategy
from backends.cuda.row_programs import epilogue_reduce
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape


def _row_major(shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


@dataclass(frozen=True)
class ReduceView:
    a: int
    k: int
    b: int
    src: Shape
    lo: int
    hi: int
    n: int  # number of reduced operands (variadic reduce)
    reduce: HloInstruction  # the reduce; the kernel's root is it, or an elementwise epilogue of it

    def index(self, a: str, k: str, b: str) -> tuple[str, ...]:
        dims = self.src.dims
        return delinearize(a, dims[:self.lo]) + delinearize(k, dims[self.lo:self.hi]) + delinearize(b, dims[self.hi:])


def _epilogue_reduce(kb: KernelBuilder) -> HloInstruction | None:
    """The one single-output reduce of a fusion whose root is an elementwise function of it (every
    instruction between them elementwise with the reduce's dims), so the epilogue runs per result."""
    if kb.fused is None or not isinstance(kb.root.shape, Shape):
        return None
    return epilogue_reduce(kb.fused)


def reduce_view(kb: KernelBuilder) -> ReduceView | None:
    root = kb.root
    if root.opcode is not Opcode.REDUCE:
        root = _epilogue_reduce(kb)
        if root is None:
            return None
    n = len(root.operands) // 2
    src = kb.shape_of(root.operands[0])
    dims = sorted(root.attr("dimensions"))
    if not isinstance(src, Shape) or not dims or not _row_major(src) or dims != list(range(dims[0], dims[-1] + 1)):
        return None
    if len(kb.outs) != n or not all(_row_major(o.shape) for o in kb.outs) or \
            (root is not kb.root and kb.outs[0].shape.dims != root.shape.dims):
        return None
    lo, hi = dims[0], dims[-1] + 1
    view = ReduceView(prod(src.dims[:lo]), prod(src.dims[lo:hi]), prod(src.dims[hi:]), src, lo, hi, n, root)
    return view if view.k > 0 else None


class Reducer:
    """Accumulators of one thread and the inlined reducer that combines values into them."""

    def __init__(self, kb: KernelBuilder, em, body, reduce: HloInstruction):
        self.kb, self.em, self.body = kb, em, body
        root = reduce
        self.root = root
        shapes = root.shape.elements if isinstance(root.shape, TupleShape) else (root.shape,)
        self.types = [D.compute(s.dtype) for s in shapes]
        self.inits = [em.emit(root.operands[len(self.types) + j], ()) for j in range(len(self.types))]
        self.accs = [kb.names.fresh("acc") for _ in self.types]
        for t, a, i in zip(self.types, self.accs, self.inits):
            body.line(f"{t} {a} = {i};")

    def combine(self, others) -> None:
        new = self.em.call_scalar(self.root.attr("to_apply").name, list(self.accs) + list(others))
        new = new if isinstance(new, tuple) else (new,)
        for a, v in zip(self.accs, new):
            self.body.line(f"{a} = {v};")

    def accumulate(self, idx) -> None:
        """Combine the reduced operands' elements at source index ``idx`` (in a scope of their own)."""
        self.em.push()
        self.combine([self.em.emit(self.root.operands[j], idx) for j in range(len(self.types))])
        self.em.pop()

    def warp_reduce(self) -> None:
        with self.body.block("for (int off = 16; off > 0; off /= 2)"):
            self.em.push()
            others = []
            for t, a in zip(self.types, self.accs):
                o = self.kb.names.fresh("o")
                self.body.line(f"const {t} {o} = tfxla_shfl_down({a}, off);")
                others.append(o)
            self.combine(others)
            self.em.pop()

    def reset(self) -> None:
        for a, i in zip(self.accs, self.inits):
            self.body.line(f"{a} = {i};")

    def block_reduce(self, lane: str, threads: int, shared: list[str]) -> None:
        """Reduce over ``threads`` (a multiple of 32) lanes; the result lands in lane 0's accumulators."""
        self.warp_reduce()
        if threads <= 32:
            return
        warps = threads // 32
        body = self.body
        body.line("__syncthreads();")
        with body.block(f"if ({lane} % 32 == 0)"):
            for s, a in zip(shared, self.accs):
                body.line(f"{s}[{lane} / 32] = {a};")
        body.line("__syncthreads();")
        with body.block(f"if ({lane} < 32)"):
            for s, a, i in zip(shared, self.accs, self.inits):
                body.line(f"{a} = {lane} < {warps} ? {s}[{lane}] : {i};")
            self.warp_reduce()

    def store(self, out_index: str) -> None:
        """Write the result at linear ``out_index`` (through the epilogue when the root is not the reduce)."""
        kb = self.kb
        if kb.root is not self.root:
            out = kb.outs[0]
            acc = self.accs[0]
            self.em.external[self.root.name] = lambda _idx: acc
            self.em.push()
            value = self.em.emit(kb.root.name, delinearize(out_index, out.shape.dims))
            self.em.pop()
            self.body.line(f"{kb.pointer(out, write=True)}[{out_index}] = {D.store(out.shape.dtype, value)};")
            return
        for o, a in zip(kb.outs, self.accs):
            self.body.line(f"{kb.pointer(o, write=True)}[{out_index}] = {D.store(o.shape.dtype, a)};")


def _declare_shared(kb: KernelBuilder, body, types, size: str) -> list[str]:
    names = []
    for t in types:
        s = kb.names.fresh("smem")
        body.line(f"__shared__ {t} {s}{size};")
        names.append(s)
    return names


SPLIT_MIN_K = 1 << 16  # rows at least this long, and too few to fill the GPU, are split over blocks
FEW_ROWS = 264  # about two blocks per SM on an H100/H200 (132 SMs)


@strategy("reduce-row")
def row_reduce(kb: KernelBuilder):
    view = reduce_view(kb)
    if view is None or view.b != 1 or (view.k >= SPLIT_MIN_K and view.a < FEW_ROWS):
        return None
    rows, k = view.a, view.k
    threads = 32 if k <= 1024 else (256 if k <= 16384 else 512)
    per_block = max(1, 256 // threads)
    body = IndentedBuffer()
    em = kb.emitter(body)
    red = Reducer(kb, em, body, view.reduce)
    shared = _declare_shared(kb, body, red.types, f"[{threads // 32}]") if threads > 32 else []
    body.line(f"const int64_t row = (int64_t)blockIdx.x * {per_block} + threadIdx.y;")
    with body.block(f"if (row < {rows})"):
        with body.block(f"for (int64_t k = threadIdx.x; k < {k}; k += {threads})"):
            red.accumulate(view.index("row", "k", "0"))
    red.block_reduce("threadIdx.x", threads, shared)
    with body.block(f"if (threadIdx.x == 0 && row < {rows})"):
        red.store("row")
    note = (f"row reduction of {rows} rows x {k}: {'a warp' if threads == 32 else f'{threads} threads'} per row, "
            f"{per_block} rows per block, warp shuffles" + (" + shared memory" if threads > 32 else ""))
    return kb.finish(body, (ceil_div(rows, per_block),), (threads, per_block), note)


@strategy("reduce-split")
def split_reduce(kb: KernelBuilder):
    view = reduce_view(kb)
    if view is None or view.b != 1 or not (view.k >= SPLIT_MIN_K and view.a < FEW_ROWS):
        return None
    rows, k = view.a, view.k
    threads = 256
    blocks = max(1, min(ceil_div(k, threads * 16), 1024 // max(1, rows) if rows < 4 else 256))
    body = IndentedBuffer()
    em = kb.emitter(body)
    red = Reducer(kb, em, body, view.reduce)
    shared = _declare_shared(kb, body, red.types, f"[{threads // 32}]")
    partials = []
    for t in red.types:
        name = f"{kb.name}_partial{len(partials)}"
        kb.gen.device_globals.line(f"__device__ {t} {name}[{rows * blocks}];")
        partials.append(name)
    ticket = f"{kb.name}_ticket"
    kb.gen.device_globals.line(f"__device__ unsigned int {ticket}[{rows}];  /* zero at load, reset by the last block */")
    body.line("__shared__ bool last;")
    body.line("const int64_t row = blockIdx.y;")
    stride = threads * blocks
    with body.block(f"for (int64_t k = (int64_t)blockIdx.x * {threads} + threadIdx.x; k < {k}; k += {stride})"):
        red.accumulate(view.index("row", "k", "0"))
    red.block_reduce("threadIdx.x", threads, shared)
    with body.block("if (threadIdx.x == 0)"):
        for p, a in zip(partials, red.accs):
            body.line(f"{p}[row * {blocks} + blockIdx.x] = {a};")
        body.line("__threadfence();")
        body.line(f"last = atomicAdd(&{ticket}[row], 1u) == {blocks - 1}u;")
    body.line("__syncthreads();")
    with body.block("if (last)"):
        body.line("__threadfence();")
        red.reset()
        with body.block(f"for (int i = threadIdx.x; i < {blocks}; i += {threads})"):
            em.push()
            others = []
            for t, p in zip(red.types, partials):
                o = kb.names.fresh("o")
                body.line(f"const {t} {o} = ((volatile {t}*){p})[row * {blocks} + i];")
                others.append(o)
            red.combine(others)
            em.pop()
        red.block_reduce("threadIdx.x", threads, shared)
        with body.block("if (threadIdx.x == 0)"):
            red.store("row")
            body.line(f"{ticket}[row] = 0u;")
    note = (f"split reduction of {rows} row(s) x {k}: {blocks} blocks per row write partials, the last block "
            f"(atomic ticket) combines them")
    return kb.finish(body, (blocks, rows), (threads,), note)


COLUMN_SPLIT_MIN_K = 8192  # reduced dims at least this long are split over blocks when there are few tiles
FEW_TILES = 132


@strategy("reduce-column")
def column_reduce(kb: KernelBuilder):
    view = reduce_view(kb)
    if view is None or view.b == 1:
        return None
    a, k, b = view.a, view.k, view.b
    col_blocks = ceil_div(b, 32)
    tiles = a * col_blocks
    slices = 1
    if tiles < FEW_TILES and k >= COLUMN_SPLIT_MIN_K:
        slices = max(1, min(ceil_div(k, 1024), (4 * FEW_TILES) // tiles))
    chunk = ceil_div(k, slices)
    body = IndentedBuffer()
    em = kb.emitter(body)
    red = Reducer(kb, em, body, view.reduce)
    shared = _declare_shared(kb, body, red.types, "[8][33]")
    body.line(f"const int64_t a = blockIdx.x / {col_blocks};")
    body.line(f"const int64_t col = (int64_t)(blockIdx.x % {col_blocks}) * 32 + threadIdx.x;")
    k_lo, k_hi = ("0", str(k)) if slices == 1 else ("k_lo", "k_hi")
    if slices > 1:
        body.line(f"const int64_t k_lo = (int64_t)blockIdx.y * {chunk};")
        body.line(f"const int64_t k_hi = k_lo + {chunk} < {k} ? k_lo + {chunk} : {k};")
    with body.block(f"if (col < {b})"):
        with body.block(f"for (int64_t k = {k_lo} + threadIdx.y; k < {k_hi}; k += 8)"):
            red.accumulate(view.index("a", "k", "col"))
    for s_, acc in zip(shared, red.accs):
        body.line(f"{s_}[threadIdx.y][threadIdx.x] = {acc};")
    body.line("__syncthreads();")

    def combine_from(read) -> None:
        em.push()
        others = []
        for t, src in zip(red.types, read):
            o = kb.names.fresh("o")
            body.line(f"const {t} {o} = {src};")
            others.append(o)
        red.combine(others)
        em.pop()

    with body.block(f"if (threadIdx.y == 0 && col < {b})"):
        with body.block("for (int t = 1; t < 8; ++t)"):
            combine_from([f"{s_}[t][threadIdx.x]" for s_ in shared])
        if slices == 1:
            red.store(f"a * {b} + col")
    if slices == 1:
        note = (f"column reduction [{a}, {k}, {b}] -> [{a}, {b}]: 32 columns x 8 interleaved rows per block, "
                f"combined in shared memory")
        return kb.finish(body, (tiles,), (32, 8), note)
    # Split: every slice writes its partial column; the last block of a tile (atomic ticket) combines them.
    partials = []
    for t in red.types:
        name = f"{kb.name}_partial{len(partials)}"
        kb.gen.device_globals.line(f"__device__ {t} {name}[{slices * a * b}];")
        partials.append(name)
    ticket = f"{kb.name}_ticket"
    kb.gen.device_globals.line(f"__device__ unsigned int {ticket}[{tiles}];  /* zero at load, reset by the last block */")
    body.line("__shared__ bool last;")
    with body.block(f"if (threadIdx.y == 0 && col < {b})"):
        for p, acc in zip(partials, red.accs):
            body.line(f"{p}[blockIdx.y * {a * b} + a * {b} + col] = {acc};")
        body.line("__threadfence();")
    body.line("__syncthreads();")
    with body.block("if (threadIdx.x == 0 && threadIdx.y == 0)"):
        body.line(f"last = atomicAdd(&{ticket}[blockIdx.x], 1u) == {slices - 1}u;")
    body.line("__syncthreads();")
    with body.block(f"if (last && threadIdx.y == 0 && col < {b})"):
        body.line("__threadfence();")
        red.reset()
        with body.block(f"for (int s = 0; s < {slices}; ++s)"):
            combine_from([f"((volatile {t}*){p})[s * {a * b} + a * {b} + col]" for t, p in zip(red.types, partials)])
        red.store(f"a * {b} + col")
    with body.block("if (last && threadIdx.x == 0 && threadIdx.y == 0)"):
        body.line(f"{ticket}[blockIdx.x] = 0u;")
    note = (f"column reduction [{a}, {k}, {b}] -> [{a}, {b}] split into {slices} slices of {chunk} rows: "
            f"32 columns x 8 rows per block, partial columns combined by the last block of each tile")
    return kb.finish(body, (tiles, slices), (32, 8), note)
