"""C code generation for a whole HLO module: one C function per computation, and the kernel ABI.

``ModuleCodegen`` emits the ENTRY computation and every computation it runs at the top level as C
functions (``backends/cpu/computation.py``: each a sequence of loop nests and top-level kernels over
one scratch region), the module's constants as static arrays, and wraps the ENTRY function in the
kernel ABI (``backends/codegen/abi.py``, ``backends/README.md``): ``tfxla_init``/``tfxla_run``/
``tfxla_teardown`` and the signature.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from backends.codegen.abi import PROBING, RUN_PARAMS, emit_exports, emit_run_checks, signature as abi_signature
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.buffer_assignment import loop_state_aliases
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.names import Names
from backends.cpu.complex_c import COMPLEX_C, module_uses_complex
from backends.cpu.computation import Buf, ComputationEmitter, check_array
from backends.cpu.dialect import C
from backends.cpu.prelude import PRELUDE
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode


_runs = [0]  # modules ``generate`` generated in this process (``runs``), under _runs_lock
_runs_lock = threading.Lock()


def runs() -> int:
    """How many modules this process generated C for: what a kernel plan hit saves, counted (tests,
    ``bench/compile_bench.py``), as ``kernel_cache.builds`` counts compiler runs."""
    return _runs[0]


PROBE_SMALL_CONSTANT = 16  # constants of at most this many elements a symbolic probe sets per call (a shape)


@dataclass
class CodegenOptions:
    parallel_threshold: int = 1 << 15  # work per loop nest before its outer loops run on the caller's threads
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


class ModuleCodegen:
    dialect = C  # what the kernels write through (backends/codegen/serial's kernels too)

    def __init__(self, module: HloModule, options: CodegenOptions | None = None):
        self.module = module
        self.options = options or CodegenOptions()
        self.names = Names()
        self.globals = IndentedBuffer()
        self.constants: dict[int, str] = {}
        self.probe_scalars: list[str] = []  # a symbolic probe's small constants, set at the start of tfxla_run
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
        self._loop_aliases: dict[str, frozenset[int]] = {}

    # --- constants --------------------------------------------------------------------
    def constant_ref(self, inst: HloInstruction) -> str:
        key = id(inst)
        if key not in self.constants:
            if inst.literal is None or inst.literal.is_elided:
                raise CodegenUnsupported(f"%{inst.name}: constant elided in the HLO text ({{...}})")
            shape = check_array(inst.shape, f"constant %{inst.name}")
            cname = f"k_{len(self.constants)}"
            values = C.numpy_to_c_array(inst.literal.to_numpy(), shape.dtype) if shape.num_elements else "0"
            if PROBING.get() and 0 < shape.num_elements <= PROBE_SMALL_CONSTANT:  # may hold sizes: set per call
                self.globals.line(f"static __thread {C.storage(shape.dtype)} {cname}[{shape.num_elements}] "
                                  f"__attribute__((aligned(64)));")
                flat = inst.literal.to_numpy().reshape(-1)
                self.probe_scalars.extend(f"{cname}[{i}] = {C.numpy_to_c_array(flat[i:i + 1], shape.dtype)};"
                                          for i in range(shape.num_elements))
            else:
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

    def loop_aliases(self, comp_name: str) -> frozenset[int]:
        """The state elements a while body may update in its parameter's buffers (empty for a computation
        no while runs as its body): ``buffer_assignment.loop_state_aliases``, decided once per body."""
        if comp_name not in self._loop_aliases:
            bodies = {i.attr("body").name for c in self.module.computations for i in c.instructions
                      if i.opcode is Opcode.WHILE}
            for name in bodies:
                self._loop_aliases[name] = loop_state_aliases(self.module, self.module.computation(name))
        return self._loop_aliases.get(comp_name, frozenset())

    # --- functions -------------------------------------------------------------------
    def function_for(self, comp_name: str) -> str:
        if comp_name not in self.functions:
            comp = self.module.computation(comp_name)
            fname = f"comp_{len(self.functions)}"
            emitter = ComputationEmitter(self, comp, fname)
            self.functions[comp_name] = emitter
            emitter.emit([f"r[{k}]" for k in range(len(list(comp.root.shape.leaves())))])
            self.order.append(comp_name)
        return self.functions[comp_name].fname

    def generate(self) -> GeneratedKernel:
        import backends.cpu.kernels  # noqa: F401  (registers the top-level kernels)

        entry = self.module.entry
        for p in entry.parameters:
            check_array(p.shape, f"parameter %{p.name}")
        out_shapes = list(entry.root.shape.leaves())
        for s in out_shapes:
            check_array(s, "an output")
        if module_uses_complex(self.module):
            self.globals.line(COMPLEX_C)  # before any constant: complex literals are CMPLXF(...)
        entry_fn = self.function_for(entry.name)
        # Scratch regions: one per function, laid out in emission order.
        bases, total = {}, 0
        for name in self.order:
            em = self.functions[name]
            bases[em.fname] = total
            total += em.scratch_bytes
        signature = abi_signature(self.module.name, [p.shape for p in entry.parameters], out_shapes, total)
        offsets = {f"{name}/{label}": bases[self.functions[name].fname] + off
                   for name in self.order for label, off in self.functions[name].offsets.items()}
        report = "\n\n".join(
            self.functions[n].arena.report(f"%{n} ({self.functions[n].fname}, arena base {bases[self.functions[n].fname]})")
            for n in self.order)
        return GeneratedKernel(self._assemble(signature, bases, entry_fn), signature, total, offsets,
                               tuple(self.libraries), report, tuple(self.include_dirs), tuple(self.library_dirs))

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
        for name in self.order:
            out.line(self.functions[name].function_text())
        emit_exports(out, signature)
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
        with out.block(f"TFXLA_EXPORT int tfxla_run({RUN_PARAMS})"):
            # "input k" alone: a parameter's name comes from a TF node, and the source is the cache key
            emit_run_checks(out, [(f"input {p.parameter_number}", p.shape.dims) for p in entry.parameters])
            out.lines(self.probe_scalars)
            out.line("tfxla_rt = rt;")
            out.line("tfxla_scratch_base = scratch;")
            out.line("tfxla_st = (tfxla_state*)state;")
            out.line(f"return {entry_fn}((void* const*)in, out, scratch + TFXLA_BASE_{entry_fn}, err, errlen);")
        return out.getvalue()


def generate(module: HloModule, options: CodegenOptions | None = None) -> GeneratedKernel:
    """C source for ``module`` (raises ``CodegenUnsupported`` naming what cannot be emitted).

    Emits exactly what the kernel-shape annotations of the backend's own passes say (``hlo/annotations.py``,
    ``backends/cpu/pipeline.py``) and decides none itself: an output fusion without ``post_ops=`` gets its
    dot or convolution alone from oneDNN and the rest elementally, a reduce without ``column_reduce=`` the
    generic loop. ``backends.cpu.compile`` runs the passes first (``pipeline.prepare``)."""
    with _runs_lock:
        _runs[0] += 1
    return ModuleCodegen(module, options).generate()
