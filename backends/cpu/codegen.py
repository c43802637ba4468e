"""C code generation for a whole HLO module: one C function per computation, and the kernel ABI.

Every computation that runs at the top level (the ENTRY, while bodies and
conditions, conditional branches, called computations) becomes
``static int comp_N(void* const* p, void* const* r, char* scratch, char* err, size_t errlen)``:
``p`` holds the leaf buffers of its parameters, ``r`` the leaf buffers its
result is written to. Its instructions are emitted in order (text order is
the schedule): parameters, constants, tuples and get-tuple-element are
buffer aliases; opcodes with a top-level kernel (``TOP_LEVEL``: while,
conditional, sort, scatter, ...) emit it; everything else, fusions included,
becomes one loop nest over its output whose body the elemental emitter
writes. Each computation owns a fixed region of the scratch arena. The ABI
(backends/README.md) wraps the ENTRY function in init/run/teardown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Union

from backends.codegen.abi import emit_run_checks
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.buffer_assignment import Arena, can_write_in_place, is_view, last_uses
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.names import Names
from backends.cpu.column_reduce import column_reduce
from backends.cpu.dialect import C
from backends.cpu.index_check import emit_index_checks
from backends.cpu.prelude import PRELUDE
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

ABI_VERSION = 1


@dataclass(frozen=True)
class Buf:
    """An array in memory: a C pointer expression (to the storage type) and its shape."""

    ptr: str
    shape: Shape

    def read(self, idx) -> str:
        return C.load(self.shape.dtype, f"{self.ptr}[{linear_index(self.shape, idx)}]")


Value = Union[Buf, tuple]  # a Buf or a (nested) tuple of values


def leaves(value: Value) -> list[Buf]:
    if isinstance(value, Buf):
        return [value]
    out: list[Buf] = []
    for v in value:
        out.extend(leaves(v))
    return out


def shape_leaves(shape: ShapeLike) -> list[Shape]:
    return list(shape.leaves())


def check_array(shape: ShapeLike, what: str) -> Shape:
    if not isinstance(shape, Shape) or not shape.dtype.is_array_type:
        raise CodegenUnsupported(f"{what} must be an array, got {shape}")
    try:
        C.storage(shape.dtype)
    except CodegenUnsupported as e:
        raise CodegenUnsupported(f"{what}: {e}") from None
    return shape


@dataclass
class CodegenOptions:
    parallel_threshold: int = 1 << 15  # elements per loop nest before OpenMP splits the outer loop
    dnnl: bool = True  # dot, convolution and output fusions through oneDNN when it is installed
    name: str = "tfxla_kernel"


@dataclass
class GeneratedKernel:
    source: str
    signature: dict
    scratch_bytes: int
    buffer_offsets: dict[str, int] = field(default_factory=dict)
    libraries: tuple[str, ...] = ()  # extra -l flags the source needs (e.g. oneDNN)
    buffer_assignment: str = ""  # the per-computation arena report (XLA's buffer-assignment dump)
    include_dirs: tuple[str, ...] = ()
    library_dirs: tuple[str, ...] = ()


PARALLEL_CHUNKS = 64  # iterations the split loops of a parallel nest should offer the OpenMP team


def parallel_loops(dims) -> tuple[int, int]:
    """Which loops of a nest over ``dims`` OpenMP splits: (first, count), count 0 for none. Leading
    size-1 loops are skipped (a batch-1 NHWC tensor [1, 56, 56, 64] splits its H and W loops), then
    loops are collapsed until they run PARALLEL_CHUNKS iterations, never taking the innermost (the
    vector loop) unless it is the only one left."""
    first = next((d for d, n in enumerate(dims) if n > 1), None)
    if first is None:
        return 0, 0
    iterations, count = 1, 0
    for n in dims[first:max(len(dims) - 1, first + 1)]:
        iterations *= n
        count += 1
        if iterations >= PARALLEL_CHUNKS:
            break
    return first, count


def parallel_for_pragma(count: int) -> str:
    return "#pragma omp parallel for schedule(static)" + (f" collapse({count})" if count > 1 else "")


class ComputationEmitter:
    """Emits one computation as a C function (see the module docstring)."""

    def __init__(self, gen: "ModuleCodegen", comp: HloComputation, fname: str):
        self.gen = gen
        self.comp = comp
        self.fname = fname
        self.buf = IndentedBuffer()
        self.decls = IndentedBuffer()  # buffer pointers, hoisted to the top of the function
        self.values: dict[str, Value] = {}
        self.arena = Arena()
        self.last_use = last_uses(comp)
        self._dying: dict[int, list[str]] = {}
        for owner, step in self.last_use.items():
            self._dying.setdefault(step, []).append(owner)
        self.step = 0  # schedule index of the instruction being emitted
        self._owned: dict[str, list[str]] = {}  # instruction -> arena labels of its buffers
        self._temps: list[str] = []  # arena labels to free after the current instruction

    @property
    def scratch_bytes(self) -> int:
        return self.arena.size

    @property
    def offsets(self) -> dict[str, int]:
        return {a.label: a.offset for a in self.arena.allocations}

    @property
    def names(self) -> Names:
        return self.gen.names

    # --- buffers -----------------------------------------------------------------------
    def declare(self, shape: Shape, expr: str) -> Buf:
        """A local pointer variable for a buffer. Pointers are always locals: GCC 12 miscompiles
        vectorized loops with conditional loads through pointers reloaded from an array (p[0])."""
        name = self.names.fresh("b")
        ctype = C.storage(shape.dtype)
        self.decls.line(f"{ctype}* const {name} = ({ctype}*)({expr});")
        return Buf(name, shape)

    def alloc(self, shape: Shape, label: str, temp: bool = True) -> Buf:
        """A scratch buffer; ``temp`` ones are freed after the current instruction, values when they die."""
        offset = self.arena.allocate(label, shape.byte_size, self.step)
        if temp:
            self._temps.append(label)
        return self.declare(shape, f"scratch + {offset}")

    def alloc_value(self, shape: ShapeLike, label: str) -> Value:
        if isinstance(shape, Shape) and shape.dtype is PrimitiveType.TOKEN:
            return ()  # a token has no data: it is an empty value
        if isinstance(shape, TupleShape):
            return tuple(self.alloc_value(s, f"{label}#{k}") for k, s in enumerate(shape.elements))
        return self.alloc(check_array(shape, f"%{label}"), label, temp=False)

    def alloc_bytes(self, nbytes: int, label: str) -> str:
        offset = self.arena.allocate(label, nbytes, self.step)
        self._temps.append(label)
        return f"(scratch + {offset})"

    def _target(self, inst: HloInstruction) -> Value:
        """The buffers of ``inst``'s result: in place of a dying operand where legal, else fresh."""
        if isinstance(inst.shape, Shape) and inst.shape.dtype.is_array_type:
            for op in inst.operands:
                if (op in self.arena.live and self.last_use.get(op) == self.step
                        and can_write_in_place(self.gen.module, self.comp, inst, op)):
                    offset = self.arena.share(inst.name, op, self.step)
                    self._owned[inst.name] = [inst.name]
                    return self.declare(inst.shape, f"scratch + {offset}")
        before = set(self.arena.live)
        value = self.alloc_value(inst.shape, inst.name)
        self._owned[inst.name] = [k for k in self.arena.live if k not in before]
        return value

    def _release_dead(self) -> None:
        for label in self._temps:
            self.arena.release(label, self.step)
        self._temps.clear()
        for owner in self._dying.get(self.step, ()):
            for label in self._owned.pop(owner, []):
                self.arena.release(label, self.step)

    def reader(self, name: str) -> Callable:
        """A function from an index to the element of instruction ``name`` (arrays and tuples of arrays)."""
        inst = self.comp[name]
        if inst.opcode is Opcode.CONSTANT:
            return lambda idx, inst=inst: self.gen.constant_element(inst, idx)
        return _value_reader(self.values[name])

    def gen_tmp(self, ctype: str, expr: str) -> str:
        """A named constant local in the current block."""
        name = self.names.fresh("t")
        self.buf.line(f"const {ctype} {name} = {expr};")
        return name

    def emit_copy(self, dst: Buf, src: Buf) -> None:
        if dst.ptr != src.ptr and dst.shape.num_elements:
            self.buf.line(f"memcpy({dst.ptr}, {src.ptr}, {dst.shape.byte_size});")

    # --- the function --------------------------------------------------------------------
    def emit(self, result_leaves: list[str]) -> None:
        comp = self.comp
        root = comp.root
        root_parts = list(root.operands) if root.opcode is Opcode.TUPLE else [root.name]
        result = _rebuild(root.shape, result_leaves, self.declare)
        counts = {n: root_parts.count(n) for n in root_parts}
        direct: dict[str, Value] = {}
        if root.opcode is Opcode.TUPLE:
            for name, part in zip(root_parts, result):
                if counts[name] == 1:
                    direct[name] = part
        else:
            direct[root.name] = result

        pos = 0
        for p in comp.parameters:
            n = len(shape_leaves(p.shape))
            self.values[p.name] = _rebuild(p.shape, [f"p[{pos + k}]" for k in range(n)], self.declare)
            pos += n
        for step, inst in enumerate(comp.instructions):
            self.step = step
            self.emit_instruction(inst, direct.get(inst.name))
            self._release_dead()
        # Results not written in place are copied.
        final = self.values.get(root.name)
        if final is None:
            final = self.gen.constant_value(root)
        for src, dst in zip(leaves(final), leaves(result)):
            self.emit_copy(dst, src)

    def emit_instruction(self, inst: HloInstruction, out: Value | None) -> None:
        op = inst.opcode
        if op is Opcode.PARAMETER:
            return
        if op is Opcode.CONSTANT:
            self.values[inst.name] = self.gen.constant_value(inst)
            return
        if op is Opcode.TUPLE:
            self.values[inst.name] = tuple(self.values_or_const(o) for o in inst.operands)
            return
        if op is Opcode.GET_TUPLE_ELEMENT:
            src = self.values[inst.operands[0]]
            if not isinstance(src, tuple):
                raise CodegenUnsupported(f"%{inst.name}: get-tuple-element of a non-tuple")
            self.values[inst.name] = src[inst.attr("index")]
            return
        if out is None and is_view(self.comp, inst):  # a new view of the operand's buffer: no copy
            src = self.values_or_const(inst.operands[0])
            self.values[inst.name] = Buf(src.ptr, inst.shape)
            return
        target = out if out is not None else self._target(inst)
        self.values[inst.name] = target
        self.buf.line(c_comment(f"%{inst.name} = {inst.shape} {op.text}"))
        kernel = TOP_LEVEL.get(op)
        if kernel is not None and kernel(self, inst, target) is not False:  # False: declined, emit the default
            return
        try:
            trial = IndentedBuffer()
            saved, self.buf = self.buf, trial
            mark = self.names.counter
            self.emit_loop(inst, target)
        except CodegenUnsupported:
            self.buf = saved
            if op is not Opcode.FUSION:
                raise
            self.names.counter = mark
            self.emit_call(inst.attr("calls").name, [self.values_or_const(o) for o in inst.operands], target)
            return
        self.buf = saved
        self.buf.splice(trial)

    def values_or_const(self, name: str) -> Value:
        v = self.values.get(name)
        return v if v is not None else self.gen.constant_value(self.comp[name])

    # --- loops -----------------------------------------------------------------------
    def emit_loop(self, inst: HloInstruction, target: Value) -> None:
        outs = leaves(target)
        dims = outs[0].shape.dims
        if any(o.shape.dims != dims for o in outs):
            raise CodegenUnsupported(f"%{inst.name}: tuple results of different dims in one loop")
        buf = self.buf
        readers = [self.reader(o) for o in inst.operands]
        checked = emit_index_checks(buf, self.names, self.gen.module, self.comp, inst, readers)
        if 0 in dims:
            return
        if inst.opcode is Opcode.FUSION:
            fused = self.gen.module.computation(inst.attr("calls").name)
            emitter = ElementalEmitter(C, self.gen.module, fused, readers, buf, self.names, self.gen.constant_ref)
            root = fused.root_name
        else:
            emitter = ElementalEmitter(C, self.gen.module, self.comp, [], buf, self.names, self.gen.constant_ref,
                                       external=dict(zip(inst.operands, readers)))
            root = inst.name
        emitter.index_checked = checked
        idx = tuple(self.names.fresh("i") for _ in dims)
        with buf.block(""):
            if len(outs) == 1 and column_reduce(emitter, emitter.comp[root], outs[0], buf, self.names):
                return
            inner = inner_work(self.gen.module, inst)
            work = outs[0].shape.num_elements * inner
            first, count = parallel_loops(dims) if work >= self.gen.options.parallel_threshold else (0, 0)
            parallel_outer = count > 0
            # Too few output elements to split: split the reduction itself (full/row reductions).
            emitter.parallel_reduce = (not parallel_outer and outs[0].shape.num_elements <= 4
                                       and inner >= self.gen.options.parallel_threshold)
            for d, (var, n) in enumerate(zip(idx, dims)):
                if d == first and parallel_outer:
                    buf.line(parallel_for_pragma(count))
                buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
                buf._level += 1
            value = emitter.emit(root, idx)
            values = value if isinstance(value, tuple) else (value,)
            if len(values) != len(outs):
                raise CodegenUnsupported(f"%{inst.name}: nested tuple results in one loop")
            for o, v in zip(outs, values):
                buf.line(f"{o.ptr}[{linear_index(o.shape, idx)}] = {C.store(o.shape.dtype, v)};")
            for _ in dims:
                buf._level -= 1
                buf.line("}")

    # --- calls into other computations ------------------------------------------------
    def emit_call(self, comp_name: str, args: list[Value], target: Value) -> None:
        fname = self.gen.function_for(comp_name)
        arg_leaves = [b.ptr for a in args for b in leaves(a)]
        out_leaves = [b.ptr for b in leaves(target)]
        with self.buf.block(""):
            self.buf.line(f"void* const cp[] = {{{', '.join(f'(void*){a}' for a in arg_leaves) or '0'}}};")
            self.buf.line(f"void* const cr[] = {{{', '.join(f'(void*){a}' for a in out_leaves) or '0'}}};")
            self.buf.line(f"const int call_status = {fname}(cp, cr, scratch_base + TFXLA_BASE_{fname}, err, errlen);")
            self.buf.line("if (call_status) return call_status;")

    def function_text(self) -> str:
        out = IndentedBuffer()
        with out.block(f"static int {self.fname}(void* const* p, void* const* r, char* scratch, char* err, "
                       f"size_t errlen)"):
            out.line("(void)p; (void)r; (void)scratch; (void)err; (void)errlen;")
            out.line("char* const scratch_base = tfxla_scratch_base;")
            out.line("(void)scratch_base;")
            out.splice(self.decls)
            out.splice(self.buf)
            out.line("return 0;")
        return out.getvalue()


