"""Serial kernels that write through computed indices: scatter and select-and-scatter.

scatter copies its operands to the result, then walks the update windows in
row-major order of the scatter indices; a window that would start outside
the operand or run past it is skipped whole (XLA's semantics), and each
element is combined with ``to_apply``. A scatter with ``index_check=`` (TF's
ScatterNd/TensorScatter*) first checks every index row (``em.emit_scatter_check``: the CPU's
returns status 3 with TF's message, backends/cpu/index_check.py) before it writes anything. select-and-scatter fills the result
with the init value, picks one operand element per window with ``select``
(the current pick stays while select(current, candidate) holds), and
combines the source value into it with ``scatter``; ``emit_select_and_scatter_windows`` is that walk,
which the CPU's parallel kernel (backends/cpu/select_scatter.py) runs on one batch slab at a time.
"""

from __future__ import annotations

from backends.codegen.buffer import close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter, constant_param
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.serial import SerialEmitter, serial_kernel
from backends.codegen.values import Buf, leaves
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def _scalar_call(em: SerialEmitter, comp_name: str, args: list[str]):
    sub = ElementalEmitter(em.gen.dialect, em.gen.module, em.gen.module.computation(comp_name),
                           [constant_param(a) for a in args], em.buf, em.names, em.gen.constant_ref)
    return sub.emit(sub.comp.root_name, ())


@serial_kernel(Opcode.SCATTER)
def _scatter(em: SerialEmitter, inst: HloInstruction, target) -> None:
    C = em.gen.dialect
    vals = [em.value(o) for o in inst.operands]
    n = (len(vals) - 1) // 2
    operands, indices, updates = vals[:n], vals[n], vals[n + 1:]
    if not all(isinstance(v, Buf) for v in vals):
        raise CodegenUnsupported(f"%{inst.name}: scatter of tuple operands")
    shape, upd_shape, idx_shape = operands[0].shape, updates[0].shape, indices.shape
    em.emit_scatter_check(inst, shape, idx_shape, upd_shape, lambda idx: C.load(idx_shape.dtype, indices.at(idx)))
    outs = leaves(target)
    for out, op in zip(outs, operands):
        em.emit_copy(out, op)
    uwd = inst.attr("update_window_dims", ())
    inserted = inst.attr("inserted_window_dims", ())
    to_operand = inst.attr("scatter_dims_to_operand_dims", ())
    ivd = inst.attr("index_vector_dim")
    in_batch = inst.attr("input_batching_dims", ())
    idx_batch = inst.attr("scatter_indices_batching_dims", ())
    if upd_shape.num_elements == 0:
        return
    scatter_dims = [d for d in range(upd_shape.rank) if d not in uwd]
    svars = {d: em.names.fresh("u") for d in scatter_dims}
    wvars = {d: em.names.fresh("w") for d in uwd}
    index_dims = [d for d in range(idx_shape.rank) if d != ivd]  # pair with scatter_dims in order
    pos_of_index_dim = dict(zip(index_dims, (svars[d] for d in scatter_dims)))
    window_operand_dims = [d for d in range(shape.rank) if d not in inserted and d not in in_batch]
    b = em.buf
    with b.block(""):
        open_loops(em.buf, [(svars[d], upd_shape.dims[d]) for d in scatter_dims])
        starts = ["0"] * shape.rank
        for k, d in enumerate(to_operand):
            idx = tuple(str(k) if dd == ivd else pos_of_index_dim[dd] for dd in range(idx_shape.rank))
            raw = C.load(idx_shape.dtype, f"{indices.ptr}[{linear_index(idx_shape, idx)}]")
            starts[d] = em.names.fresh("s")
            b.line(f"const int64_t {starts[d]} = (int64_t)({raw});")
        for d, idim in zip(in_batch, idx_batch):
            starts[d] = pos_of_index_dim[idim]
        sizes = [1] * shape.rank
        for d, ud in zip(window_operand_dims, uwd):
            sizes[d] = upd_shape.dims[ud]
        conds = [f"{s} >= 0 && {s} + {z} <= {n_}" for s, z, n_ in zip(starts, sizes, shape.dims) if s != "0"]
        with b.block(f"if ({' && '.join(f'({c})' for c in conds) or '1'})"):
            open_loops(em.buf, [(wvars[d], upd_shape.dims[d]) for d in uwd])
            op_idx = list(starts)
            for d, ud in zip(window_operand_dims, uwd):
                op_idx[d] = f"({starts[d]} + {wvars[ud]})" if starts[d] != "0" else wvars[ud]
            u_idx = tuple(svars[d] if d in svars else wvars[d] for d in range(upd_shape.rank))
            cur = [em.gen_tmp(C.compute(o.shape.dtype), C.load(o.shape.dtype, f"{o.ptr}[{linear_index(o.shape, tuple(op_idx))}]"))
                   for o in outs]
            new = [em.gen_tmp(C.compute(u.shape.dtype), C.load(u.shape.dtype, f"{u.ptr}[{linear_index(u.shape, u_idx)}]"))
                   for u in updates]
            res = _scalar_call(em, inst.attr("to_apply").name, cur + new)
            res = res if isinstance(res, tuple) else (res,)
            for o, r in zip(outs, res):
                b.line(f"{o.ptr}[{linear_index(o.shape, tuple(op_idx))}] = {C.store(o.shape.dtype, r)};")
            close_loops(em.buf, len(uwd))
        close_loops(em.buf, len(scatter_dims))


