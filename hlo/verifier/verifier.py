"""The HLO verifier: ``verify(module)`` raises ``HloVerifierError`` naming the bad instruction.

Checks, in order (each later check may rely on the earlier ones):

1. module: the ENTRY exists; computation names are unique;
2. each computation: its ROOT exists; instruction names are unique; every
   operand is defined earlier in the same computation (text order is the
   evaluation schedule); parameters are numbered 0..n-1, each once; operand
   counts match the opcode table; constants carry a literal; layouts are
   permutations of the dims; every array's byte size fits in int64 (XLA's
   limit); called computations are named by the attributes the opcode
   table lists (``call`` takes ``to_apply=``, ``fusion`` ``calls=``) and exist;
   kernel-shape annotations are well formed (``hlo/verifier/annotations.py``);
3. the call graph is acyclic and nothing calls the ENTRY;
4. every instruction's declared shape is compatible (layouts ignored) with
   the shape its rule infers from the operands' declared shapes;
5. ``entry_computation_layout``, when given, matches the ENTRY's signature.
"""

from __future__ import annotations

from hlo.attributes import InstRef, ProgramShape
from hlo.errors import HloVerifierError
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import CALLED_COMPUTATION_ATTRS, Opcode
from hlo.shape_inference import ShapeContext, ShapeError, infer_shape
from hlo.shapes import Shape, ShapeLike
from hlo.verifier.annotations import check_annotations


def verify(module: HloModule) -> None:
    """Raise ``HloVerifierError`` if ``module`` is not well formed; return None otherwise."""
    _check_module(module)
    for comp in module.computations:
        _check_structure(module, comp)
    _check_call_graph(module)
    signatures = {c.name: c.program_shape for c in module.computations}
    for comp in module.computations:
        _check_shapes(comp, signatures)
    _check_entry_layout(module)


# --- 1. module -----------------------------------------------------------------------


def _check_module(module: HloModule) -> None:
    seen: set[str] = set()
    for comp in module.computations:
        if comp.name in seen:
            raise HloVerifierError(f"computation %{comp.name} is defined more than once")
        seen.add(comp.name)
    if module.entry_name not in seen:
        raise HloVerifierError(f"module {module.name} has no ENTRY computation %{module.entry_name}")


# --- 2. one computation's structure ----------------------------------------------------


def _check_structure(module: HloModule, comp: HloComputation) -> None:
    def error(message: str, inst: HloInstruction | None = None) -> HloVerifierError:
        return HloVerifierError(message, comp.name, inst.name if inst is not None else None)

    if not comp.instructions:
        raise error("computation has no instructions")
    defined: set[str] = set()
    numbers: dict[int, str] = {}
    for inst in comp.instructions:
        if inst.name in defined:
            raise error("instruction name is defined more than once", inst)
        for op in inst.operands:
            if op not in defined:
                where = "later in the computation" if op in comp.by_name else "nowhere in the computation"
                raise error(f"operand %{op} is used before it is defined (it is defined {where})", inst)
        for pred in inst.attrs.get("control-predecessors", ()):
            if isinstance(pred, InstRef) and pred.name not in comp.by_name:
                raise error(f"control predecessor %{pred.name} is not an instruction of the computation", inst)
        defined.add(inst.name)
        _check_instruction(module, inst, numbers, error)
    if comp.root_name not in defined:
        raise error(f"ROOT %{comp.root_name} is not an instruction of the computation")
    missing = sorted(set(range(len(numbers))) - set(numbers))
    if missing:
        raise error(f"parameter numbers must be 0..{len(numbers) - 1}, but {missing[0]} is missing")
    check_annotations(module, comp, error)


def _check_instruction(module: HloModule, inst: HloInstruction, numbers: dict[int, str], error) -> None:
    arity = inst.opcode.arity
    if arity is not None and len(inst.operands) != arity:
        raise error(f"{inst.opcode.text} takes {arity} operand(s), but has {len(inst.operands)}", inst)
    if inst.opcode is Opcode.PARAMETER:
        number = inst.parameter_number
        if number is None or number < 0:
            raise error(f"parameter has no valid parameter number ({number})", inst)
        if number in numbers:
            raise error(f"parameter number {number} is used by both %{numbers[number]} and %{inst.name}", inst)
        numbers[number] = inst.name
    elif inst.parameter_number is not None:
        raise error(f"{inst.opcode.text} carries a parameter number", inst)
    if inst.opcode is Opcode.CONSTANT and inst.literal is None:
        raise error("constant is missing its literal value", inst)
    bad = _bad_layout(inst.shape)
    if bad is not None:
        raise error(f"layout {bad.layout} of {bad} is not a permutation of its {bad.rank} dimensions", inst)
    for leaf in inst.shape.leaves():
        if not leaf.size_fits_int64:
            raise error(f"shape {leaf.short()} is too large: its byte size overflows int64", inst)
    for key in inst.attrs.keys():
        if key in CALLED_COMPUTATION_ATTRS and key not in inst.opcode.calls:
            raise error(_misnamed_callee(inst.opcode, key), inst)
    for callee in inst.called_computations:
        if callee not in module.by_name:
            raise error(f"calls computation %{callee}, which is not in the module", inst)


