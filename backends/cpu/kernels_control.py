"""Top-level kernels for control flow: while, conditional and call.

Each runs other computations through their C functions (see codegen). A while
loop keeps its state in the while's own result buffers and one more buffer per
element: the body reads the state from one and writes the next state into the
other, so it never reads what it is writing, and the two pointers swap after
each iteration (nothing is copied per iteration; once after the loop when the
state ended in the second buffer). The elements buffer assignment lets the body
update in place (``loop_state_aliases``: passed through, or a dynamic-update-slice
after which nothing reads the old value) are the body's parameter and result
buffer at once, and are neither allocated again nor copied.
"""

from __future__ import annotations

from backends.cpu.computation import Buf, ComputationEmitter, Value, leaves, top_level
from backends.cpu.dialect import C
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


def _copy_value(em: ComputationEmitter, dst: Value, src: Value) -> None:
    for d, s in zip(leaves(dst), leaves(src)):
        em.emit_copy(d, s)


@top_level(Opcode.CALL)
def _call(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    em.emit_call(inst.attr("to_apply").name, [em.value(o) for o in inst.operands], target)


@top_level(Opcode.WHILE)
def _while(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    _copy_value(em, target, em.value(inst.operands[0]))
    pred = em.alloc(Shape.array("pred", ()), f"{inst.name}#pred")
    body = inst.attr("body").name
    aliased = em.gen.loop_aliases(body)
    if aliased:  # a flat tuple: those elements are the body's parameter and result at once
        fresh: Value = tuple(t if k in aliased else em.alloc_value(s, f"{inst.name}#next#{k}")
                             for k, (t, s) in enumerate(zip(target, inst.shape.elements)))
    else:
        fresh = em.alloc_value(inst.shape, f"{inst.name}#next")
    # The other elements ping-pong: the body reads the state from one buffer and writes the next into the
    # other, and the two pointers swap after each iteration (no copy per iteration); after the loop, the
    # state is copied into the while's result when it ended in the second buffer.
    pairs = [(t, f) for t, f in zip(leaves(target), leaves(fresh)) if t.ptr != f.ptr and t.shape.num_elements]
    names = [(em.names.fresh("cur"), em.names.fresh("nxt")) for _ in pairs]
    with em.buf.block(""):
        for (t, f), (cur, nxt) in zip(pairs, names):
            em.buf.line(f"void* {cur} = (void*)({t.ptr});")
            em.buf.line(f"void* {nxt} = (void*)({f.ptr});")
        rename = {t.ptr: Buf(cur, t.shape) for (t, _), (cur, _) in zip(pairs, names)}
        rename.update({f.ptr: Buf(nxt, f.shape) for (_, f), (_, nxt) in zip(pairs, names)})
        state = [rename.get(b.ptr, b) for b in leaves(target)]
        results = [rename.get(b.ptr, b) for b in leaves(fresh)]
        with em.buf.block("for (;;)"):
            em.emit_call(inst.attr("condition").name, [tuple(state)], pred)
            em.buf.line(f"if (!{pred.ptr}[0]) break;")
            em.emit_call(body, [tuple(state)], tuple(results))
            for cur, nxt in names:
                em.buf.line(f"{{ void* const swap_ = {cur}; {cur} = {nxt}; {nxt} = swap_; }}")
        for (t, _), (cur, _) in zip(pairs, names):
            with em.buf.block(f"if ({cur} != (void*)({t.ptr}))"):
                em.emit_copy(t, Buf(cur, t.shape))


@top_level(Opcode.CONDITIONAL)
def _conditional(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    selector = em.value(inst.operands[0])
    assert isinstance(selector, Buf)
    key = C.load(selector.shape.dtype, f"{selector.ptr}[0]")
    if "branch_computations" in inst.attrs:
        branches = [r.name for r in inst.attr("branch_computations")]
    else:
        branches = [inst.attr("true_computation").name, inst.attr("false_computation").name]
    index = em.names.fresh("branch")
    if selector.shape.dtype.is_pred:
        em.buf.line(f"const int64_t {index} = ({key}) ? 0 : 1;")
    else:  # out-of-range indices run the last branch, as XLA does
        n = len(branches)
        em.buf.line(f"const int64_t {index} = ((int64_t)({key}) < 0 || (int64_t)({key}) >= {n}) ? {n - 1} "
                    f": (int64_t)({key});")
    with em.buf.block(f"switch ({index})"):
        for k, name in enumerate(branches):
            em.buf.line(f"case {k}:")
            with em.buf.indent():
                em.emit_call(name, [em.value(inst.operands[k + 1])], target)
                em.buf.line("break;")
