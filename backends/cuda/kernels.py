"""Kernel strategies and the builder they write through.

A strategy is a name and ``emit(kb) -> Launch | None``: it inspects the
instruction (and, for a fusion, its fused computation), returns None to
decline before writing anything, or writes one ``__global__`` through the
``KernelBuilder`` and returns its launch. ``STRATEGIES`` is tried in order;
the elemental loop, last, takes everything the elemental rules can compute.

``KernelBuilder`` owns one kernel: its pointer parameters (operand leaves
``p<N>``, results ``r<N>``; constants are read from their ``__device__``
arrays, not passed), an elemental emitter over the fused computation (or
over the instruction itself, its operands read from their buffers), and the
final text with the launch comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.layout import linear_index
from backends.codegen.names import Names
from backends.cuda import dialect as D
from backends.cuda.program import BufRef, Launch
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


@dataclass(frozen=True)
class Strategy:
    name: str
    emit: Callable[["KernelBuilder"], "Launch | None"]


STRATEGIES: list[Strategy] = []


def strategy(name: str):
    def register(fn):
        STRATEGIES.append(Strategy(name, fn))
        return fn
    return register


class KernelBuilder:
    def __init__(self, gen, comp: HloComputation, inst: HloInstruction, operands: list, outs: list):
        self.gen = gen
        self.module = gen.module
        self.comp = comp
        self.inst = inst
        self.operands = operands  # Values (DevBuf or tuples) of inst's operands
        self.outs = outs  # DevBufs of inst's result leaves
        self.name = gen.new_kernel_name(inst)
        self.names = Names()
        self.params: list[tuple[str, BufRef]] = []  # (declaration, buffer) in argument order
        self._ptr: dict[tuple, str] = {}
        self.text = IndentedBuffer()
        self.pre_steps: list = []  # host steps to run before the launch (copies)
        self.temp: Callable = gen.temp_allocator  # (nbytes, label) -> DevBuf, scratch for this launch only

    @property
    def options(self):
        return self.gen.options

    # --- the computation a kernel evaluates --------------------------------------------
    @property
    def fused(self) -> HloComputation | None:
        if self.inst.opcode is Opcode.FUSION:
            return self.module.computation(self.inst.attr("calls").name)
        return None

    @property
    def root(self) -> HloInstruction:
        """The instruction whose value the kernel writes: the fused root, or the instruction itself."""
        fused = self.fused
        return fused.root if fused is not None else self.inst

    @property
    def body_comp(self) -> HloComputation:
        return self.fused or self.comp

    def shape_of(self, name: str) -> Shape:
        return self.body_comp[name].shape

    def pointer(self, buf, write: bool = False) -> str:
        """The C expression of a buffer's element pointer inside the kernel (a new parameter if needed)."""
        if buf.is_global and not write:
            return f"((const __half*){buf.ref.symbol})" if buf.shape.dtype.value == "f16" else buf.ref.symbol
        key = (buf.ref, write)
        if key not in self._ptr:
            ctype = D.storage(buf.shape.dtype)
            name = f"r{sum(1 for k in self._ptr if k[1])}" if write else f"p{sum(1 for k in self._ptr if not k[1])}"
            decl = f"{ctype}* __restrict__ {name}" if write else f"const {ctype}* __restrict__ {name}"
            self.params.append((decl, buf.ref))
            self._ptr[key] = name
        return self._ptr[key]

    def reader(self, value) -> Callable:
        if isinstance(value, tuple):
            readers = [self.reader(v) for v in value]
            return lambda idx: tuple(r(idx) for r in readers)
        ptr = self.pointer(value)
        shape = value.shape
        return lambda idx: D.load(shape.dtype, f"{ptr}[{linear_index(shape, idx)}]")

    def emitter(self, buf: IndentedBuffer, readers: list | None = None) -> ElementalEmitter:
        """An elemental emitter over what the kernel computes; ``em.emit(root_name, idx)`` gives elements."""
        readers = readers if readers is not None else [self.reader(v) for v in self.operands]
        if self.fused is not None:
            return D.emitter(self.module, self.fused, readers, buf, self.names, self.gen.constants)
        return D.emitter(self.module, self.comp, [], buf, self.names, self.gen.constants,
                         external=dict(zip(self.inst.operands, readers)))

    def store(self, out, idx, value: str) -> str:
        return f"{self.pointer(out, write=True)}[{linear_index(out.shape, idx)}] = {D.store(out.shape.dtype, value)};"

    # --- the kernel text ---------------------------------------------------------------
    def finish(self, body: IndentedBuffer, grid, block, note: str, shared_bytes: int = 0,
               prologue: IndentedBuffer | None = None) -> Launch:
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        threads = block[0] * block[1] * block[2]
        inst = self.inst
        kind = inst.attr("kind") if inst.opcode is Opcode.FUSION else None
        kind = f", kind={getattr(kind, 'value', kind)}" if kind else ""
        self.text.line(comment(f"%{inst.name} = {inst.shape} {inst.opcode.text}{kind}"))
        self.text.line(comment(f"launch: grid=({grid[0]},{grid[1]},{grid[2]}) block=({block[0]},{block[1]},{block[2]}) "
                               f"shared={shared_bytes}B; {note}"))
        params = ", ".join(d for d, _ in self.params) or "void"
        with self.text.block(f'extern "C" __global__ void __launch_bounds__({threads}) {self.name}({params})'):
            if prologue is not None:
                self.text.splice(prologue)
            self.text.splice(body)
        return Launch(self.name, grid, block, tuple(r for _, r in self.params), shared_bytes)


