"""Top-level kernels running dot, convolution and output fusions through oneDNN.

* ``dot`` -> oneDNN matmul ``[batch..., M, K] x [batch..., K, N]``: batch dims stay separate,
  free and contracting dims are merged where they are adjacent in memory, and transposed operands
  or results are described by strides (no copies). Constant weights are reordered once at init
  into the layout oneDNN picks.
* ``convolution`` -> the oneDNN convolution of its form (``dnnl_conv.py``: forward, or the
  backward_data/backward_weights primitive of a gradient) over any ``dim_labels`` (described by
  strides), 1-3 spatial dims, strides, (asymmetric) padding, dilation, feature and batch groups;
  weights always go into oneDNN's preferred layout (once at init when constant, per call otherwise).
* ``fusion kind=kOutput`` with one dot/convolution: the part of the epilogue its ``post_ops=``
  annotation names (the ``DnnlEpilogues`` pass, ``dnnl_epilogues.py``) becomes post-ops; the rest, if any, runs in an elemental loop reading the library result,
  in place in the result buffer when the rest is elementwise (``tail_in_place``: relu, relu6, clip
  keep NaN this way), else from scratch. When the clamps could be post-ops, a second, fast primitive
  with them is built too, and each call runs it when ``dnnl_guard``'s check proves no NaN can arise.

Whatever cannot be described (other element types, a convolution ``dnnl_conv`` gives no form or plan,
zero-size dims, oneDNN absent or disabled with ``CodegenOptions.dnnl=False``) is declined
(``return False``) and emitted by the elemental rules as before.
"""

from __future__ import annotations

import math

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.cpu import dnnl, dnnl_conv, dnnl_guard
from backends.cpu.computation import Buf, ComputationEmitter, Value, buf_reader, top_level
from backends.cpu.parallel import emit_nest, parallel_loops
from backends.cpu.dialect import C
from backends.cpu.dnnl import Binary, ConvWindow, DnnlPrimitive, Eltwise, Tensor
from backends.cpu.dnnl_conv import strides_of
from backends.cpu.dnnl_epilogue import EpilogueMatch
from hlo.annotations import POST_OPS, PostOpChain
from hlo.attributes import FusionKind
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape

# (lhs/rhs type, result type) pairs oneDNN computes with f32 accumulation, as the evaluator does.
_TYPES = {(P.F32, P.F32), (P.BF16, P.BF16), (P.BF16, P.F32), (P.F16, P.F16), (P.F16, P.F32)}