@serial_kernel(Opcode.SELECT_AND_SCATTER)
def _select_and_scatter(em: SerialEmitter, inst: HloInstruction, target) -> None:
    C = em.gen.dialect
    operand, source, init = [em.value(o) for o in inst.operands]
    (out,) = leaves(target)
    shape, src_shape = operand.shape, source.shape
    b = em.buf
    init_v = C.load(init.shape.dtype, init.at(()))
    with b.block(""):
        if shape.num_elements:
            b.line(f"for (int64_t i = 0; i < {shape.num_elements}; ++i) {out.ptr}[i] = {C.store(shape.dtype, init_v)};")
        if src_shape.num_elements == 0:
            return
        emit_select_and_scatter_windows(em, inst, operand, source, out, [])


def emit_select_and_scatter_windows(em: SerialEmitter, inst: HloInstruction, operand: Buf, source: Buf, out: Buf,
                                    fixed: list[str]) -> None:
    """Pick each source element's window with ``select`` and scatter it into ``out`` (filled with the init
    value already): over every source index whose leading dims are ``fixed`` (index expressions of dims
    whose window is trivial; none for the whole result)."""
    C, b = em.gen.dialect, em.buf
    shape, src_shape = operand.shape, source.shape
    lead = len(fixed)
    window = inst.attr("window").dims[lead:]
    svars = [em.names.fresh("s") for _ in window]
    kvars = [em.names.fresh("w") for _ in window]
    open_loops(em.buf, list(zip(svars, src_shape.dims[lead:])))
    b.line("int64_t best = -1;")
    b.line(f"{C.compute(shape.dtype)} best_v = 0;")
    open_loops(em.buf, [(k, d.size) for k, d in zip(kvars, window)])
    pos = [f"({s} * {d.stride} + {k} - {d.pad_low})" for s, k, d in zip(svars, kvars, window)]
    inside = " && ".join(f"({p} >= 0 && {p} < {n})" for p, n in zip(pos, shape.dims[lead:])) or "1"
    with b.block(f"if ({inside})"):
        lin = em.gen_tmp("int64_t", linear_index(shape, tuple(fixed) + tuple(pos)))
        cand = em.gen_tmp(C.compute(shape.dtype), C.load(shape.dtype, f"{operand.ptr}[{lin}]"))
        with b.block("if (best < 0)"):
            b.line(f"best = {lin}; best_v = {cand};")
        with b.block("else"):
            keep = _scalar_call(em, inst.attr("select").name, ["best_v", cand])
            b.line(f"if (!({keep})) {{ best = {lin}; best_v = {cand}; }}")
    close_loops(em.buf, len(window))
    with b.block("if (best >= 0)"):
        cur = em.gen_tmp(C.compute(shape.dtype), C.load(shape.dtype, f"{out.ptr}[best]"))
        src = em.gen_tmp(C.compute(src_shape.dtype),
                         C.load(src_shape.dtype, f"{source.ptr}[{linear_index(src_shape, tuple(fixed) + tuple(svars))}]"))
        res = _scalar_call(em, inst.attr("scatter").name, [cur, src])
        b.line(f"{out.ptr}[best] = {C.store(shape.dtype, res)};")
    close_loops(em.buf, len(svars))
