"""Row programs: consecutive row-wise instructions run as one kernel, one block per row (softmax,
layer norm and other normalizations).

After our fusion pass a softmax is four kernels (max, ``exp(x - max)``, sum,
divide) and a layer norm three, each a pass over ``[R, K]`` in memory. When
consecutive instructions of a computation (``row_groups``) all work row by
row on the same ``[R, K]`` (row reductions over the last dim producing
``[R]``, possibly with an elementwise epilogue, and elementwise fusions
producing ``[R, K]`` or ``[R]``), they become one kernel with a block of
256-1024 threads per row: a reduction's result is a shared scalar, an
``[R, K]`` value used later in the group lives in a shared row (at most
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
from backends.cuda.kernel_reduce import Reducer, _declare_shared, _epilogue_reduce
from backends.cuda.kernels import KernelBuilder, comment
from backends.cuda.program import Launch
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Group, Opcode
from hlo.shapes import Shape

MAX_SHARED_BYTES = 40 * 1024
MIN_K, MAX_K = 256, 16384
_NOT_ROW_WISE = Group.CONTRACTIONS | Group.CONTROL_FLOW | {
    Opcode.REDUCE_WINDOW, Opcode.SORT, Opcode.SCATTER, Opcode.GATHER, Opcode.CUSTOM_CALL, Opcode.SELECT_AND_SCATTER,
    Opcode.TOPK, Opcode.RNG, Opcode.FUSION}


@dataclass(frozen=True)
class Member:
    inst: HloInstruction
    kind: str  # "reduce" ([R, K] -> [R]), "full" (elementwise -> [R, K]) or "row" (elementwise -> [R])
    reduce: HloInstruction | None = None  # for "reduce": the reduce inside (the root, or under an epilogue)


def _row_major(shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


def classify(gen, comp: HloComputation, inst: HloInstruction) -> tuple[Member, tuple[int, int] | None] | None:
    """The member kind of ``inst`` and, for a reduction, its ``(R, K)``; None when it cannot join."""
    shape = inst.shape
    if not isinstance(shape, Shape) or shape.dtype is not P.F32 or not _row_major(shape) or shape.rank not in (1, 2):
        return None
    if inst.opcode is Opcode.FUSION:
        body = gen.module.computation(inst.attr("calls").name).instructions
    elif inst.opcode.is_elementwise or inst.opcode in (Opcode.REDUCE, Opcode.BROADCAST):
        body = (inst,)
    else:
        return None
    reduces = [i for i in body if i.opcode is Opcode.REDUCE]
    if any(i.opcode in _NOT_ROW_WISE for i in body):
        return None
    if not reduces:
        return (Member(inst, "full" if shape.rank == 2 else "row"), None)
    kb = KernelBuilder(gen, comp, inst, [], [])
    red = kb.root if kb.root.opcode is Opcode.REDUCE else _epilogue_reduce(kb)
    if red is None or len(reduces) != 1 or len(red.operands) != 2 or tuple(red.attr("dimensions")) != (1,):
        return None
    src = kb.shape_of(red.operands[0])
    if not isinstance(src, Shape) or src.rank != 2 or not _row_major(src) or shape.rank != 1:
        return None
    return (Member(inst, "reduce", red), (src.dims[0], src.dims[1]))


def row_groups(gen, comp: HloComputation) -> list[list[Member]]:
    """Maximal runs of consecutive instructions that form a row program worth one kernel: it starts at a
    row reduction, every member has the same ``[R, K]`` (or ``[R]``), it holds two reductions or a
    reduction and an ``[R, K]`` result, and the rows it keeps fit in ``MAX_SHARED_BYTES``."""
    users = comp.users()
    groups: list[list[Member]] = []
    current: list[Member] = []
    rk: tuple[int, int] | None = None

    def close():
        group = list(current)
        while group and _shared_rows(group, users) * rk[1] * 4 > MAX_SHARED_BYTES:
            group.pop()  # the kept rows do not fit: stop the program earlier
        if len(group) >= 2 and (sum(m.kind == "reduce" for m in group) >= 2 or any(m.kind == "full" for m in group)):
            groups.append(group)
        current.clear()

    def start(c) -> None:
        nonlocal rk
        if c is not None and c[0].kind == "reduce" and MIN_K <= c[1][1] <= MAX_K:
            rk = c[1]
            current.append(c[0])

    for inst in comp.instructions:
        if inst.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
            continue  # not scheduled work: they do not break a run
        c = classify(gen, comp, inst)
        if not current:
            start(c)
            continue
        fits = c is not None and ((c[1] == rk) if c[0].kind == "reduce"
                                  else c[0].inst.shape.dims in ((rk[0], rk[1]), (rk[0],)))
        if fits:
            current.append(c[0])
        else:
            close()
            start(c)
    if current:
        close()
    return groups


def _shared_rows(group: list[Member], users) -> int:
    names = {m.inst.name for m in group}
    return sum(1 for m in group if m.kind == "full" and _used_later(m, users, names))


def _used_later(member: Member, users, names) -> bool:
    return any(u in names for u in users.get(member.inst.name, []))


def emit_row_group(cem, group: list[Member]) -> Launch:
    """One kernel for ``group`` (members in schedule order), reading its outside operands from their
    buffers and writing the values used outside the group (``cem.values`` has their targets)."""
    gen, comp = cem.gen, cem.comp
    names = {m.inst.name for m in group}
    users = comp.users()
    r, k = (gen.module.computation(group[0].inst.attr("calls").name)[group[0].reduce.operands[0]].shape.dims
            if group[0].inst.opcode is Opcode.FUSION else comp[group[0].reduce.operands[0]].shape.dims)
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