def _view(sizes, strides, groups, dim_map=None, order=None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Logical dims and strides of a buffer whose logical dim k covers buffer dims ``groups[k]`` (merged
    in order; None when they are not contiguous). ``dim_map`` maps group entries to buffer dims (None:
    broadcast). A dim of size 1 keeps its buffer stride; an empty or broadcast one gets the stride it would
    have in a dense layout whose dims nest as ``order`` (logical dims from innermost; default row-major),
    so oneDNN recognises the layout (nhwc, ab, ...) it is."""
    dims: list[int] = []
    out: list[int | None] = []
    for group in groups:
        mapped = [d if dim_map is None else dim_map[d] for d in group]
        if not mapped or any(m is None for m in mapped):
            if any(m is not None and sizes[m] != 1 for m in mapped):
                return None  # partly broadcast
            dims.append(1)
            out.append(None)
            continue
        members = [m for m in mapped if sizes[m] != 1] or mapped[-1:]
        for a, b in zip(members, members[1:]):
            if strides[a] != strides[b] * sizes[b]:
                return None
        dims.append(math.prod(sizes[m] for m in members))
        out.append(strides[members[-1]])
    inner = 1
    for k in (order if order is not None else range(len(out) - 1, -1, -1)):
        if out[k] is None:
            out[k] = inner
        inner = max(inner, out[k] * dims[k])
    return tuple(dims), tuple(out)  # type: ignore[arg-type]


def _tensor(buf: Buf, groups, const: str | None = None, dim_map=None, order=None) -> Tensor | None:
    view = _view(buf.shape.dims, strides_of(buf.shape), groups, dim_map, order)
    return None if view is None else Tensor(view[0], view[1], buf.shape.dtype, buf.ptr, const)


def memory_order(t: Tensor) -> list[int]:
    """The logical dims of ``t`` from innermost to outermost in memory."""
    return sorted(range(len(t.dims)), key=lambda k: (t.strides[k], -k))


class _Plan:
    """src/weights/dst views of one dot or convolution, and the dst dims groups side inputs map onto; for
    a convolution its window, kind (``dnnl_conv``) and the weight dims to flip into scratch first."""

    def __init__(self, src: Tensor, wei: Tensor, dst: Tensor, groups, channel: int, conv=None,
                 prop: str = "forward", flip: tuple[int, ...] = ()):
        self.src, self.wei, self.dst, self.groups, self.channel, self.conv = src, wei, dst, groups, channel, conv
        self.prop, self.flip = prop, flip


def _plan_dot(inst: HloInstruction, lhs, rhs, out: Buf) -> _Plan | None:
    lb, lc = list(inst.attr("lhs_batch_dims", ())), list(inst.attr("lhs_contracting_dims", ()))
    rb, rc = list(inst.attr("rhs_batch_dims", ())), list(inst.attr("rhs_contracting_dims", ()))
    lfree = [d for d in range(lhs[0].shape.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs[0].shape.rank) if d not in rb and d not in rc]
    nb, nl = len(lb), len(lfree)
    groups = [(d,) for d in range(nb)] + [tuple(range(nb, nb + nl)), tuple(range(nb + nl, out.shape.rank))]
    src = _tensor(lhs[0], [(d,) for d in lb] + [tuple(lfree), tuple(lc)], lhs[1])
    wei = _tensor(rhs[0], [(d,) for d in rb] + [tuple(rc), tuple(rfree)], rhs[1])
    dst = _tensor(out, groups)
    if src is None or wei is None or dst is None:
        return None
    return _Plan(src, wei, dst, groups, len(groups) - 1)


def _plan_conv(inst: HloInstruction, lhs, rhs, out: Buf) -> _Plan | None:
    """The convolution's oneDNN primitive, of the form ``dnnl_conv`` recognises (forward or a gradient)."""
    (lbuf, lconst), (rbuf, rconst) = lhs, rhs
    conv = dnnl_conv.plan(inst, dnnl_conv.Operand(lbuf.shape, lbuf.ptr, lconst),
                          dnnl_conv.Operand(rbuf.shape, rbuf.ptr, rconst), dnnl_conv.Operand(out.shape, out.ptr))
    if conv is None:
        return None
    dl = inst.attr("dim_labels")
    groups = [(dl.output_batch,), (dl.output_feature,)] + [(d,) for d in dl.output_spatial]
    return _Plan(conv.src, conv.wei, conv.dst, groups, 1, conv.window, conv.prop, conv.flip)


def _flip_weights(em: ComputationEmitter, plan: _Plan, rhs: Buf, prelude: IndentedBuffer) -> None:
    """Make ``plan.wei`` read a copy of ``rhs`` flipped along ``plan.flip`` (scratch; written by ``prelude``,
    one ``memcpy`` per run of the dims inside the innermost flipped one: per tap for HWIO filters)."""
    if not plan.flip:
        return
    ptr, ctype = em.names.fresh("b"), C.storage(rhs.shape.dtype)
    em.pointer(ptr, ctype, em.alloc_bytes(rhs.shape.byte_size, f"{ptr}#flip"))
    dims, st = rhs.shape.dims, strides_of(rhs.shape)
    inner = min(st[d] for d in plan.flip)  # elements per contiguous run (the dims minor to every flipped dim)
    outer = [d for d in range(len(dims)) if st[d] >= inner and dims[d] > 1]
    idx = {d: em.names.fresh("i") for d in outer}
    with prelude.block(""):
        for d in outer:
            prelude.line(f"for (int64_t {idx[d]} = 0; {idx[d]} < {dims[d]}; ++{idx[d]})")
        at = " + ".join(f"{idx[d]} * {st[d]}" for d in outer) or "0"
        flipped = " + ".join(f"({dims[d] - 1} - {idx[d]}) * {st[d]}" if d in plan.flip else f"{idx[d]} * {st[d]}"
                             for d in outer) or "0"
        prelude.line(f"  memcpy({ptr} + ({flipped}), {rhs.ptr} + ({at}), {inner} * sizeof({ctype}));")
    plan.wei = Tensor(plan.wei.dims, plan.wei.strides, plan.wei.dtype, ptr)


_PLANS = {Opcode.DOT: _plan_dot, Opcode.CONVOLUTION: _plan_conv}


def _install(em: ComputationEmitter, hero: HloInstruction, operand_shapes) -> dnnl.DnnlInstall | None:
    """The oneDNN install to use for ``hero``, or None when it must take the elemental path."""
    if not getattr(em.gen.options, "dnnl", True):
        return None
    a, b = operand_shapes
    out = hero.shape
    if not isinstance(out, Shape) or a.dtype != b.dtype or (a.dtype, out.dtype) not in _TYPES:
        return None
    if 0 in out.dims or 0 in a.dims or 0 in b.dims or out.rank > 12:
        return None
    install = dnnl.installation()
    return install if install is not None and dnnl.supports(install, a.dtype) else None


def _outer_operand(em: ComputationEmitter, name: str) -> tuple[Buf, str | None] | None:
    """The buffer of instruction ``name`` of the current computation, and its C array if a constant."""
    value = em.value(name)
    if not isinstance(value, Buf):
        return None
    inst = em.comp[name]
    return value, em.gen.constant_ref(inst) if inst.opcode is Opcode.CONSTANT else None


def _fused_operand(em: ComputationEmitter, fusion: HloInstruction, comp: HloComputation, name: str,
                   prelude: IndentedBuffer | None = None):
    """The buffer (and C array, for a constant) of ``name``, a parameter or constant of the fused
    computation; with ``prelude``, also a small value computed from them (``computed_side``), which the
    code added to ``prelude`` computes into scratch."""
    inst = comp[name]
    if inst.opcode is Opcode.PARAMETER:
        return _outer_operand(em, fusion.operands[inst.parameter_number])
    if inst.opcode is Opcode.CONSTANT:
        return em.gen.constant_value(inst), em.gen.constant_ref(inst)
    if prelude is not None:
        buf = _computed_side(em, fusion, comp, name, prelude)
        return None if buf is None else (buf, None)
    return None


def _computed_side(em: ComputationEmitter, fusion: HloInstruction, comp: HloComputation, name: str,
                   prelude: IndentedBuffer) -> Buf | None:
    """A scratch buffer holding the value of ``name`` (an epilogue's per-channel scale or shift), and the
    loop computing it from the fusion's operands in ``prelude``; None if it cannot be emitted."""
    shape = comp[name].shape
    buf = Buf(em.names.fresh("b"), Shape.array(shape.dtype, shape.dims))
    code = _store_loop(em, comp, [em.reader(o) for o in fusion.operands], name, buf, parallel=False)
    if code is None:
        return None
    ctype = C.storage(shape.dtype)
    region = em.alloc_bytes(max(shape.byte_size, 1), f"{fusion.name}#{name}")
    em.pointer(buf.ptr, ctype, region)
    prelude.splice(code)
    return buf


@top_level(Opcode.DOT, Opcode.CONVOLUTION)
def _library_op(em: ComputationEmitter, inst: HloInstruction, target: Value):
    operands = [_outer_operand(em, o) for o in inst.operands]
    install = _install(em, inst, [em.comp[o].shape for o in inst.operands])
    if install is None or None in operands or not isinstance(target, Buf):
        return False
    plan = _PLANS[inst.opcode](inst, operands[0], operands[1], target)
    if plan is None:
        return False
    _flip_weights(em, plan, operands[1][0], em.buf)
    DnnlPrimitive(f"%{inst.name}", plan.src, plan.wei, plan.dst, conv=plan.conv, prop=plan.prop).emit(em, install)
    return None


@top_level(Opcode.FUSION)
def _output_fusion(em: ComputationEmitter, inst: HloInstruction, target: Value):
    if inst.attr("kind") is not FusionKind.OUTPUT or not isinstance(target, Buf):
        return False
    comp = em.gen.module.computation(inst.attr("calls").name)
    heroes = [i for i in comp.instructions if i.opcode in _PLANS]
    if len(heroes) != 1 or not isinstance(comp.root.shape, Shape):
        return False
    hero = heroes[0]
    operands = [_fused_operand(em, inst, comp, o) for o in hero.operands]
    install = _install(em, hero, [comp[o].shape for o in hero.operands])
    if install is None or None in operands:
        return False
    chain: PostOpChain | None = inst.attr(POST_OPS)  # the DnnlEpilogues pass's decision (none: the hero alone)
    match = EpilogueMatch(chain.cut, chain.ops) if chain is not None else EpilogueMatch(hero.name, ())
    full = match.cut == comp.root_name
    in_place = full or tail_in_place(comp, match.cut, target.shape)
    dst_buf = target if in_place else Buf(em.names.fresh("b"), Shape.array(hero.shape.dtype, hero.shape.dims))
    aliases: dict = {}
    built = _primitive(em, inst, comp, hero, operands, match, dst_buf)
    if built is None:
        return False
    if in_place:
        _route_alias(em, inst, built[1], target, aliases)
    tail = None
    if not full:
        if not in_place:  # (declared first: the epilogue loop's shard declares it too)
            ctype = C.storage(dst_buf.shape.dtype)
            region = em.alloc_bytes(dst_buf.shape.byte_size, f"{inst.name}#dnnl")
            em.pointer(dst_buf.ptr, ctype, region)
        tail = _epilogue_loop(em, inst, comp, match.cut, dst_buf, target)
        if tail is None:
            return False
    bounds = em.__dict__.setdefault("_dnnl_bounds", {})  # instruction -> C variable: max |its result|
    src_param = comp[hero.operands[0]]
    src_bound = bounds.get(inst.operands[src_param.parameter_number]) if src_param.opcode is Opcode.PARAMETER \
        else None
    fast = None if full or chain is None or chain.fast is None else \
        _fast_primitive(em, inst, comp, hero, operands, EpilogueMatch(comp.root_name, chain.fast), target, aliases,
                        src_bound is not None)
    if fast is None:
        _emit(em, install, built, tail)
        return None
    em.buf.splice(fast[0])
    ok, bounds[inst.name] = dnnl_guard.emit_check(em, fast[1], src_bound)
    with em.buf.block(f"if (!{ok})"):  # NaN possible: the NaN-keeping primitive and loop
        _emit(em, install, built, tail)
    with em.buf.block("else"):
        _emit(em, install, (IndentedBuffer(), fast[1]), None)
    return None


def _emit(em: ComputationEmitter, install, built: tuple[IndentedBuffer, DnnlPrimitive], tail) -> None:
    em.buf.splice(built[0])
    built[1].emit(em, install)
    if tail is not None:
        em.buf.splice(tail)


def _primitive(em: ComputationEmitter, inst: HloInstruction, comp: HloComputation, hero: HloInstruction, operands,
               match: EpilogueMatch, dst_buf: Buf) -> tuple[IndentedBuffer, DnnlPrimitive] | None:
    """The primitive computing ``match.cut`` into ``dst_buf`` and the prelude computing its small side
    operands (run before it), or None when oneDNN cannot describe it."""
    plan = _PLANS[hero.opcode](hero, operands[0], operands[1], dst_buf)
    if plan is None:
        return None
    prelude = IndentedBuffer()  # computes the epilogue's small side operands, before the primitive runs
    post_ops = _post_ops(em, inst, comp, plan, match.ops, prelude)
    if post_ops is None or len(post_ops) > dnnl.MAX_POST_OPS or (post_ops and plan.prop != "forward"):
        return None
    _flip_weights(em, plan, operands[1][0], prelude)
    bias = None
    if post_ops and _is_bias(post_ops[0], plan):
        bias = post_ops.pop(0).src1
        bias = Tensor((bias.dims[plan.channel],), (1,), bias.dtype, bias.ptr) if plan.conv else bias
    prim = DnnlPrimitive(f"%{inst.name}", plan.src, plan.wei, plan.dst, bias, post_ops, plan.conv, prop=plan.prop)
    return prelude, prim


def _route_alias(em: ComputationEmitter, inst: HloInstruction, prim: DnnlPrimitive, target: Buf,
                 aliases: dict) -> None:
    """Buffer assignment may give a result written in place the buffer of a dying residual operand: such a
    primitive writes through scratch when they alias (one region shared by the primitives of a fusion)."""
    if any(isinstance(op, Binary) and op.src1.dims == prim.dst.dims for op in prim.post_ops):
        if "alias" not in aliases:
            size = target.shape.byte_size
            aliases["alias"] = (em.alloc_bytes(size, f"{inst.name}#alias"), size)
        prim.alias_scratch = aliases["alias"]


def _fast_primitive(em: ComputationEmitter, inst: HloInstruction, comp: HloComputation, hero: HloInstruction,
                    operands, fast: EpilogueMatch, target: Buf, aliases: dict,
                    src_bounded: bool) -> tuple[IndentedBuffer, DnnlPrimitive] | None:
    """The whole fusion as one primitive with NaN-masking post-ops (the annotation's ``fast`` chain), when
    ``dnnl_guard`` can prove it exact per call."""
    built = _primitive(em, inst, comp, hero, operands, fast, target)
    if built is None or not dnnl_guard.applies(built[1], src_bounded):
        return None
    _route_alias(em, inst, built[1], target, aliases)
    return built


def tail_in_place(comp: HloComputation, cut: str, out: Shape) -> bool:
    """Whether the library op may write ``cut`` into the fusion's result buffer (of shape ``out``) and the
    epilogue loop finish it there: every instruction after the cut is elementwise over the result's
    dims (each element of the cut is read only at the index written), and nothing else the loop reads
    is as large as the result (the result may be given the buffer of a dying residual operand; the
    post-ops' operands are guarded at run time, ``DnnlPrimitive.alias_scratch``)."""
    cut_inst, users = comp[cut], comp.users()
    if not isinstance(out, Shape) or cut_inst.shape.dtype != out.dtype or cut_inst.shape.dims != out.dims:
        return False
    after, work = set(), list(users.get(cut, []))
    while work:
        name = work.pop()
        if name not in after:
            after.add(name)
            work.extend(users.get(name, []))
    for name in after:
        inst = comp[name]
        if not (inst.opcode.is_elementwise and isinstance(inst.shape, Shape) and inst.shape.dims == out.dims):
            return False
    side, work = set(), [o for name in after for o in comp[name].operands if o not in after and o != cut]
    while work:
        name = work.pop()
        if name not in side:
            side.add(name)
            work.extend(comp[name].operands)
    return all(comp[name].opcode is not Opcode.PARAMETER or comp[name].shape.num_elements < out.num_elements
               for name in side)


def _post_ops(em, fusion, comp, plan: _Plan, ops, prelude: IndentedBuffer) -> list | None:
    out: list = []
    for op in ops:
        if not op.is_binary:
            out.append(Eltwise(op.alg, op.alpha, op.beta))
            continue
        operand = _fused_operand(em, fusion, comp, op.operand, prelude)
        if operand is None or operand[0].shape.dtype not in dnnl.DNNL_TYPES:
            return None
        t = _tensor(operand[0], plan.groups, dim_map=op.dims, order=memory_order(plan.dst))
        if t is None:
            return None
        out.append(Binary(op.alg, t))
    return out


def _is_bias(op, plan: _Plan) -> bool:
    """A first ``add`` of a vector along the output channel (N for matmul, C for convolution)."""
    if not isinstance(op, Binary) or op.alg != "add" or op.src1.dtype not in (P.F32, P.BF16):
        return False
    t = op.src1
    return all(d == 1 for k, d in enumerate(t.dims) if k != plan.channel) and t.strides[plan.channel] == 1


def _epilogue_loop(em: ComputationEmitter, inst: HloInstruction, comp: HloComputation, cut: str, cut_buf: Buf,
                   target: Buf) -> IndentedBuffer | None:
    """The elemental loop computing the fusion's root from ``cut`` (in ``cut_buf``), or None if unsupported."""
    return _store_loop(em, comp, [em.reader(o) for o in inst.operands], comp.root_name, target,
                       parallel=target.shape.num_elements >= em.gen.options.parallel_threshold,
                       external={cut: buf_reader(cut_buf)})


def _store_loop(em: ComputationEmitter, comp: HloComputation, readers, name: str, target: Buf, *, parallel: bool,
                external=None) -> IndentedBuffer | None:
    """A loop nest storing the value of ``name`` (an instruction of ``comp``, whose parameters ``readers``
    read) at every index of ``target``, split over threads if ``parallel``; None if unsupported."""
    buf = IndentedBuffer()
    mark, shards = em.names.counter, em.outliner.mark()
    emitter = ElementalEmitter(C, em.gen.module, comp, readers, buf, em.names, em.gen.constant_ref, external=external)
    dims = target.shape.dims
    idx = tuple(em.names.fresh("i") for _ in dims)
    first, count = parallel_loops(dims) if parallel else (0, 0)
    try:
        with buf.block(""):
            with buf.capture() as body:
                value = emitter.emit(name, idx)
                buf.line(f"{target.ptr}[{linear_index(target.shape, idx)}] = {C.store(target.shape.dtype, value)};")
            emit_nest(buf, em.outliner, list(zip(idx, dims)), first + count if count else 0, body, emitter.declared,
                      mark + len(dims))
    except CodegenUnsupported:
        em.names.counter = mark
        em.outliner.rollback(shards)
        return None
    return buf
