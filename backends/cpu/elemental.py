"""The elemental emitter: C code computing one element of an instruction at a given index.

``ElementalEmitter.emit(name, idx)`` writes statements into the current
``IndentedBuffer`` and returns a C expression (usually a temporary) holding
the element of instruction ``name`` at multi-index ``idx`` (C expressions of
type int64_t), in the instruction's compute type (see ``ctypes_c``).
Parameters of the computation being emitted are supplied by the caller as
functions from an index to an expression, so the same emitter serves fused
computations (parameters read fusion operands' buffers) and scalar
reducer/comparator bodies (parameters are accumulators). Rules live in
``ELEMENTAL`` keyed by opcode; an opcode without a rule is refused with
``CodegenUnsupported``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from backends.codegen.buffer import IndentedBuffer
from backends.cpu import ctypes_c as C
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape

Index = tuple[str, ...]
ParamFn = Callable[[Index], "str | tuple"]


class CodegenUnsupported(NotImplementedError):
    """An instruction the CPU backend cannot generate code for (with the reason)."""


class Names:
    """Deterministic temporary names for one generated function."""

    def __init__(self) -> None:
        self.counter = 0

    def fresh(self, base: str = "t") -> str:
        self.counter += 1
        return f"{base}{self.counter}"


class ElementalEmitter:
    def __init__(self, module: HloModule, comp: HloComputation, params: Sequence[ParamFn],
                 buf: IndentedBuffer, names: Names, constant_ref: Callable[[HloInstruction], str],
                 external: dict[str, ParamFn] | None = None):
        self.module = module
        self.external = external or {}  # instructions of ``comp`` whose values are read, not computed
        self.comp = comp
        self.params = list(params)
        self.buf = buf
        self.names = names
        self.constant_ref = constant_ref  # name of the C array holding a non-scalar constant
        self._memo: list[dict] = [{}]
        self.index_checked: frozenset[str] = frozenset()  # gathers whose index_check the caller emitted

    # --- scoping: values computed inside a nested loop are not visible after it -------
    def push(self) -> None:
        self._memo.append({})

    def pop(self) -> None:
        self._memo.pop()

    def _lookup(self, key):
        for scope in reversed(self._memo):
            if key in scope:
                return scope[key]
        return None

    def tmp(self, ctype: str, expr: str, base: str = "v") -> str:
        name = self.names.fresh(base)
        self.buf.line(f"const {ctype} {name} = {expr};")
        return name

    def result(self, inst: HloInstruction, expr: str) -> str:
        """A temporary holding ``expr`` as ``inst``'s element; f16/bf16 results are rounded to their
        type here, as XLA:CPU rounds after every f16/bf16 operation it computes in f32."""
        t = inst.shape.dtype
        if t is PrimitiveType.BF16:
            expr = f"tfxla_bf16_to_f32(tfxla_f32_to_bf16({expr}))"
        elif t is PrimitiveType.F16:
            expr = f"(float)(_Float16)({expr})"
        return self.tmp(C.compute(t), expr)

    def var(self, ctype: str, init: str, base: str = "a") -> str:
        name = self.names.fresh(base)
        self.buf.line(f"{ctype} {name} = {init};")
        return name

    # --- the entry point -----------------------------------------------------------
    def emit(self, name: str, idx: Index):
        key = (name, idx)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        inst = self.comp[name]
        if name in self.external:
            value = self._materialize(inst, self.external[name](idx))
        elif inst.opcode is Opcode.PARAMETER:
            value = self._materialize(inst, self.params[inst.parameter_number](idx))
        else:
            rule = ELEMENTAL.get(inst.opcode)
            if rule is None:
                raise CodegenUnsupported(f"%{inst.name}: the CPU backend cannot emit {inst.opcode.text} "
                                         f"inside a loop (no elemental rule)")
            value = rule(self, inst, idx)
        self._memo[-1][key] = value
        return value

    def _materialize(self, inst: HloInstruction, value):
        """Loads become statements of their own. Besides readability, this avoids a GCC 12.2
        miscompilation: a load inside ``c ? a[i] : b[i]`` in a vectorized 2-D loop nest (masked
        loads after if-conversion) returned 0 for some lanes."""
        if isinstance(value, tuple):
            return tuple(self._materialize_leaf(s, v) for s, v in zip(inst.shape.elements, value))
        return self._materialize_leaf(inst.shape, value)

    def _materialize_leaf(self, shape, value: str) -> str:
        if isinstance(shape, Shape) and "[" in value:
            return self.tmp(C.compute(shape.dtype), value, "x")
        return value

    def operand(self, inst: HloInstruction, i: int, idx: Index):
        return self.emit(inst.operands[i], idx)

    def operand_shape(self, inst: HloInstruction, i: int):
        return self.comp[inst.operands[i]].shape

    # --- called scalar computations (reducers, comparators, map bodies) ---------------
    def call_scalar(self, comp_name: str, args: Sequence[str | tuple]):
        """Inline computation ``comp_name`` on scalar argument expressions; returns its root's expression."""
        comp = self.module.computation(comp_name)
        sub = ElementalEmitter(self.module, comp, [(lambda _idx, a=a: a) for a in args], self.buf, self.names,
                               self.constant_ref)
        return sub.emit(comp.root_name, ())


ElementalRule = Callable[[ElementalEmitter, HloInstruction, Index], "str | tuple"]
ELEMENTAL: dict[Opcode, ElementalRule] = {}


def elemental(*opcodes: Opcode):
    def register(fn: ElementalRule) -> ElementalRule:
        for op in opcodes:
            ELEMENTAL[op] = fn
        return fn
    return register


def ctype_of(inst: HloInstruction) -> str:
    if not isinstance(inst.shape, Shape):
        raise CodegenUnsupported(f"%{inst.name}: tuple-shaped {inst.opcode.text} has no element type")
    return C.compute(inst.shape.dtype)


def linear_index(shape: Shape, idx: Index) -> str:
    """Offset of ``idx`` in a buffer of ``shape`` (honouring its layout; row-major if none)."""
    if not shape.dims:
        return "0"
    order = shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major \
        else tuple(range(len(shape.dims) - 1, -1, -1))
    terms = []
    stride = 1
    for d in order:
        if shape.dims[d] != 1:
            e = idx[d] if " " not in idx[d] or _enclosed(idx[d]) else f"({idx[d]})"  # "a + b" * s needs parentheses
            terms.append(e if stride == 1 else f"{e} * {stride}")
        stride *= shape.dims[d]
    return " + ".join(f"({t})" if " " in t else t for t in terms) or "0"


def _enclosed(expr: str) -> bool:
    """Whether ``expr`` is one parenthesized group, e.g. ``(a + b)`` but not ``(a) + (b)``."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return False
    depth = 0
    for k, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(expr) - 1:
            return False
    return True


def delinearize(offset: str, shape: Shape) -> Index:
    """The multi-index of linear ``offset`` in ``shape`` (layout-aware), as C expressions."""
    if not shape.dims:
        return ()
    order = shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major \
        else tuple(range(len(shape.dims) - 1, -1, -1))
    idx: list[str] = ["0"] * len(shape.dims)
    stride = 1
    for d in order:
        n = shape.dims[d]
        if n != 1:
            idx[d] = f"(({offset}) / {stride}) % {n}" if stride != 1 else f"({offset}) % {n}"
        stride *= n
    return tuple(idx)
