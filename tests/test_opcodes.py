"""The opcode table is complete: every opcode has a text name, a shape rule and an evaluator rule."""

from __future__ import annotations

import pytest

from hlo.evaluator import EVAL_RULES, _load_rules as load_eval_rules
from hlo.opcodes import Group, Opcode
from hlo.shape_inference import SHAPE_RULES, _load_rules as load_shape_rules

# Opcodes the evaluator deliberately refuses, with the reason it gives.
NOT_EVALUATED: dict[Opcode, str] = {
    Opcode.PARAMETER: "bound by the evaluator's driver, not by a rule",
    Opcode.RNG: "stateful random numbers have no reference value",
    Opcode.RNG_GET_AND_UPDATE_STATE: "stateful random numbers have no reference value",
    Opcode.RNG_BIT_GENERATOR: "bit-exact Philox/ThreeFry streams are not implemented (not used by the corpus)",
}


@pytest.mark.parametrize("op", [o for o in NOT_EVALUATED if o is not Opcode.PARAMETER], ids=lambda op: op.text)
def test_unevaluated_opcodes_are_refused_clearly(op: Opcode) -> None:
    import hlo

    shape = "u32[4]{0}" if op is not Opcode.RNG_BIT_GENERATOR else "(u64[2]{0}, u32[4]{0})"
    operands = {Opcode.RNG: "(%a, %b), distribution=rng_uniform", Opcode.RNG_GET_AND_UPDATE_STATE: "()",
                Opcode.RNG_BIT_GENERATOR: "(%s), algorithm=rng_default"}[op]
    text = f"""HloModule m
ENTRY %e () -> {shape.split("{")[0] if op is not Opcode.RNG_BIT_GENERATOR else "(u64[2], u32[4])"} {{
  %a = u32[] constant(0)
  %b = u32[] constant(9)
  %s = u64[2]{{0}} constant({{1, 2}})
  ROOT %r = {shape} {op.text}{operands}
}}"""
    if op is Opcode.RNG_GET_AND_UPDATE_STATE:
        text = text.replace("u32[4]{0}", "u64[2]{0}").replace("u32[4]", "u64[2]")
    module = hlo.parse_module(text)
    with pytest.raises(hlo.HloEvaluationError, match=f"does not support opcode {op.text}"):
        hlo.evaluate(module)


def test_text_names_are_unique_and_parse_back() -> None:
    names = [op.text for op in Opcode]
    assert len(names) == len(set(names))
    for op in Opcode:
        assert Opcode.from_text(op.text) is op


@pytest.mark.parametrize("op", list(Opcode), ids=lambda op: op.text)
def test_every_opcode_has_a_shape_rule(op: Opcode) -> None:
    load_shape_rules()
    assert op in SHAPE_RULES, f"no shape rule for {op.text}"


@pytest.mark.parametrize("op", list(Opcode), ids=lambda op: op.text)
def test_every_opcode_has_an_evaluator_rule(op: Opcode) -> None:
    load_eval_rules()
    assert op in EVAL_RULES or op in NOT_EVALUATED, f"no evaluator rule for {op.text}"


# --- groups -------------------------------------------------------------------------------------
# Each group against the table's columns: a group listed by hand must agree with the flags, arity
# and called computations of its members, so a new opcode cannot join the wrong group silently.


def test_groups_are_frozensets_of_opcodes() -> None:
    groups = Group.all()
    assert {"ELEMENTWISE", "FORWARDING", "VIEW", "MOVEMENT", "REDUCTIONS", "CONTRACTIONS", "CONTROL_FLOW",
            "TRANSCENDENTAL", "RANDOM"} <= set(groups)
    for name, group in groups.items():
        assert group and all(isinstance(op, Opcode) for op in group), name


def test_column_groups_are_the_columns() -> None:
    assert Group.ELEMENTWISE == {op for op in Opcode if op.is_elementwise}
    assert Group.UNARY | Group.BINARY | Group.TERNARY == Group.ELEMENTWISE  # every elementwise op has a fixed arity
    assert Group.COMMUTATIVE <= Group.BINARY
    assert Group.TRANSCENDENTAL <= Group.ELEMENTWISE - Group.COMMUTATIVE
    assert Group.SIDE_EFFECT == {op for op in Opcode if op.has_side_effect}
    assert Group.CALLERS == {op for op in Opcode if op.calls}


def test_data_movement_groups_do_no_arithmetic() -> None:
    assert Group.VIEW <= Group.FORWARDING
    assert Group.VIEW <= Group.MOVEMENT
    for op in Group.FORWARDING | Group.MOVEMENT:
        assert op.arity == 1 and not op.calls and not op.has_side_effect, op.text
    assert not (Group.MOVEMENT & Group.ELEMENTWISE)
    assert Group.FORWARDING - Group.MOVEMENT == {Opcode.COPY}  # the one elementwise forwarder
    assert Opcode.COPY.is_elementwise and not Opcode.COPY.is_transcendental


def test_structural_groups_agree_with_the_table() -> None:
    assert Group.REDUCTIONS <= Group.CALLERS  # each applies a called reducer
    assert all("to_apply" in op.calls or op is Opcode.SELECT_AND_SCATTER for op in Group.REDUCTIONS)
    assert Group.CONTROL_FLOW <= Group.CALLERS
    assert all(op.arity == 2 and not op.calls for op in Group.CONTRACTIONS)
    assert Group.SIDE_EFFECT <= Group.RANDOM
    assert all(op.text.startswith("rng") for op in Group.RANDOM)
    assert all(op.arity == 0 for op in Group.DEVICE_ID)
    assert Opcode.GET_TUPLE_ELEMENT.arity == 1 and Opcode.TUPLE.arity is None


def test_kind_groups_are_disjoint() -> None:
    kinds = [Group.ELEMENTWISE, Group.MOVEMENT, Group.REDUCTIONS, Group.CONTRACTIONS, Group.CONTROL_FLOW,
             Group.TUPLE_PLUMBING, Group.RANDOM, Group.DEVICE_ID]
    seen: set[Opcode] = set()
    for group in kinds:
        assert not (seen & group), sorted(op.text for op in seen & group)
        seen |= group
