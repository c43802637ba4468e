"""Row programs: consecutive row-wise instructions run as one kernel, one block per row (softmax,
layer norm and other normalizations).

The ``RowPrograms`` pass of the CUDA pipeline (``row_programs.py``) decides
the groups and annotates their members ``row_program=``; ``row_groups`` reads
them back. Each group becomes one kernel with a block of 256-1024 threads per
row: a reduction's result is a shared scalar, an ``[R, K]`` value used later
in the group lives in a shared row (the pass keeps them within
``MAX_SHARED_BYTES``), and only values used outside the group are written to
memory. Reads of a group value must stay in the block's row (any column is
fine: the row is complete in shared memory after a barrier); otherwise the
group is emitted instruction by instruction as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.cuda import dialect as D
from backends.cuda.kernel_reduce import Reducer, _declare_shared
from backends.cuda.kernels import KernelBuilder, comment
from backends.cuda.program import Launch
from hlo.annotations import ROW_PROGRAM
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode


@dataclass(frozen=True)
class Member:
    inst: HloInstruction
    kind: str  # a RowRole's value: "reduce" ([R, K] -> [R]), "full" (elementwise -> [R, K]) or "row" (-> [R])
    reduce: HloInstruction | None = None  # for "reduce": the reduce inside (the root, or under an epilogue)


def row_groups(gen, comp: HloComputation) -> list[list[Member]]:
    """The row programs of ``comp`` as the ``RowPrograms`` pass annotated them (``row_program=``), each
    with its members in schedule order."""
    groups: dict[int, list[Member]] = {}
    for inst in comp.instructions:
        rp = inst.attr(ROW_PROGRAM)
        if rp is None:
            continue
        body = gen.module.computation(inst.attr("calls").name) if inst.opcode is Opcode.FUSION else comp
        reduce = body[rp.reduce] if rp.reduce is not None else None
        groups.setdefault(rp.group, []).append(Member(inst, rp.role.value, reduce))
    return list(groups.values())


def _used_later(member: Member, users, names) -> bool:
    return any(u in names for u in users.get(member.inst.name, []))


def emit_row_group(cem, group: list[Member]) -> Launch:
    """One kernel for ``group`` (members in schedule order), reading its outside operands from their
    buffers and writing the values used outside the group (``cem.values`` has their targets)."""
    gen, comp = cem.gen, cem.comp
    names = {m.inst.name for m in group}
    users = comp.users()
    program = group[0].inst.attr(ROW_PROGRAM)
    r, k = program.rows, program.cols
    threads = 1024 if k >= 4096 else (512 if k >= 1024 else 256)
    kb = KernelBuilder(gen, comp, group[-1].inst, [], [])
    body = IndentedBuffer()
    body.line("const int64_t row = blockIdx.x;")
    shared_rows: dict[str, str] = {}  # member -> shared [K] array
    scalars: dict[str, str] = {}  # member -> shared scalar
    for m in group:
        if m.kind == "full" and _used_later(m, users, names):
            shared_rows[m.inst.name] = kb.names.fresh("srow")
            body.line(f"__shared__ float {shared_rows[m.inst.name]}[{k}];")
        elif m.kind != "full":
            scalars[m.inst.name] = kb.names.fresh("sval")
            body.line(f"__shared__ float {scalars[m.inst.name]};")
    red_shared = _declare_shared(kb, body, ["float"], f"[{threads // 32}]")

    def reader(name: str):
        if name in shared_rows:
            def read(idx, arr=shared_rows[name]):
                if len(idx) != 2 or idx[0] != "row":
                    raise CodegenUnsupported(f"row program: %{name} read outside its row")
                return f"{arr}[{idx[1]}]"
            return read
        if name in scalars:
            def read(idx, s=scalars[name]):
                if tuple(idx) != ("row",):
                    raise CodegenUnsupported(f"row program: %{name} read outside its row")
                return s
            return read
        if name in names:
            raise CodegenUnsupported(f"row program: %{name} is needed but not kept")
        return kb.reader(cem.value(name))

    for m in group:
        inst = m.inst
        readers = [reader(o) for o in inst.operands]
        if inst.opcode is Opcode.FUSION:
            fused = gen.module.computation(inst.attr("calls").name)
            em = D.emitter(gen.module, fused, readers, body, kb.names, gen.constants)
            root = fused.root
        else:
            em = D.emitter(gen.module, comp, [], body, kb.names, gen.constants, external=dict(zip(inst.operands, readers)))
            root = inst
        target = cem.values.get(inst.name)
        escapes = target is not None
        body.line(comment(f"%{inst.name} ({m.kind}{', written out' if escapes else ''})"))
        with body.block(""):
            if m.kind == "reduce":
                red = Reducer(kb, em, body, m.reduce)
                with body.block(f"for (int64_t k = threadIdx.x; k < {k}; k += {threads})"):
                    red.accumulate(("row", "k"))
                red.block_reduce("threadIdx.x", threads, red_shared)
                with body.block("if (threadIdx.x == 0)"):
                    acc = red.accs[0]
                    if root is not m.reduce:
                        em.external[m.reduce.name] = lambda _idx, acc=acc: acc
                        value = em.emit(root.name, ("row",))
                    else:
                        value = acc
                    body.line(f"{scalars[inst.name]} = {value};")
                    if escapes:
                        body.line(f"{kb.pointer(target, write=True)}[row] = {value};")
            elif m.kind == "row":
                with body.block("if (threadIdx.x == 0)"):
                    value = em.emit(root.name, ("row",))
                    body.line(f"{scalars[inst.name]} = {value};")
                    if escapes:
                        body.line(f"{kb.pointer(target, write=True)}[row] = {value};")
            else:
                with body.block(f"for (int64_t k = threadIdx.x; k < {k}; k += {threads})"):
                    em.push()
                    value = em.emit(root.name, ("row", "k"))
                    if inst.name in shared_rows:
                        body.line(f"{shared_rows[inst.name]}[k] = {value};")
                    if escapes:
                        body.line(f"{kb.pointer(target, write=True)}[row * {k} + k] = {value};")
                    em.pop()
        body.line("__syncthreads();")
    members = ", ".join(f"%{m.inst.name}" for m in group)
    note = (f"row program over [{r}, {k}]: {members} in one block per row of {threads} threads, "
            f"{len(shared_rows)} row(s) and {len(scalars)} scalar(s) kept in shared memory")
    launch = kb.finish(body, (r,), (threads,), note)
    gen.kernels.splice(kb.text)
    gen.kernels.line("")
    gen.kernel_names.append(launch.kernel)
    gen.strategies[launch.kernel] = "row-program"
    return launch

