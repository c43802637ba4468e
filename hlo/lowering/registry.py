"""The lowering registry: one rule per TF op type, and the "can this node be lowered?" question.

    @register_lowering("Relu", dtypes=NUMERIC)
    def relu(ctx: LoweringContext) -> Value:
        (x,) = ctx.inputs
        return ctx.b.maximum(x, ctx.full(0, x))

A rule is a ``Rule``: it receives the typed ``LoweringContext`` (hlo/lowering/context.py) and
returns its node's output, or one value per output. It declares the dtypes it supports (checked on its type attributes,
``T`` by default) and which inputs must be compile-time constants. Clustering
asks ``can_lower`` so that it and the lowering cannot drift apart.
"""

from __future__ import annotations


from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from hlo.dtypes import PrimitiveType
from hlo.lowering import tf_types
from hlo.lowering.tensor_names import data_inputs
from hlo.rule_modules import RuleModule

if TYPE_CHECKING:
    from hlo.lowering.context import LoweringContext, NodeDefLike, RuleResult

# A lowering rule: the node's context in, its output value(s) out.
Rule = Callable[["LoweringContext"], "RuleResult"]
_R = TypeVar("_R", bound=Rule)

# Op types that are never compiled, with the reason clustering reports.
NEVER_COMPILED: dict[str, str] = {
    "RandomUniform": "stateful random op: results depend on hidden RNG state, so it stays in TensorFlow",
    "RandomStandardNormal": "stateful random op: results depend on hidden RNG state, so it stays in TensorFlow",
    "TruncatedNormal": "stateful random op: results depend on hidden RNG state, so it stays in TensorFlow",
    "RandomUniformInt": "stateful random op: results depend on hidden RNG state, so it stays in TensorFlow",
    "Print": "side effect (printing) must happen in TensorFlow",
    "PrintV2": "side effect (printing) must happen in TensorFlow",
    "Assert": "side effect (assertion) must happen in TensorFlow",
    "VarHandleOp": "resource handles stay in TensorFlow",
    "ReadVariableOp": "variable reads stay in TensorFlow (their values become cluster inputs)",
    "AssignVariableOp": "variable writes stay in TensorFlow (new values become cluster outputs)",
    "AssignAddVariableOp": "variable writes stay in TensorFlow (new values become cluster outputs)",
    "AssignSubVariableOp": "variable writes stay in TensorFlow (new values become cluster outputs)",
    "Placeholder": "graph inputs are cluster inputs",
    "NoOp": "control-only node",
}


@dataclass(frozen=True)
class LoweringRule:
    op_type: str
    fn: Rule
    dtypes: frozenset[PrimitiveType] | None
    type_attrs: tuple[str, ...]
    const_inputs: tuple[int, ...]
    lists: bool = False  # the rule takes and returns TensorLists (variant tensors; hlo/lowering/lists.py)


LOWERINGS: dict[str, LoweringRule] = {}


def register_lowering(*op_types: str, dtypes: frozenset[PrimitiveType] | None = None,
                      type_attrs: Sequence[str] = ("T",),
                      const_inputs: Sequence[int] = (), lists: bool = False) -> Callable[[_R], _R]:
    """Register ``fn`` as the lowering of each op type.

    ``dtypes``: element types accepted for every attribute in ``type_attrs`` (None: any the rule handles).
    ``const_inputs``: indices of inputs whose values must be known at compile time (negative: counted
    from the last data input, as for ConcatV2's trailing axis); ``lists``: the rule handles TensorLists
    (``hlo/lowering/lists.py``), so a variant among its types is accepted.
    """
    def register(fn: _R) -> _R:
        for op in op_types:
            if op in LOWERINGS:
                raise ValueError(f"duplicate lowering for {op}")
            LOWERINGS[op] = LoweringRule(op, fn, frozenset(dtypes) if dtypes is not None else None,
                                         tuple(type_attrs), tuple(const_inputs), lists)
        return fn
    return register


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    dtype: str | None = None

    def __bool__(self) -> bool:
        return self.ok


def rule_for(op_type: str) -> LoweringRule | None:
    load_rules()
    return LOWERINGS.get(op_type)


def can_lower(node: NodeDefLike, input_dtypes: Sequence[int] | None = None,
              is_constant: Callable[[int], bool] | None = None) -> Verdict:
    """Whether ``node`` (a NodeDef) can be lowered, with the reason when it cannot.

    ``input_dtypes``: TF DataType enums of its inputs, when known; ``is_constant(i)``: whether input
    ``i`` can be computed at compile time (only asked for inputs the rule needs constant).
    """
    load_rules()
    op = node.op
    if op in NEVER_COMPILED:
        return Verdict(False, NEVER_COMPILED[op])
    rule = LOWERINGS.get(op)
    if rule is None:
        return Verdict(False, f"no lowering registered for op type {op}")
    if rule.dtypes is not None:
        checked = [t for a in rule.type_attrs if a in node.attr  # a type attr, or a list of types (Tin, Tout)
                   for t in (node.attr[a].list.type or [node.attr[a].type]) if t]
        if not checked and input_dtypes:
            checked = list(input_dtypes)
        if rule.lists:
            checked = [t for t in checked if t != tf_types.DT_VARIANT]
        for dt in checked:
            name = tf_types.tf_name(dt)
            try:
                hlo_type = tf_types.to_hlo(dt)
            except TypeError:
                return Verdict(False, f"{op} does not support dtype {name}", name)
            if hlo_type not in rule.dtypes:
                return Verdict(False, f"{op} does not support dtype {name}", name)
    if is_constant is not None:
        n_data = len(data_inputs(node.input))
        for i in rule.const_inputs:
            i = i + n_data if i < 0 else i
            if 0 <= i < n_data and not is_constant(i):
                return Verdict(False, f"input {i} of {op} must be a compile-time constant")
    return Verdict(True)


def supported_ops() -> dict[str, LoweringRule]:
    load_rules()
    return dict(sorted(LOWERINGS.items()))


load_rules = RuleModule("hlo.lowering.ops")  # imports the module that registers every rule, on first use