def _signature_entry(shape: Shape) -> dict:
    """An input or output of the ABI: its buffer holds ``dims`` in ``minor_to_major`` order."""
    m2m = shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major \
        else tuple(range(shape.rank - 1, -1, -1))
    return {"dtype": shape.dtype.value, "dims": list(shape.dims), "minor_to_major": list(m2m)}


def inner_work(module: HloModule, inst: HloInstruction) -> int:
    """Rough work per output element: the largest reduction/contraction/window size inside ``inst``."""
    insts = (module.computation(inst.attr("calls").name).instructions if inst.opcode is Opcode.FUSION
             else (inst,))
    work = 1
    for i in insts:
        if i.opcode is Opcode.REDUCE:
            src = module_shape(module, inst, i, 0)
            work = max(work, _prod(src.dims[d] for d in i.attr("dimensions")) if src else 1)
        elif i.opcode is Opcode.DOT:
            src = module_shape(module, inst, i, 0)
            work = max(work, _prod(src.dims[d] for d in i.attr("lhs_contracting_dims", ())) if src else 1)
        elif i.opcode in (Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW):
            work = max(work, _prod(d.size for d in i.attr("window").dims) * 16)
    return work


def module_shape(module: HloModule, outer: HloInstruction, inst: HloInstruction, k: int):
    comp = module.computation(outer.attr("calls").name) if outer.opcode is Opcode.FUSION else None
    if comp is not None and inst.operands[k] in comp.by_name:
        shape = comp[inst.operands[k]].shape
        return shape if isinstance(shape, Shape) else None
    return None


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def c_comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _rebuild(shape: ShapeLike, ptrs: list[str], declare: Callable[[Shape, str], Buf]) -> Value:
    """The buffers of a (tuple) value whose leaves live at the given ``void*`` expressions."""
    it = iter(ptrs)

    def build(s: ShapeLike) -> Value:
        if isinstance(s, TupleShape):
            return tuple(build(e) for e in s.elements)
        return declare(check_array(s, "buffer"), next(it))
    return build(shape)


