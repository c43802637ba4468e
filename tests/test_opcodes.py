"""The opcode table is complete: every opcode has a text name, a shape rule and an evaluator rule."""

from __future__ import annotations

import pytest

from hlo.evaluator import EVAL_RULES, _load_rules as load_eval_rules
from hlo.opcodes import Opcode
from hlo.shape_inference import SHAPE_RULES, _load_rules as load_shape_rules

# Opcodes the evaluator deliberately refuses, with the reason it gives.
NOT_EVALUATED: dict[Opcode, str] = {}


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