def _misnamed_callee(opcode: Opcode, key: str) -> str:
    allowed = " or ".join(f"{k}=" for k in opcode.calls)
    if not allowed:
        return f"{opcode.text} calls no computation, but has {key}="
    return f"{opcode.text} names its computation with {allowed}, not {key}= (XLA's grammar)"


def _bad_layout(shape: ShapeLike) -> Shape | None:
    """The first array leaf whose layout is not a permutation of its dims, or None."""
    for leaf in shape.leaves():
        layout = leaf.layout
        if layout is None or leaf.rank == 0:
            continue
        if sorted(layout.minor_to_major) != list(range(leaf.rank)):
            return leaf
    return None


# --- 3. call graph ------------------------------------------------------------------------


def _check_call_graph(module: HloModule) -> None:
    callees = {c.name: [(i.name, n) for i in c.instructions for n in i.called_computations]
               for c in module.computations}
    for caller, calls in callees.items():
        for inst, callee in calls:
            if callee == module.entry_name:
                raise HloVerifierError(f"calls the ENTRY computation %{callee}", caller, inst)
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for inst, callee in callees[name]:
            if state.get(callee) == 1:
                cycle = " -> ".join("%" + n for n in path[path.index(callee):] + [callee])
                raise HloVerifierError(f"recursive call: {cycle}", name, inst)
            if callee not in state:
                visit(callee)
        path.pop()
        state[name] = 2

    for comp in module.computations:
        if comp.name not in state:
            visit(comp.name)


# --- 4. shapes -------------------------------------------------------------------------------


def _check_shapes(comp: HloComputation, signatures: dict[str, ProgramShape]) -> None:
    shapes = {i.name: i.shape for i in comp.instructions}
    for inst in comp.instructions:
        ctx = ShapeContext(inst.opcode, [shapes[o] for o in inst.operands], inst.attrs, declared=inst.shape,
                           called=signatures, parameter_number=inst.parameter_number, literal=inst.literal)
        try:
            inferred = infer_shape(ctx)
        except ShapeError as e:
            raise HloVerifierError(str(e), comp.name, inst.name) from e
        except (TypeError, ValueError, AttributeError, IndexError) as e:  # attributes of the wrong type
            raise HloVerifierError(f"{inst.opcode.text}: malformed attributes ({type(e).__name__}: {e})",
                                   comp.name, inst.name) from e
        if not inferred.compatible(inst.shape):
            raise HloVerifierError(f"shape mismatch: inferred {inferred.short()} from operands, "
                                   f"declared {inst.shape.short()}", comp.name, inst.name)


# --- 5. entry layout ----------------------------------------------------------------------------


def _check_entry_layout(module: HloModule) -> None:
    layout = module.attrs.get("entry_computation_layout")
    if layout is None:
        return
    entry = module.entry
    if not isinstance(layout, ProgramShape):
        raise HloVerifierError(f"entry_computation_layout is not a program shape: {layout}", entry.name)
    own = entry.program_shape
    if len(layout.parameters) != len(own.parameters):
        raise HloVerifierError(f"entry_computation_layout has {len(layout.parameters)} parameter(s) but the "
                               f"ENTRY takes {len(own.parameters)}", entry.name)
    for i, (want, have) in enumerate(zip(layout.parameters, own.parameters)):
        if not want.compatible(have):
            raise HloVerifierError(f"entry_computation_layout parameter {i} is {want.short()} but the ENTRY's "
                                   f"parameter {i} is {have.short()}", entry.name)
        if _bad_layout(want) is not None:
            raise HloVerifierError(f"entry_computation_layout parameter {i} {want} has an invalid layout",
                                   entry.name)
    if not layout.result.compatible(own.result):
        raise HloVerifierError(f"entry_computation_layout result is {layout.result.short()} but the ENTRY "
                               f"returns {own.result.short()}", entry.name)
    if _bad_layout(layout.result) is not None:
        raise HloVerifierError(f"entry_computation_layout result {layout.result} has an invalid layout",
                               entry.name)


__all__ = ["verify"]
