"""The elemental emitter: C-family code computing one element of an instruction at a given index.

``ElementalEmitter.emit(name, idx)`` writes statements into the current
``IndentedBuffer`` and returns a C expression (usually a temporary) holding
the element of instruction ``name`` at multi-index ``idx`` (C expressions of
type int64_t), in the instruction's compute type. Everything target-specific
(type spellings, f16/bf16 rounding, loop pragmas, the backend's name in
messages) is asked of the ``Dialect`` the emitter is given (``dialect.py``),
so the same rules write the CPU backend's C and the CUDA backend's device code.
Parameters of the computation being emitted are supplied by the caller as
functions from an index to an expression, so the same emitter serves fused
computations (parameters read fusion operands' buffers) and scalar
reducer/comparator bodies (parameters are accumulators). Rules live in
``ELEMENTAL`` keyed by opcode; an opcode without a rule is refused with
``CodegenUnsupported``. The rule modules (``elemental_*.py``) are imported at
the end of this one, so the table is complete wherever the emitter is.

Every local the emitter and its sub-emitters declare (``tmp``, ``var``) is recorded in ``declared``
(name -> C type), so a backend that moves a loop into a function of its own can pass the values the loop
reads (``backends/cpu/parallel.py``). A caller that computes one element alone may set
``parallel_reduce`` to a ``ReductionSplitter``: the first reduction of the element whose reducer has a
vector clause is handed to it (``SplitReduction``) to split over threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.dialect import Dialect
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import Index
from backends.codegen.names import Names
from backends.codegen.registry import registrar
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

Value = Union[str, tuple[Any, ...]]  # a C expression, or a tuple of values for a tuple-shaped element
ParamFn = Callable[[Index], Value]


@dataclass(frozen=True)
class SplitReduction:
    """One reduction offered to a ``ReductionSplitter``: ``body`` (written, not yet placed) updates ``acc``
    (compute type ``ctype``) with reducer computation ``reducer`` (one binary ``op``) inside the loops
    ``bounds`` ((var, size), outermost first); ``simd`` is the line for the innermost loop; ``mark`` the
    names counter before the body was written (names after it are the body's own)."""

    bounds: tuple[tuple[str, int], ...]
    body: IndentedBuffer
    simd: str | None
    acc: str
    ctype: str
    op: Opcode
    reducer: str
    mark: int


# Writes the split reduction into ``em.buf`` and returns True, or returns False having written nothing.
ReductionSplitter = Callable[["ElementalEmitter", SplitReduction], bool]


class ElementalEmitter:
    def __init__(self, dialect: Dialect, module: HloModule, comp: HloComputation, params: Sequence[ParamFn],
                 buf: IndentedBuffer, names: Names, constant_ref: Callable[[HloInstruction], str],
                 external: dict[str, ParamFn] | None = None, declared: dict[str, str] | None = None) -> None:
        self.dialect = dialect
        self.module = module
        self.external = external or {}  # instructions of ``comp`` whose values are read, not computed
        self.comp = comp
        self.params = list(params)
        self.buf = buf
        self.names = names
        self.constant_ref = constant_ref  # name of the C array holding a non-scalar constant
        self._memo: list[dict[tuple[str, Index], Value]] = [{}]
        self.index_checked: frozenset[str] = frozenset()  # gathers whose index_check the caller emitted
        self.declared: dict[str, str] = {} if declared is None else declared  # local name -> C type
        # Set by a caller that runs this one element alone: a reduction may then be split over threads;
        # cleared once one reduction was offered.
        self.parallel_reduce: Optional[ReductionSplitter] = None

    # --- scoping: values computed inside a nested loop are not visible after it -------
    def push(self) -> None:
        self._memo.append({})

    def pop(self) -> None:
        self._memo.pop()

    def _lookup(self, key: tuple[str, Index]) -> Value | None:
        for scope in reversed(self._memo):
            if key in scope:
                return scope[key]
        return None

    def tmp(self, ctype: str, expr: str, base: str = "v") -> str:
        name = self.names.fresh(base)
        self.buf.line(f"const {ctype} {name} = {expr};")
        self.declared[name] = ctype
        return name

    def shared_index(self, expr: str) -> str:
        """``expr`` (an index) as text to write more than once: itself when it is a name or a literal, else
        an ``int64_t`` temporary, one per text and scope. Text written twice doubles at every level of a
        nest (a concatenate of a concatenate of ...: DenseNet121's fused concatenates made 2.2 GB of C);
        the ``(void)`` use keeps ``nvcc -Werror`` quiet where the operand ignores the dim (a broadcast)."""
        if expr.isidentifier() or expr.lstrip("-").isdigit():
            return expr
        key = ("#index", (expr,))
        name = self._lookup(key)
        if name is None:
            name = self.tmp("int64_t", expr, "c")
            self.buf.line(f"(void){name};")
            self._memo[-1][key] = name
        assert isinstance(name, str)
        return name

    def result(self, inst: HloInstruction, expr: str) -> str:
        """A temporary holding ``expr`` as ``inst``'s element; f16/bf16 results are rounded to their
        type here (``Dialect.round_result``), as XLA:CPU rounds after every f16/bf16 operation."""
        t = array_shape(inst).dtype
        return self.tmp(self.dialect.compute(t), self.dialect.round_result(t, expr))

    def var(self, ctype: str, init: str, base: str = "a") -> str:
        name = self.names.fresh(base)
        self.buf.line(f"{ctype} {name} = {init};")
        self.declared[name] = ctype
        return name

    # --- the entry point -----------------------------------------------------------
    def emit(self, name: str, idx: Index) -> Any:
        key = (name, idx)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        inst = self.comp[name]
        if name in self.external:
            value = self._materialize(inst, self.external[name](idx))
        elif inst.opcode is Opcode.PARAMETER:
            assert inst.parameter_number is not None  # (the parser and the verifier ensure it)
            value = self._materialize(inst, self.params[inst.parameter_number](idx))
        else:
            rule = ELEMENTAL.get(inst.opcode)
            if rule is None:
                raise CodegenUnsupported(f"%{inst.name}: the {self.dialect.backend} backend cannot emit "
                                         f"{inst.opcode.text} inside a loop (no elemental rule)")
            value = rule(self, inst, idx)
        self._memo[-1][key] = value
        return value

    def _materialize(self, inst: HloInstruction, value: Value) -> Value:
        """Loads become statements of their own. Besides readability, this avoids a GCC 12.2
        miscompilation: a load inside ``c ? a[i] : b[i]`` in a vectorized 2-D loop nest (masked
        loads after if-conversion) returned 0 for some lanes."""
        if isinstance(value, tuple) and isinstance(inst.shape, TupleShape):
            return tuple(self._materialize_leaf(s, v) for s, v in zip(inst.shape.elements, value))
        return self._materialize_leaf(inst.shape, value)

    def _materialize_leaf(self, shape: ShapeLike, value: Value) -> Value:
        if isinstance(shape, Shape) and isinstance(value, str) and "[" in value:
            return self.tmp(self.dialect.compute(shape.dtype), value, "x")
        return value

    def operand(self, inst: HloInstruction, i: int, idx: Index) -> Any:
        return self.emit(inst.operands[i], idx)

    def operand_shape(self, inst: HloInstruction, i: int) -> Any:
        return self.comp[inst.operands[i]].shape

    def ctype_of(self, inst: HloInstruction) -> str:
        """The compute type of an array-shaped instruction's element."""
        return self.dialect.compute(array_shape(inst).dtype)

    # --- called scalar computations (reducers, comparators, map bodies) ---------------
    def sub(self, comp: HloComputation, params: Sequence[ParamFn]) -> "ElementalEmitter":
        """An emitter over ``comp`` (a called or fused computation) writing into the same function."""
        return ElementalEmitter(self.dialect, self.module, comp, params, self.buf, self.names, self.constant_ref,
                                declared=self.declared)

    def call_scalar(self, comp_name: str, args: Sequence[Value]) -> Any:
        """Inline computation ``comp_name`` on scalar argument expressions; returns its root's expression."""
        comp = self.module.computation(comp_name)
        return self.sub(comp, [constant_param(a) for a in args]).emit(comp.root_name, ())


def constant_param(value: Value) -> ParamFn:
    """A parameter function that is ``value`` at every index (a scalar argument)."""
    return lambda _idx: value


def array_shape(inst: HloInstruction) -> Shape:
    if not isinstance(inst.shape, Shape):
        raise CodegenUnsupported(f"%{inst.name}: tuple-shaped {inst.opcode.text} has no element type")
    return inst.shape


def leaf_shapes(inst: HloInstruction) -> tuple[Shape, ...]:
    """The array shapes of an instruction's results: its shape, or the elements of its flat tuple."""
    elements = inst.shape.elements if isinstance(inst.shape, TupleShape) else (inst.shape,)
    if not all(isinstance(s, Shape) for s in elements):
        raise CodegenUnsupported(f"%{inst.name}: nested tuple results of {inst.opcode.text}")
    return tuple(s for s in elements if isinstance(s, Shape))


ElementalRule = Callable[[ElementalEmitter, HloInstruction, Index], Value]
ELEMENTAL: dict[Opcode, ElementalRule] = {}


elemental = registrar(ELEMENTAL)  # @elemental(Opcode.ADD, ...) registers a rule


# The rule modules register themselves in ELEMENTAL when imported (each imports this module first).
from backends.codegen import elemental_data, elemental_math, elemental_misc, elemental_window  # noqa: E402,F401