def epilogue_core(kb: "KernelBuilder", opcode: Opcode) -> HloInstruction | None:
    """The instruction of ``opcode`` a kernel is built around: the root, or, in a fusion whose root is an
    elementwise function of exactly one such instruction (every instruction between them elementwise
    with its dims), that instruction; the epilogue then runs per result element. None otherwise."""
    if kb.root.opcode is opcode:
        return kb.root
    fused = kb.fused
    if fused is None or not isinstance(kb.root.shape, Shape):
        return None
    cores = [i for i in fused.instructions if i.opcode is opcode]
    if len(cores) != 1 or not isinstance(cores[0].shape, Shape):
        return None
    core = cores[0]
    users = fused.users()
    seen, todo = set(), [core.name]
    while todo:
        for u in users.get(todo.pop(), []):
            inst = fused[u]
            if not (inst.opcode.is_elementwise and isinstance(inst.shape, Shape) and inst.shape.dims == core.shape.dims):
                return None
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return core if kb.root.name in seen else None


def store_result(body, kb: KernelBuilder, em, core, out_index: Callable[[], tuple], acc: str) -> None:
    """Write result element (``mm``, ``nn``) from the accumulated ``acc``: rounded to the core's type,
    then through the epilogue (the fused root computed on this element only) when there is one."""
    out = kb.outs[0]
    idx, offset = out_index()
    value = acc
    if core is not kb.root:
        value = body_tmp(body, kb, D.compute(core.shape.dtype), D.load(core.shape.dtype, D.store(core.shape.dtype, acc)))
        em.external[core.name] = lambda _idx, v=value: v
        em.push()
        value = em.emit(kb.root.name, idx)
        em.pop()
    body.line(f"{kb.pointer(out, write=True)}[{offset or linear_index(out.shape, idx)}] = "
              f"{D.store(out.shape.dtype, value)};")


def body_tmp(body, kb: KernelBuilder, ctype: str, expr: str) -> str:
    name = kb.names.fresh("c")
    body.line(f"const {ctype} {name} = {expr};")
    return name


def comment(text: str) -> str:
    return "/* " + text.replace("/*", "/ *").replace("*/", "* /") + " */"


def prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def delinearize(offset: str, dims) -> tuple[str, ...]:
    """Row-major multi-index of ``offset`` in ``dims`` (C expressions; size-1 dims give "0")."""
    idx = ["0"] * len(dims)
    stride = 1
    for d in range(len(dims) - 1, -1, -1):
        n = dims[d]
        if n != 1:
            if stride == 1:
                idx[d] = f"({offset}) % {n}" if stride * n < prod(dims) else f"({offset})"
            else:
                idx[d] = f"(({offset}) / {stride}) % {n}" if stride * n < prod(dims) else f"(({offset}) / {stride})"
        stride *= n
    return tuple(idx)


# Importing the strategy modules registers them, in this (priority) order.
from backends.cuda import kernel_transpose, kernel_dot, kernel_depthwise, kernel_reduce, kernel_serial, kernel_loop  # noqa: E402,F401
