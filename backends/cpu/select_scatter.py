"""Select-and-scatter (TF's MaxPoolGrad) on the caller's threads, vectorized over the channels.

The shared serial kernel (``backends/codegen/serial/scatter.py``) fills the whole result with the init
value and then walks every source element on one thread. Where the window's leading dims are trivial
(size 1, stride 1, no padding or dilation: the batch of an NHWC pooling) the windows of one leading
index read and write only that index's slab of the result, so the slabs run as tasks
(``backends/cpu/parallel.py``): each fills its own slab (cache-hot) and runs the serial algorithm on it.
Where the last dim is trivial too (the channels), one source row is done a channel vector at a time: the
window loops outside, the channel loop innermost over per-channel picks (``best_i``/``best_v``), then
the scatter of that row. Both keep the serial kernel's results bit for bit: the pick per window is the
same (``select`` applied in the same window order, the first valid position starting it), and the
scatter into each result element combines its source values in the same (row-major) order.
Anything else runs the serial kernel.
"""

from __future__ import annotations

import math

from backends.codegen.buffer import IndentedBuffer, close_loops, open_loops
from backends.codegen.layout import linear_index
from backends.codegen.serial import SERIAL
from backends.codegen.serial.scatter import _scalar_call, emit_select_and_scatter_windows
from backends.codegen.values import Buf, leaves
from backends.cpu.computation import top_level
from backends.cpu.parallel import emit_nest
from hlo.attributes import WindowDim
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Layout, Shape

MAX_CHANNELS = 4096  # the per-channel picks live on the shard's stack


def _row_major(shape: Shape) -> bool:
    return shape.layout is None or shape.layout == Layout.default(shape.rank)


def _trivial(d: WindowDim) -> bool:
    return (d.size, d.stride, d.pad_low, d.pad_high, d.lhs_dilate, d.rhs_dilate) == (1, 1, 0, 0, 1, 1)


@top_level(Opcode.SELECT_AND_SCATTER)
def _select_and_scatter(em, inst: HloInstruction, target) -> None:
    if not _parallel(em, inst, target):
        SERIAL[Opcode.SELECT_AND_SCATTER](em, inst, target)


def _parallel(em, inst: HloInstruction, target) -> bool:
    """Emit ``inst`` split over its leading trivial window dims; False, having written nothing, when it
    has none (or too little work, or a form this kernel leaves to the serial one)."""
    C = em.gen.dialect
    operand, source, init = [em.value(o) for o in inst.operands]
    outs = leaves(target)
    window = inst.attr("window").dims
    if len(outs) != 1 or not all(isinstance(v, Buf) for v in (operand, source, init, outs[0])):
        return False
    (out,) = outs
    shape, src_shape = operand.shape, source.shape
    if not all(_row_major(s) for s in (shape, src_shape, out.shape)) or 0 in shape.dims or 0 in src_shape.dims:
        return False
    if any(d.lhs_dilate != 1 or d.rhs_dilate != 1 or d.reversal for d in window):
        return False
    lead = 0
    while lead < len(window) - 1 and _trivial(window[lead]):
        lead += 1
    tasks = math.prod(shape.dims[:lead])
    work = src_shape.num_elements * math.prod(d.size for d in window)
    if tasks < 2 or work < em.gen.options.parallel_threshold:
        return False
    channels = shape.dims[-1] if _trivial(window[-1]) and lead < len(window) - 1 else 1
    if channels > MAX_CHANNELS:
        return False
    b, names = em.buf, em.names
    lvars = [names.fresh("n") for _ in range(lead)]
    slab = math.prod(shape.dims[lead:])
    mark = em.names.counter
    body = IndentedBuffer()
    saved, em.buf = em.buf, body
    try:
        base = linear_index(shape, tuple(lvars) + ("0",) * (shape.rank - lead))
        body.line(f"const {C.storage(shape.dtype)} init_ = {C.store(shape.dtype, C.load(init.shape.dtype, init.at(())))};")
        body.line(f"for (int64_t e_ = 0; e_ < {slab}; ++e_) {out.ptr}[{base} + e_] = init_;")
        if channels > 1:
            _rows_by_channel(em, inst, operand, source, out, lvars, channels)
        else:
            emit_select_and_scatter_windows(em, inst, operand, source, out, lvars)
    finally:
        em.buf = saved
    with b.block(""):
        emit_nest(b, em.outliner, [(v, n) for v, n in zip(lvars, shape.dims)], lead, body, {}, mark)
    return True


