"""The NumPy reference evaluator: ``evaluate(module, *args) -> list[np.ndarray]``.

One rule per opcode (``@eval_rule(Opcode.X)``) computes an instruction's value
from its operands' values with XLA's semantics. Array values are NumPy arrays
of the shape's dtype and dims; tuple values are Python tuples. This is the
spec the backends are tested against, so rules favour clarity over speed.
"""

from __future__ import annotations


from typing import Any, Callable

import numpy as np

from hlo.errors import HloEvaluationError
from hlo.rule_modules import RuleModule
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape

Value = Any  # np.ndarray or tuple of Values


class Evaluator:
    """Evaluates computations of one module; rules call back into it for called computations."""

    def __init__(self, module: HloModule):
        self.module = module

    def call(self, name: str, args: list[Value], batch: tuple[int, ...] = ()) -> Value:
        """Evaluate computation ``name``. With ``batch``, every value carries those leading dims:
        a scalar computation (reducer, combiner, comparator) applied elementwise to whole arrays."""
        return self.run(self.module.computation(name), args, batch)

    def run(self, comp: HloComputation, args: list[Value], batch: tuple[int, ...] = ()) -> Value:
        values: dict[str, Value] = {}
        for inst in comp.instructions:  # text order is a valid schedule (the verifier checks it)
            if inst.opcode is Opcode.PARAMETER:
                values[inst.name] = args[inst.parameter_index]
                continue
            rule = EVAL_RULES.get(inst.opcode)
            if rule is None:
                raise HloEvaluationError(f"%{inst.name}: the evaluator does not support opcode {inst.opcode.text}")
            try:
                out = rule(self, inst, [values[o] for o in inst.operands])
            except HloEvaluationError:
                raise
            except (ValueError, TypeError, IndexError, KeyError, ArithmeticError) as e:
                raise HloEvaluationError(f"%{inst.name} ({inst.opcode.text}): {type(e).__name__}: {e}") from e
            values[inst.name] = conform(out, inst.shape, batch)
        return values[comp.root_name]


EvalRule = Callable[[Evaluator, HloInstruction, list], Value]
EVAL_RULES: dict[Opcode, EvalRule] = {}


def eval_rule(*opcodes: Opcode):
    def register(fn: EvalRule) -> EvalRule:
        for op in opcodes:
            if op in EVAL_RULES:
                raise ValueError(f"duplicate evaluator rule for {op.text}")
            EVAL_RULES[op] = fn
        return fn
    return register


def conform(value: Value, shape: ShapeLike, batch: tuple[int, ...] = ()) -> Value:
    """Cast a rule's result to the instruction's dtype and check its dims (``batch`` + the shape's;
    under a batch, a result that broadcasts to them, such as a scalar constant, is broadcast)."""
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            raise HloEvaluationError(f"expected a tuple of {len(shape.elements)} values")
        return tuple(conform(v, s, batch) for v, s in zip(value, shape.elements))
    arr = np.asarray(value)
    if shape.dtype.is_array_type and arr.dtype != shape.dtype.numpy:
        arr = arr.astype(shape.dtype.numpy)
    dims = tuple(batch) + shape.dims
    if shape.dtype.is_array_type and arr.shape != dims:
        if not batch or arr.ndim > len(dims) or arr.shape[arr.ndim - shape.rank:] != shape.dims:
            raise HloEvaluationError(f"rule produced dims {arr.shape}, expected {dims}")
        try:
            arr = np.broadcast_to(arr, dims)
        except ValueError:
            raise HloEvaluationError(f"rule produced dims {arr.shape}, expected {dims}") from None
    return arr


def _check_arg(i: int, arg, shape: ShapeLike):
    if isinstance(shape, TupleShape):
        if not isinstance(arg, (tuple, list)) or len(arg) != len(shape.elements):
            raise HloEvaluationError(f"argument {i}: expected a tuple of {len(shape.elements)} values for {shape}")
        return tuple(_check_arg(i, a, s) for a, s in zip(arg, shape.elements))
    if not shape.dtype.is_array_type:  # a token carries no data; any value stands for it
        return arg
    arr = np.asarray(arg)
    if arr.dtype != shape.dtype.numpy:
        raise HloEvaluationError(f"argument {i}: expected dtype {shape.dtype.value} ({shape.dtype.numpy}), got {arr.dtype}")
    if arr.shape != shape.dims:
        raise HloEvaluationError(f"argument {i}: expected dims {list(shape.dims)} ({shape}), got {list(arr.shape)}")
    return arr


def _flatten(value: Value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def evaluate(module: HloModule, *args, verify: bool = True) -> list[np.ndarray]:
    """Run the ENTRY computation on NumPy arrays; a tuple result is flattened in order."""
    from hlo.verifier import verify as verify_module

    _load_rules()
    if verify:
        verify_module(module)
    params = module.entry.parameters
    if len(args) != len(params):
        raise HloEvaluationError(f"{module.name} takes {len(params)} argument(s), got {len(args)}")
    checked = [_check_arg(i, a, p.shape) for i, (a, p) in enumerate(zip(args, params))]
    return _flatten(Evaluator(module).run(module.entry, checked))


_load_rules = RuleModule("hlo.evaluator.rules")  # imports the module that registers every rule, on first use


__all__ = ["evaluate", "Evaluator", "eval_rule", "EVAL_RULES", "conform", "Shape"]
