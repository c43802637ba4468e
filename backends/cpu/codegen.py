"""C code generation for a whole HLO module: buffers, one loop nest per instruction, the kernel ABI.

The ENTRY computation's instructions are emitted in order (its text order is
the schedule). Each array-valued instruction (a fusion or a single op) gets a
loop nest over its output whose body is written by the elemental emitter;
parameters read the caller's input buffers, constants become static arrays,
tuples and get-tuple-element are aliases. Results that are ROOT outputs are
written straight into the caller's output buffers; every other buffer lives
in one scratch arena whose offsets come from ``buffer_assignment``.
The ABI (documented in backends/README.md) is an init/run/teardown triple.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from backends.codegen.buffer import IndentedBuffer
from backends.cpu import ctypes_c as C
from backends.cpu import elemental_data, elemental_math  # noqa: F401  (register elemental rules)
from backends.cpu.elemental import CodegenUnsupported, ElementalEmitter, Names, linear_index
from backends.cpu.prelude import PRELUDE
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape

ABI_VERSION = 1
ALIGNMENT = 64
_ALIASES = {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT}


@dataclass
class CodegenOptions:
    parallel_threshold: int = 1 << 15  # elements per loop nest before OpenMP splits the outer loop
    name: str = "tfxla_kernel"


@dataclass
class GeneratedKernel:
    source: str
    signature: dict
    scratch_bytes: int
    buffer_offsets: dict[str, int] = field(default_factory=dict)


def _array(shape, what: str) -> Shape:
    if not isinstance(shape, Shape) or not shape.dtype.is_array_type:
        raise CodegenUnsupported(f"{what} must be an array, got {shape}")
    C.storage(shape.dtype)
    return shape


class ModuleCodegen:
    def __init__(self, module: HloModule, options: CodegenOptions | None = None):
        self.module = module
        self.options = options or CodegenOptions()
        self.entry = module.entry
        self.names = Names()
        self.globals = IndentedBuffer()
        self.body = IndentedBuffer()
        self.buffers: dict[str, str | tuple] = {}  # instruction -> C pointer expression (or tuple of them)
        self.constants: dict[str, str] = {}
        self.scratch_offsets: dict[str, int] = {}
        self.scratch_bytes = 0

    # --- buffers -----------------------------------------------------------------
    def _scratch(self, name: str, nbytes: int) -> str:
        offset = self.scratch_bytes
        self.scratch_offsets[name] = offset
        self.scratch_bytes += -(-max(nbytes, 1) // ALIGNMENT) * ALIGNMENT
        return f"(scratch + {offset})"

    def constant_ref(self, inst: HloInstruction) -> str:
        if inst.name in self.constants:
            return self.constants[inst.name]
        shape = inst.shape
        cname = f"k_{len(self.constants)}"
        values = C.numpy_to_c_array(inst.literal.to_numpy(), shape.dtype) if shape.num_elements else "0"
        self.globals.line(f"static const {C.storage(shape.dtype)} {cname}[{max(shape.num_elements, 1)}] = "
                          f"{{{values}}};")
        self.constants[inst.name] = cname
        return cname

    def _reader(self, name: str):
        """A ParamFn reading instruction ``name``'s (array) buffer at an index."""
        inst = self.entry[name]
        if inst.opcode is Opcode.CONSTANT:
            if inst.literal.is_elided:
                raise CodegenUnsupported(f"%{name}: constant elided in the HLO text ({{...}})")
            shape = inst.shape

            def read_const(idx, inst=inst):
                if shape.num_elements == 1:
                    return C.literal(inst.literal.to_numpy().reshape(-1)[0], shape.dtype)
                return C.load(shape.dtype, f"{self.constant_ref(inst)}[{linear_index(shape, idx)}]")
            return read_const
        ptr = self.buffers[name]
        if isinstance(ptr, tuple):
            return lambda idx: tuple(self._tuple_reader(p, s)(idx) for p, s in ptr)
        shape = _array(inst.shape, f"%{name}")
        return lambda idx: C.load(shape.dtype, f"{ptr}[{linear_index(shape, idx)}]")

    @staticmethod
    def _tuple_reader(ptr: str, shape: Shape):
        return lambda idx: C.load(shape.dtype, f"{ptr}[{linear_index(shape, idx)}]")

    # --- emission -------------------------------------------------------------------
    def generate(self) -> GeneratedKernel:
        entry = self.entry
        params = entry.parameters
        for p in params:
            _array(p.shape, f"parameter %{p.name}")
        root = entry.root
        outputs = list(root.operands) if root.opcode is Opcode.TUPLE else [root.name]
        out_shapes = [_array(entry[o].shape, f"output %{o}") for o in outputs]
        direct = {o: k for k, o in enumerate(outputs)
                  if outputs.count(o) == 1 and entry[o].opcode not in _ALIASES}

        for p in params:
            self.buffers[p.name] = f"(({C.storage(p.shape.dtype)}*)in[{p.parameter_number}])"
        for inst in entry.instructions:
            if inst.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
                continue
            if inst.opcode is Opcode.TUPLE:
                continue
            if inst.opcode is Opcode.GET_TUPLE_ELEMENT:
                src = self.buffers.get(inst.operands[0])
                if not isinstance(src, tuple):
                    raise CodegenUnsupported(f"%{inst.name}: get-tuple-element of an unsupported tuple")
                self.buffers[inst.name] = src[inst.attr("index")][0]
                continue
            self._emit_loop(inst, direct)

        copies = [(k, o) for k, o in enumerate(outputs) if o not in direct]
        for k, o in copies:
            shape = out_shapes[k]
            src = self.constant_ref(entry[o]) if entry[o].opcode is Opcode.CONSTANT else self.buffers[o]
            self.body.line(f"memcpy(out[{k}], {src}, {shape.byte_size});")

        signature = {
            "abi_version": ABI_VERSION,
            "module": self.module.name,
            "inputs": [{"dtype": p.shape.dtype.value, "dims": list(p.shape.dims)} for p in params],
            "outputs": [{"dtype": s.dtype.value, "dims": list(s.dims)} for s in out_shapes],
            "scratch_bytes": self.scratch_bytes,
        }
        return GeneratedKernel(self._assemble(signature, params), signature, self.scratch_bytes,
                               dict(self.scratch_offsets))

    def _emit_loop(self, inst: HloInstruction, direct: dict[str, int]) -> None:
        shapes = inst.shape.elements if isinstance(inst.shape, TupleShape) else (inst.shape,)
        shapes = [_array(s, f"%{inst.name}") for s in shapes]
        if len({s.dims for s in shapes}) != 1:
            raise CodegenUnsupported(f"%{inst.name}: tuple outputs of different dims")
        if inst.name in direct:
            ptrs = [f"(({C.storage(shapes[0].dtype)}*)out[{direct[inst.name]}])"]
        else:
            ptrs = [f"(({C.storage(s.dtype)}*){self._scratch(f'{inst.name}#{k}' if len(shapes) > 1 else inst.name, s.byte_size)})"
                    for k, s in enumerate(shapes)]
        if isinstance(inst.shape, TupleShape):
            self.buffers[inst.name] = tuple(zip(ptrs, shapes))
        else:
            self.buffers[inst.name] = ptrs[0]
        dims = shapes[0].dims
        buf = self.body
        buf.line(f"/* %{inst.name} = {inst.shape} {inst.opcode.text} */")
        if 0 in dims:
            return
        idx = tuple(self.names.fresh("i") for _ in dims)
        with buf.block(""):
            elements = shapes[0].num_elements
            for d, (var, n) in enumerate(zip(idx, dims)):
                if d == 0 and elements >= self.options.parallel_threshold and n > 1:
                    buf.line("#pragma omp parallel for schedule(static)")
                buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
                buf._level += 1
            emitter = self._emitter_for(inst, buf)
            value = emitter.emit(inst.name if inst.opcode is not Opcode.FUSION else emitter.comp.root_name, idx)
            values = value if isinstance(value, tuple) else (value,)
            for ptr, s, v in zip(ptrs, shapes, values):
                buf.line(f"{ptr}[{linear_index(s, idx)}] = {C.store(s.dtype, v)};")
            for _ in dims:
                buf._level -= 1
                buf.line("}")

    def _emitter_for(self, inst: HloInstruction, buf: IndentedBuffer) -> ElementalEmitter:
        readers = [self._reader(o) for o in inst.operands]
        if inst.opcode is Opcode.FUSION:
            comp = self.module.computation(inst.attr("calls").name)
            return ElementalEmitter(self.module, comp, readers, buf, self.names, self.constant_ref)
        # A single instruction: its operands are read from their buffers.
        return ElementalEmitter(self.module, self.entry, [], buf, self.names, self.constant_ref,
                                external=dict(zip(inst.operands, readers)))

    def _assemble(self, signature: dict, params) -> str:
        out = IndentedBuffer()
        out.line(f"/* Generated by tfxla-plugin for HLO module {self.module.name}. Do not edit. */")
        out.line(PRELUDE)
        out.splice(self.globals)
        out.line("")
        out.line(f"TFXLA_EXPORT int tfxla_abi_version(void) {{ return {ABI_VERSION}; }}")
        out.line(f"TFXLA_EXPORT const char* tfxla_signature(void) {{ return {json.dumps(json.dumps(signature))}; }}")
        out.line(f"TFXLA_EXPORT int64_t tfxla_scratch_bytes(void) {{ return {self.scratch_bytes}; }}")
        out.line("TFXLA_EXPORT int tfxla_init(void** state, char* err, size_t errlen) "
                 "{ (void)err; (void)errlen; *state = NULL; return 0; }")
        out.line("TFXLA_EXPORT void tfxla_teardown(void* state) { (void)state; }")
        out.line("")
        with out.block("TFXLA_EXPORT int tfxla_run(void* state, const void* const* in, const int64_t* in_dims, "
                       "void* const* out, char* scratch, char* err, size_t errlen)"):
            out.line("(void)state; (void)scratch;")
            pos = 0
            for p in params:
                for d, n in enumerate(p.shape.dims):
                    with out.block(f"if (in_dims[{pos}] != {n})"):
                        out.line(f'snprintf(err, errlen, "input {p.parameter_number} (%%{p.name}): dimension {d} '
                                 f'is %lld, the kernel was compiled for {n}", (long long)in_dims[{pos}]);')
                        out.line("return 1;")
                    pos += 1
            out.line("(void)in_dims;")
            out.splice(self.body)
            out.line("return 0;")
        return out.getvalue()


def generate(module: HloModule, options: CodegenOptions | None = None) -> GeneratedKernel:
    """C source for ``module`` (raises ``CodegenUnsupported`` naming what cannot be emitted)."""
    return ModuleCodegen(module, options).generate()