def _rows_by_channel(em, inst: HloInstruction, operand: Buf, source: Buf, out: Buf, lvars: list[str],
                     channels: int) -> None:
    """One slab with the channel (last, trivial) dim innermost: per source row, the window loops outside a
    channel loop that updates each channel's pick; whether a window position is inside the operand
    does not depend on the channel, so one flag (``have``) says whether a pick has started."""
    C, b = em.gen.dialect, em.buf
    shape, src_shape = operand.shape, source.shape
    lead = len(lvars)
    window = inst.attr("window").dims[lead:-1]
    ctype = C.compute(shape.dtype)
    svars = [em.names.fresh("s") for _ in window]
    kvars = [em.names.fresh("w") for _ in window]
    c = em.names.fresh("c")
    b.line(f"int64_t best_i[{channels}];")
    b.line(f"{ctype} best_v[{channels}];")
    open_loops(b, list(zip(svars, src_shape.dims[lead:-1])))
    b.line("int have = 0;")
    open_loops(b, [(k, d.size) for k, d in zip(kvars, window)])
    pos = [f"({s} * {d.stride} + {k} - {d.pad_low})" for s, k, d in zip(svars, kvars, window)]
    inside = " && ".join(f"({p} >= 0 && {p} < {n})" for p, n in zip(pos, shape.dims[lead:-1])) or "1"
    with b.block(f"if ({inside})"):
        row = em.gen_tmp("int64_t", linear_index(shape, tuple(lvars) + tuple(pos) + ("0",)))
        with b.block("if (!have)"):
            b.line(f"for (int64_t {c} = 0; {c} < {channels}; ++{c}) "
                   f"{{ best_i[{c}] = {row} + {c}; best_v[{c}] = {C.load(shape.dtype, f'{operand.ptr}[{row} + {c}]')}; }}")
            b.line("have = 1;")
        with b.block("else"):
            open_loops(b, [(c, channels)])
            cand = em.gen_tmp(ctype, C.load(shape.dtype, f"{operand.ptr}[{row} + {c}]"))
            keep = _scalar_call(em, inst.attr("select").name, [f"best_v[{c}]", cand])
            b.line(f"if (!({keep})) {{ best_i[{c}] = {row} + {c}; best_v[{c}] = {cand}; }}")
            close_loops(b, 1)
    close_loops(b, len(window))
    with b.block("if (have)"):
        open_loops(b, [(c, channels)])
        _scatter_into(em, inst, source, out, f"best_i[{c}]", tuple(lvars) + tuple(svars) + (c,))
        close_loops(b, 1)
    close_loops(b, len(svars))


def _scatter_into(em, inst: HloInstruction, source: Buf, out: Buf, where: str, src_idx: tuple[str, ...]) -> None:
    """``out[where] = scatter(out[where], source[src_idx])``."""
    C, b = em.gen.dialect, em.buf
    dt, sdt = out.shape.dtype, source.shape.dtype
    cur = em.gen_tmp(C.compute(dt), C.load(dt, f"{out.ptr}[{where}]"))
    src = em.gen_tmp(C.compute(sdt), C.load(sdt, f"{source.ptr}[{linear_index(source.shape, src_idx)}]"))
    res = _scalar_call(em, inst.attr("scatter").name, [cur, src])
    b.line(f"{out.ptr}[{where}] = {C.store(dt, res)};")
