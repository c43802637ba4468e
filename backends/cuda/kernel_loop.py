"""The elemental loop kernel: one thread per output element, grid-stride, any fusion of elemental ops.

Every output element is computed by the shared elemental rules (``backends/codegen/elemental*.py``,
in the CUDA ``dialect``) at its multi-index, so this kernel takes every instruction and
loop fusion those rules take: elementwise math, broadcasts, slices, pads,
gathers, reductions and dots that no better strategy took (an inner loop per
element), and direct convolution (each thread walks its window and input
features; grouped convolutions too, groups indexing their own input features;
depthwise ones come here only when ``kernel_depthwise`` declines them).
Multi-output fusions whose outputs share dims write every output from the
same element.

Vectorized loads and stores: when the outputs are f32, row-major and their
count a multiple of 4, each thread handles 4 consecutive elements; an
operand read at exactly those 4 positions (same dims and row-major layout)
is loaded once as a ``float4``, and each output is stored as a ``float4``.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.cuda.kernels import KernelBuilder, ceil_div, delinearize, strategy
from hlo.dtypes import PrimitiveType as P

_LANES = ("x", "y", "z", "w")


def _row_major(shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


@strategy("loop")
def loop_kernel(kb: KernelBuilder):
    outs = kb.outs
    dims = outs[0].shape.dims
    if any(o.shape.dims != dims for o in outs):
        raise CodegenUnsupported(f"%{kb.inst.name}: tuple results of different dims in one loop")
    n = outs[0].shape.num_elements
    vector = 4 if (n % 4 == 0 and n >= 4 and all(o.shape.dtype is P.F32 and _row_major(o.shape) for o in outs)) else 1
    threads = kb.options.block_size
    groups = n // vector
    blocks = max(1, min(ceil_div(groups, threads), kb.options.max_blocks))
    body = IndentedBuffer()
    var = "g" if vector > 1 else "lin"
    with body.block(f"for (int64_t {var} = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; {var} < {groups}; "
                    f"{var} += (int64_t)gridDim.x * blockDim.x)"):
        if vector == 1:
            idx = _index(body, "lin", outs[0].shape, "i")
            em = kb.emitter(body)
            values = _values(kb, em, idx)
            for o, v in zip(outs, values):
                body.line(kb.store(o, idx, v))
        else:
            _vector_body(kb, body, outs, vector)
    note = (f"elemental loop over {n} elements, {vector} per thread"
            + (" (float4 loads/stores)" if vector > 1 else "") + f", grid-stride, at most {kb.options.max_blocks} blocks")
    return kb.finish(body, (blocks,), (threads,), note)


def _index(body, lin: str, shape, base: str) -> tuple[str, ...]:
    """Declare the multi-index of linear position ``lin`` of an output (layout-aware)."""
    from backends.codegen.layout import delinearize as layout_delinearize

    parts = layout_delinearize(lin, shape) if not _row_major(shape) else delinearize(lin, shape.dims)
    idx = []
    for k, p in enumerate(parts):
        if p == "0":
            idx.append("0")
        else:
            name = f"{base}{k}"
            body.line(f"[[maybe_unused]] const int64_t {name} = {p};")
            idx.append(name)
    return tuple(idx)


def _values(kb: KernelBuilder, em, idx) -> list[str]:
    value = em.emit(kb.root.name, idx)
    values = list(value) if isinstance(value, tuple) else [value]
    if len(values) != len(kb.outs) or any(isinstance(v, tuple) for v in values):
        raise CodegenUnsupported(f"%{kb.inst.name}: nested tuple results in one loop")
    return values


def _vector_body(kb: KernelBuilder, body, outs, vector: int) -> None:
    shape = outs[0].shape
    lane_idx = []
    for k in range(vector):
        lin = f"(g * {vector} + {k})" if k else f"(g * {vector})"
        lane_idx.append(_index(body, lin, shape, f"i{k}_"))
    # Operands with the outputs' dims and row-major layout are loaded as float4 (unused loads are removed
    # by the compiler); a read at exactly lane k's index takes component k.
    readers = []
    for value in kb.operands:
        plain = kb.reader(value)
        if not (hasattr(value, "shape") and not value.is_global and value.shape.dims == shape.dims and value.shape.dtype is P.F32
                and _row_major(value.shape)):
            readers.append(plain)
            continue
        vec = kb.names.fresh("vec")
        body.line(f"[[maybe_unused]] const float4 {vec} = reinterpret_cast<const float4*>({kb.pointer(value)})[g];")

        def read(idx, vec=vec, plain=plain):
            for k, li in enumerate(lane_idx):
                if tuple(idx) == li:
                    return f"{vec}.{_LANES[k]}"
            return plain(idx)
        readers.append(read)
    em = kb.emitter(body, readers)
    lanes = [_values(kb, em, lane_idx[k]) for k in range(vector)]  # one C scope: common values are shared
    for j, o in enumerate(outs):
        vals = ", ".join(lanes[k][j] for k in range(vector))
        body.line(f"reinterpret_cast<float4*>({kb.pointer(o, write=True)})[g] = make_float4({vals});")