def _value_reader(value: Value) -> Callable:
    if isinstance(value, Buf):
        return value.read
    readers = [_value_reader(v) for v in value]
    return lambda idx: tuple(r(idx) for r in readers)


# A kernel may return False, before emitting anything, to decline: the default loop nest (or call) is emitted.
TopLevelKernel = Callable[[ComputationEmitter, HloInstruction, Value], "bool | None"]
TOP_LEVEL: dict[Opcode, TopLevelKernel] = {}


def top_level(*opcodes: Opcode):
    def register(fn: TopLevelKernel) -> TopLevelKernel:
        for op in opcodes:
            TOP_LEVEL[op] = fn
        return fn
    return register


class ModuleCodegen:
    dialect = C  # what the top-level kernels write through (the CUDA serial strategy gives its own)

    def __init__(self, module: HloModule, options: CodegenOptions | None = None):
        self.module = module
        self.options = options or CodegenOptions()
        self.names = Names()
        self.globals = IndentedBuffer()
        self.constants: dict[int, str] = {}
        self.functions: dict[str, ComputationEmitter] = {}  # computation name -> emitter
        # Per-executable state built once by tfxla_init (library primitives, packed weights, ...):
        # kernels add struct fields, init code (may `return 1` after writing err) and teardown code.
        self.state_fields = IndentedBuffer()
        self.init_code = IndentedBuffer()
        self.teardown_code = IndentedBuffer()
        self.includes: list[str] = []
        self.libraries: list[str] = []
        self.include_dirs: list[str] = []
        self.library_dirs: list[str] = []
        self.order: list[str] = []  # function emission order (callees first)

    # --- constants --------------------------------------------------------------------
    def constant_ref(self, inst: HloInstruction) -> str:
        key = id(inst)
        if key not in self.constants:
            if inst.literal is None or inst.literal.is_elided:
                raise CodegenUnsupported(f"%{inst.name}: constant elided in the HLO text ({{...}})")
            shape = check_array(inst.shape, f"constant %{inst.name}")
            cname = f"k_{len(self.constants)}"
            values = C.numpy_to_c_array(inst.literal.to_numpy(), shape.dtype) if shape.num_elements else "0"
            self.globals.line(f"static const {C.storage(shape.dtype)} {cname}[{max(shape.num_elements, 1)}] "
                              f"__attribute__((aligned(64))) = {{{values}}};")
            self.constants[key] = cname
        return self.constants[key]

    def constant_value(self, inst: HloInstruction) -> Buf:
        shape = check_array(inst.shape, f"%{inst.name}")
        return Buf(f"(({C.storage(shape.dtype)}*){self.constant_ref(inst)})", shape)

    def constant_element(self, inst: HloInstruction, idx) -> str:
        shape = check_array(inst.shape, f"%{inst.name}")
        if shape.num_elements == 1 and inst.literal is not None and not inst.literal.is_elided:
            return C.literal(inst.literal.to_numpy().reshape(-1)[0], shape.dtype)
        return C.load(shape.dtype, f"{self.constant_ref(inst)}[{linear_index(shape, idx)}]")

    # --- functions -------------------------------------------------------------------
    def function_for(self, comp_name: str) -> str:
        if comp_name not in self.functions:
            comp = self.module.computation(comp_name)
            fname = f"comp_{len(self.functions)}"
            emitter = ComputationEmitter(self, comp, fname)
            self.functions[comp_name] = emitter
            emitter.emit([f"r[{k}]" for k in range(len(shape_leaves(comp.root.shape)))])
            self.order.append(comp_name)
        return self.functions[comp_name].fname

    def generate(self) -> GeneratedKernel:
        import backends.cpu.kernels  # noqa: F401  (registers the top-level kernels)

        entry = self.module.entry
        for p in entry.parameters:
            check_array(p.shape, f"parameter %{p.name}")
        out_shapes = shape_leaves(entry.root.shape)
        for s in out_shapes:
            check_array(s, "an output")
        entry_fn = self.function_for(entry.name)
        # Scratch regions: one per function, laid out in emission order.
        bases, total = {}, 0
        for name in self.order:
            em = self.functions[name]
            bases[em.fname] = total
            total += em.scratch_bytes
        signature = {
            "abi_version": ABI_VERSION,
            "module": self.module.name,
            "inputs": [_signature_entry(p.shape) for p in entry.parameters],
            "outputs": [_signature_entry(s) for s in out_shapes],
            "scratch_bytes": total,
        }
        offsets = {f"{name}/{label}": bases[self.functions[name].fname] + off
                   for name in self.order for label, off in self.functions[name].offsets.items()}
        report = "\n\n".join(
            self.functions[n].arena.report(f"%{n} ({self.functions[n].fname}, arena base {bases[self.functions[n].fname]})")
            for n in self.order)
        return GeneratedKernel(self._assemble(signature, bases, entry_fn), signature, total, offsets,
                               tuple(self.libraries), report, tuple(self.include_dirs), tuple(self.library_dirs))

    @staticmethod
    def _starts_parallel_regions(function_texts: list[str]) -> bool:
        """Whether a run starts OpenMP parallel regions: its own loops, or oneDNN's primitives. libgomp
        keeps a team per thread that ever started one, and once the teams' threads outnumber the CPUs
        it stops spinning between regions in the whole process, so a kernel without them must not make
        one (``tfxla_sync_fp_mode`` would, on each new calling thread)."""
        return any("#pragma omp parallel" in text or "dnnl_" in text for text in function_texts)

    def _assemble(self, signature: dict, bases: dict[str, int], entry_fn: str) -> str:
        entry = self.module.entry
        out = IndentedBuffer()
        out.line(f"/* Generated by tfxla-plugin for HLO module {self.module.name}. Do not edit. */")
        out.line(PRELUDE)
        for inc in self.includes:
            out.line(f"#include {inc}")
        with out.block("typedef struct tfxla_state", close="} tfxla_state;"):
            out.line("int unused;")
            out.splice(self.state_fields)
        out.line("static __thread char* tfxla_scratch_base;")
        out.line("static __thread tfxla_state* tfxla_st;")
        for fname, base in bases.items():
            out.line(f"#define TFXLA_BASE_{fname} {base}")
        out.splice(self.globals)
        out.line("")
        function_texts = [self.functions[name].function_text() for name in self.order]
        for text in function_texts:
            out.line(text)
        out.line(f"TFXLA_EXPORT int tfxla_abi_version(void) {{ return {ABI_VERSION}; }}")
        out.line(f"TFXLA_EXPORT const char* tfxla_signature(void) {{ return {json.dumps(json.dumps(signature))}; }}")
        out.line(f"TFXLA_EXPORT int64_t tfxla_scratch_bytes(void) {{ return {signature['scratch_bytes']}; }}")
        with out.block("TFXLA_EXPORT void tfxla_teardown(void* state_)"):
            out.line("tfxla_state* st = (tfxla_state*)state_;")
            out.line("if (!st) return;")
            out.splice(self.teardown_code)
            out.line("free(st);")
        with out.block("TFXLA_EXPORT int tfxla_init(void** state, char* err, size_t errlen)"):
            out.line("(void)err; (void)errlen;")
            out.line("tfxla_state* st = (tfxla_state*)calloc(1, sizeof(tfxla_state));")
            out.line('if (!st) { snprintf(err, errlen, "out of memory"); return 1; }')
            out.line("*state = st;")
            out.splice(self.init_code)
            out.line("return 0;")
        out.line("")
        with out.block("TFXLA_EXPORT int tfxla_run(void* state, const void* const* in, const int64_t* in_dims, "
                       "void* const* out, char* scratch, char* err, size_t errlen)"):
            emit_run_checks(out, [(f"input {p.parameter_number} (%%{p.name})", p.shape.dims)
                                  for p in entry.parameters])
            if self._starts_parallel_regions(function_texts):  # a serial kernel starts no OpenMP team on its caller's thread
                out.line("tfxla_sync_fp_mode();")
            out.line("tfxla_scratch_base = scratch;")
            out.line("tfxla_st = (tfxla_state*)state;")
            out.line(f"return {entry_fn}((void* const*)in, out, scratch + TFXLA_BASE_{entry_fn}, err, errlen);")
        return out.getvalue()


def generate(module: HloModule, options: CodegenOptions | None = None) -> GeneratedKernel:
    """C source for ``module`` (raises ``CodegenUnsupported`` naming what cannot be emitted).

    The kernel shapes are read from the annotations of the backend's own pipeline passes
    (``hlo/annotations.py``); a module that skipped the pipeline gets them here."""
    from backends.cpu.pipeline import prepare  # the backend's own passes: a no-op on the pipeline's output

    return ModuleCodegen(prepare(module), options).generate()
