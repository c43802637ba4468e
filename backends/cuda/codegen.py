"""CUDA code generation for a whole HLO module: one ``__global__`` per kernel, and the host program.

``generate(module)`` walks the ENTRY computation in order (text order is the
schedule), like the CPU code generator: parameters, constants, tuples,
get-tuple-element and row-major reshapes/bitcasts are buffer aliases; while,
conditional and call become host steps over sub-programs (``HOST_STEPS``);
every other instruction, fusions included, becomes one kernel chosen by the
first kernel strategy that accepts it (``kernels.STRATEGIES``: tiled
transpose, tiled dot, row/column/split reductions, and the elemental loop
that takes everything with an elemental rule). A fusion no kernel takes
(e.g. a fused scatter) runs its fused computation as a sub-program.

Buffers: entry inputs and outputs are their own device buffers; every other
value lives in a scratch arena laid out by the shared buffer
assignment (``backends/codegen/buffer_assignment.py``) (one region per emitted computation, released on last use).
Kernels never write a buffer they read, so pointer parameters are
``__restrict__``. Names are deterministic: kernels ``k<N>_<instruction>``,
constants ``k_<N>``; each kernel carries its launch configuration and the
reason for it in a comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Union

from backends.codegen import values as V
from backends.codegen.abi import signature as abi_signature
from backends.codegen.buffer import IndentedBuffer, c_comment
from backends.codegen.buffer_assignment import Arena
from backends.codegen.computation import ComputationEmitterBase
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.names import Names
from backends.codegen.refusals import RNG_OPCODES, refuse_rng
from backends.codegen.registry import registrar
from backends.cuda import dialect as D
from backends.cuda.prelude import PRELUDE
from backends.cuda.program import BufRef, Copy, Launch, Program, Step, Switch, WhileLoop, render
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

@dataclass(frozen=True)
class DevBuf:
    """An array on the device: where it lives and its shape."""

    ref: BufRef
    shape: Shape

    @property
    def is_global(self) -> bool:
        return self.ref.space == "global"


Value = Union[DevBuf, tuple]
leaves = V.leaves


def check_array(shape: ShapeLike, what: str) -> Shape:
    return V.check_array(shape, what, D.storage)


def is_row_major(shape: Shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


@dataclass(frozen=True)
class CodegenOptions:
    block_size: int = 256  # threads per block of elementwise loops
    max_blocks: int = 4096  # grid-stride loops never launch more blocks than this
    tensor_cores: bool = True  # f16/bf16 dots and convolutions on wmma tensor-core fragments
    name: str = "tfxla_cuda"


@dataclass
class GeneratedModule:
    """What ``generate`` returns: the CUDA source, the host program, and the ABI signature."""

    source: str
    program: Program
    signature: dict
    kernels: tuple[str, ...]
    strategies: dict[str, str] = field(default_factory=dict)  # kernel name -> strategy that wrote it

    @property
    def program_text(self) -> str:
        return render(self.program.steps)


def _ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def row_groups(gen, comp):
    from backends.cuda.kernel_rows import row_groups as groups

    return groups(gen, comp)


def emit_row_group(cem, group):
    from backends.cuda.kernel_rows import emit_row_group as emit

    return emit(cem, group)


class ComputationEmitter(ComputationEmitterBase):
    """Emits one computation as host steps, its values in one scratch region (see module docstring)."""

    def __init__(self, gen: "ModuleEmitter", comp: HloComputation, params: list[Value], result: Value | None):
        super().__init__(gen, comp)
        self.params = params
        self.result = result
        self.region = len(gen.regions)
        gen.regions.append(self.arena)
        self.steps: list[Step] = []

    # --- buffers ------------------------------------------------------------------
    def alloc(self, shape: Shape, label: str, temp: bool = False) -> DevBuf:
        offset = self.arena.allocate(label, shape.byte_size, self.step)
        (self._temps if temp else self._owned.setdefault(self._owner, [])).append(label)
        return DevBuf(BufRef("scratch", self.region, offset, nbytes=shape.byte_size), shape)

    def alloc_value(self, shape: ShapeLike, label: str, temp: bool = False) -> Value:
        if isinstance(shape, Shape) and shape.dtype is PrimitiveType.TOKEN:
            return ()
        if isinstance(shape, TupleShape):
            return tuple(self.alloc_value(s, f"{label}#{k}", temp) for k, s in enumerate(shape.elements))
        return self.alloc(check_array(shape, f"%{label}"), label, temp)

    def _emit_group(self, group, direct: dict) -> None:
        """A row program as one kernel; if it cannot be one, its members one by one."""
        try:
            launch = emit_row_group(self, group)
        except CodegenUnsupported:
            for m in group:
                self._owner = m.inst.name
                self.emit_instruction(m.inst, self.values.get(m.inst.name))
            return
        self.steps.append(launch)

    def copy(self, dst: Value, src: Value) -> None:
        for d, s in zip(leaves(dst), leaves(src)):
            if d.ref != s.ref and d.shape.byte_size:
                self.steps.append(Copy(d.ref, s.ref, d.shape.byte_size))

    # --- the computation ------------------------------------------------------------
    def emit(self) -> Value:
        comp = self.comp
        root = comp.root
        direct = V.direct_results(root, self.result) if self.result is not None else {}
        for p, v in zip(comp.parameters, self.params):
            self.values[p.name] = v
        groups = {m.inst.name: g for g in row_groups(self.gen, comp) for m in g}
        users = comp.users()
        group_start = None
        for step, inst in enumerate(comp.instructions):
            self.step = step
            self._owner = inst.name
            group = groups.get(inst.name)
            if group is None:
                self.emit_instruction(inst, direct.get(inst.name))
                self.release_dead(step)
                continue
            # A row program member: only values used outside the group get a buffer; buffers are
            # released when the group's kernel has been emitted (it reads them all).
            group_start = step if inst.name == group[0].inst.name else group_start
            names = {m.inst.name for m in group}
            if inst.name in direct or inst.name == root.name or any(u not in names for u in users.get(inst.name, [])):
                self.values[inst.name] = direct.get(inst.name) or self.alloc_value(inst.shape, inst.name)
            if inst.name == group[-1].inst.name:
                self._emit_group(group, direct)
                for s in range(group_start, step + 1):
                    self.release_dead(s)
        final = self.value(root.name)
        if self.result is not None:
            self.copy(self.result, final)
            return self.result
        return final

    def emit_instruction(self, inst: HloInstruction, out: Value | None) -> None:
        if self.emit_alias(inst, out):
            return
        op = inst.opcode
        if op is Opcode.AFTER_ALL:
            self.values[inst.name] = ()
            return
        target = out if out is not None else self.alloc_value(inst.shape, inst.name)
        self.values[inst.name] = target
        host = HOST_STEPS.get(op)
        if host is not None:
            host(self, inst, target)
            return
        operands = [self.value(o) for o in inst.operands]
        self.gen.temp_allocator = lambda nbytes, label: self.alloc(
            Shape.array("u8", (nbytes,)), f"{inst.name}#{label}", temp=True)
        steps = self.gen.kernel_for(self.comp, inst, operands, leaves(target))
        if steps is not None:
            self.steps.extend(steps)
            return
        # A fusion no kernel takes: run its fused computation as a sub-program.
        self.steps.extend(self.gen.computation(inst.attr("calls").name, operands, target))


HostStep = Callable[[ComputationEmitter, HloInstruction, Value], None]
HOST_STEPS: dict[Opcode, HostStep] = {}
host_step = registrar(HOST_STEPS)


@host_step(*RNG_OPCODES)
def _rng(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    refuse_rng(inst, D.CUDA.backend)


@host_step(Opcode.CALL)
def _call(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    em.steps.extend(em.gen.computation(inst.attr("to_apply").name, [em.value(o) for o in inst.operands], target))


@host_step(Opcode.OPTIMIZATION_BARRIER)
def _barrier(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    em.copy(target, em.value(inst.operands[0]))


@host_step(Opcode.WHILE)
def _while(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    em.copy(target, em.value(inst.operands[0]))
    pred = em.alloc(Shape.array("pred", ()), f"{inst.name}#pred", temp=True)
    fresh = em.alloc_value(inst.shape, f"{inst.name}#next", temp=True)
    cond = em.gen.computation(inst.attr("condition").name, [target], pred)
    body = em.gen.computation(inst.attr("body").name, [target], fresh)
    saved, em.steps = em.steps, list(body)
    em.copy(target, fresh)
    body, em.steps = tuple(em.steps), saved
    em.steps.append(WhileLoop(tuple(cond), pred.ref, body))


@host_step(Opcode.CONDITIONAL)
def _conditional(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    index = em.value(inst.operands[0])
    if "branch_computations" in inst.attrs:
        names = [c.name for c in inst.attr("branch_computations")]
    else:
        names = [inst.attr("true_computation").name, inst.attr("false_computation").name]
    branches = tuple(tuple(em.gen.computation(name, [em.value(o)], target))
                     for name, o in zip(names, inst.operands[1:]))
    em.steps.append(Switch(index.ref, index.shape.dtype.is_pred, branches))


class ModuleEmitter:
    def __init__(self, module: HloModule, options: CodegenOptions | None = None):
        from backends.cuda import kernels  # noqa: F401 (registers the kernel strategies)

        self.module = module
        self.options = options or CodegenOptions()
        self.constants = D.ConstantTable()
        self.kernels = IndentedBuffer()
        self.kernel_names: list[str] = []
        self.strategies: dict[str, str] = {}
        self.regions: list[Arena] = []
        self.device_globals = IndentedBuffer()  # scratch globals of kernels (partials, counters)
        self.device_globals_parts: list[IndentedBuffer] = []  # more globals (comparator functions)
        self.comparator_names = Names()
        self.temp_allocator = None

    def constant_value(self, inst: HloInstruction) -> DevBuf:
        shape = check_array(inst.shape, f"%{inst.name}")
        return DevBuf(BufRef("global", symbol=self.constants.symbol(inst), nbytes=shape.byte_size), shape)

    def new_kernel_name(self, inst: HloInstruction) -> str:
        return f"k{len(self.kernel_names)}_{_ident(inst.name)}"

    def computation(self, comp_name: str, params: list[Value], result: Value) -> list[Step]:
        em = ComputationEmitter(self, self.module.computation(comp_name), params, result)
        em.emit()
        return em.steps

    def kernel_for(self, comp: HloComputation, inst: HloInstruction, operands: list[Value],
                   outs: list[DevBuf]):
        """The steps (copies, then the launch) of the first strategy that takes ``inst``; [] when there is
        nothing to run (zero elements); None when no strategy takes a fusion (run it as a sub-program)."""
        from backends.cuda.kernels import STRATEGIES, KernelBuilder

        for o in outs:
            check_array(o.shape, f"result of %{inst.name}")
        if all(o.shape.num_elements == 0 for o in outs):
            return []
        errors = []
        for strategy in STRATEGIES:
            kb = KernelBuilder(self, comp, inst, operands, outs)
            try:
                launch = strategy.emit(kb)
            except CodegenUnsupported as e:
                errors.append(f"{strategy.name}: {e}")
                continue
            if launch is not None:
                self.kernels.splice(kb.text)
                self.kernels.line("")
                self.kernel_names.append(launch.kernel)
                self.strategies[launch.kernel] = strategy.name
                return [*kb.pre_steps, launch]
        if inst.opcode is Opcode.FUSION:
            return None
        raise CodegenUnsupported(f"%{inst.name}: the CUDA backend cannot generate {inst.opcode.text} ("
                                 + "; ".join(errors) + ")")

    def generate(self) -> GeneratedModule:
        entry = self.module.entry
        params: list[Value] = []
        for k, p in enumerate(entry.parameters):
            shape = check_array(p.shape, f"parameter %{p.name}")
            params.append(DevBuf(BufRef("input", k, nbytes=shape.byte_size), shape))
        out_shapes = list(entry.root.shape.leaves())
        outs = [DevBuf(BufRef("output", k, nbytes=s.byte_size), check_array(s, "an output"))
                for k, s in enumerate(out_shapes)]
        it = iter(outs)
        steps = self.computation(entry.name, params, V.rebuild(entry.root.shape, lambda _s: next(it)))
        bases, total = [], 0
        for arena in self.regions:
            bases.append(total)
            total += -(-arena.size // 256) * 256
        program = Program(tuple(_resolve(steps, bases)), total)
        signature = abi_signature(self.module.name, [p.shape for p in entry.parameters], out_shapes, total)
        return GeneratedModule(self._assemble(program), program, signature, tuple(self.kernel_names),
                               dict(self.strategies))

    def _assemble(self, program: Program) -> str:
        out = IndentedBuffer()
        out.line(f"/* Generated by tfxla-plugin (CUDA) for HLO module {self.module.name}. Do not edit. */")
        out.line(c_comment(f"{len(self.kernel_names)} kernels, scratch arena {program.scratch_bytes} bytes"))
        out.line(PRELUDE)
        out.splice(self.constants.globals)
        out.splice(self.device_globals)
        for part in self.device_globals_parts:
            out.splice(part)
        out.line("")
        out.splice(self.kernels)
        return out.getvalue()


def _resolve(steps, bases: list[int]) -> list[Step]:
    """Scratch references from (region, offset) to absolute arena offsets."""
    def ref(r: BufRef) -> BufRef:
        if r.space != "scratch":
            return r
        return BufRef("scratch", 0, bases[r.index] + r.offset, nbytes=r.nbytes)

    out: list[Step] = []
    for s in steps:
        if isinstance(s, Launch):
            out.append(Launch(s.kernel, s.grid, s.block, tuple(ref(a) for a in s.args), s.shared_bytes))
        elif isinstance(s, Copy):
            out.append(Copy(ref(s.dst), ref(s.src), s.nbytes))
        elif isinstance(s, WhileLoop):
            out.append(WhileLoop(tuple(_resolve(s.cond, bases)), ref(s.pred), tuple(_resolve(s.body, bases))))
        elif isinstance(s, Switch):
            out.append(Switch(ref(s.index), s.is_pred, tuple(tuple(_resolve(b, bases)) for b in s.branches)))
    return out


def generate(module: HloModule, options: CodegenOptions | None = None) -> GeneratedModule:
    """CUDA source and host program for ``module`` (raises ``CodegenUnsupported`` naming what cannot be emitted).

    Emits exactly what the kernel-shape annotations of the backend's own passes say (``hlo/annotations.py``,
    ``backends/cuda/pipeline.py``) and decides none itself: a run of row-wise fusions without
    ``row_program=`` is emitted kernel by kernel. ``compile`` and ``compile_launcher`` run the passes first
    (``pipeline.prepare``)."""
    return ModuleEmitter(module, options).generate()
