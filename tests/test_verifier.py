"""The verifier: well-formed modules pass; each malformation is reported with its computation,
instruction and what was expected.

Modules are written in HLO text where the parser accepts the malformation, and
built from IR objects where the parser itself already refuses it.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from hlo import (
    ComputationBuilder, HloComputation, HloInstruction, HloModule, HloVerifierError, Layout, Literal, Opcode,
    Shape, module_of, scalar,
)

GOOD = """
HloModule good, entry_computation_layout={(f32[4,5]{0,1}, s32[])->(f32[4]{0}, f32[4,5]{1,0})}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%cond (t: (s32[], f32[4,5])) -> pred[] {
  %t = (s32[], f32[4,5]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (t: (s32[], f32[4,5])) -> (s32[], f32[4,5]) {
  %t = (s32[], f32[4,5]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[4,5]{1,0} get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %v2 = f32[4,5]{1,0} add(%v, %v)
  ROOT %r = (s32[], f32[4,5]{1,0}) tuple(%i2, %v2)
}

ENTRY %main (x: f32[4,5], k: s32[]) -> (f32[4], f32[4,5]) {
  %k = s32[] parameter(1)
  %x = f32[4,5]{0,1} parameter(0)
  %zero = f32[] constant(0)
  %sum = f32[4]{0} reduce(f32[4,5]{0,1} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %init = (s32[], f32[4,5]{1,0}) tuple(%k, %x)
  %loop = (s32[], f32[4,5]{1,0}) while(%init), condition=%cond, body=%body
  %out = f32[4,5]{1,0} get-tuple-element(%loop), index=1
  ROOT %res = (f32[4]{0}, f32[4,5]{1,0}) tuple(%sum, %out)
}
"""


def _entry(body: str, params: str = "", header: str = "") -> str:
    return f"HloModule m{header}\n\nENTRY %main ({params}) -> f32[] {{\n{body}\n}}\n"


def _fails(module: HloModule, *fragments: str) -> HloVerifierError:
    with pytest.raises(HloVerifierError) as info:
        hlo.verify(module)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    return info.value


def test_good_module_verifies() -> None:
    module = hlo.parse_module(GOOD)
    assert hlo.verify(module) is None


def test_parameters_may_appear_in_any_order() -> None:
    hlo.verify(hlo.parse_module(GOOD))  # %k (parameter 1) is defined before %x (parameter 0)


# --- shapes -------------------------------------------------------------------------------------------


def test_shape_mismatch_names_instruction_and_both_shapes() -> None:
    text = _entry("  %a = f32[2,3] parameter(0)\n  %b = f32[2,3] parameter(1)\n"
                  "  ROOT %add.3 = f32[3,2] add(f32[2,3] %a, f32[2,3] %b)")
    err = _fails(hlo.parse_module(text))
    assert str(err) == ("in computation %main, instruction %add.3: shape mismatch: inferred f32[2,3] "
                        "from operands, declared f32[3,2]")
    assert (err.computation, err.instruction) == ("main", "add.3")


def test_layouts_are_ignored_when_comparing_shapes() -> None:
    text = _entry("  %a = f32[2,3]{0,1} parameter(0)\n  ROOT %n = f32[2,3]{1,0} negate(%a)")
    hlo.verify(hlo.parse_module(text))


def test_wrong_element_type_is_a_mismatch() -> None:
    text = _entry("  %a = f32[2] parameter(0)\n  ROOT %c = f32[2] compare(%a, %a), direction=LT")
    _fails(hlo.parse_module(text), "instruction %c", "inferred pred[2] from operands, declared f32[2]")


def test_shape_error_becomes_verifier_error_naming_the_instruction() -> None:
    text = _entry("  %a = f32[2,3] parameter(0)\n  %b = f32[4,5] parameter(1)\n"
                  "  ROOT %dot = f32[2,5] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    err = _fails(hlo.parse_module(text), "in computation %main, instruction %dot:",
                 "lhs contracting dim 1 has size 3 but rhs contracting dim 0 has size 4")
    assert isinstance(err.__cause__, hlo.shape_inference.ShapeError)


@pytest.mark.parametrize("line, fragment", [
    ("ROOT %t = f32[3,2] transpose(%a), dimensions={0,0}", "not a permutation"),
    ("ROOT %s = f32[2,2] slice(%a), slice={[0:2], [0:4]}", "out of bounds for size 3"),
    ("ROOT %b = f32[2,3] broadcast(%a), dimensions={0,1,2}", "one output dimension per operand dimension"),
    ("ROOT %r = f32[7] reshape(%a)", "element counts differ"),
    ("ROOT %f = f32[2,3] floor(%i)", "floating point"),
])
def test_bad_attributes_and_dtypes(line: str, fragment: str) -> None:
    text = _entry(f"  %a = f32[2,3] parameter(0)\n  %i = s32[2,3] parameter(1)\n  {line}")
    _fails(hlo.parse_module(text), fragment)


def test_wrong_to_apply_signature() -> None:
    text = """
HloModule m
%add (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}
ENTRY %main (x: f32[4,5]) -> f32[4] {
  %x = f32[4,5] parameter(0)
  %zero = f32[] constant(0)
  ROOT %sum = f32[4] reduce(%x, %zero), dimensions={1}, to_apply=%add
}
"""
    _fails(hlo.parse_module(text), "instruction %sum", "to_apply computation parameter 0 is s32[], but it is "
           "passed f32[]")


# --- structure ----------------------------------------------------------------------------------------


def test_undefined_operand() -> None:
    text = _entry("  %a = f32[] parameter(0)\n  ROOT %n = f32[] negate(%ghost)")
    _fails(hlo.parse_module(text), "instruction %n", "operand %ghost is used before it is defined",
           "nowhere in the computation")


def test_operand_used_before_definition() -> None:
    text = _entry("  %a = f32[] parameter(0)\n  %n = f32[] negate(%m)\n  %m = f32[] negate(%a)\n"
                  "  ROOT %r = f32[] add(%n, %m)")
    _fails(hlo.parse_module(text), "instruction %n", "operand %m is used before it is defined",
           "later in the computation")


def test_operand_from_another_computation_is_undefined() -> None:
    text = """
HloModule m
%callee (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %n = f32[] negate(%outside)
}
ENTRY %main (outside: f32[]) -> f32[] {
  %outside = f32[] parameter(0)
  ROOT %c = f32[] call(%outside), to_apply=%callee
}
"""
    _fails(hlo.parse_module(text), "in computation %callee, instruction %n", "operand %outside")


def test_missing_called_computation() -> None:
    text = _entry("  %a = f32[] parameter(0)\n  ROOT %c = f32[] call(%a), to_apply=%nowhere")
    _fails(hlo.parse_module(text), "instruction %c", "calls computation %nowhere, which is not in the module")


RECURSIVE = """
HloModule m
%f (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %c = f32[] call(%p), to_apply=%g
}
%g (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %c = f32[] call(%p), to_apply=%f
}
ENTRY %main (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %c = f32[] call(%x), to_apply=%f
}
"""


def test_recursion_is_rejected() -> None:
    _fails(hlo.parse_module(RECURSIVE), "recursive call: %f -> %g -> %f")


def test_self_recursion_is_rejected() -> None:
    text = """
HloModule m
%f (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %c = f32[] call(%p), to_apply=%f
}
ENTRY %main (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %c = f32[] call(%x), to_apply=%f
}
"""
    _fails(hlo.parse_module(text), "in computation %f, instruction %c", "recursive call: %f -> %f")


def test_calling_the_entry_is_rejected() -> None:
    text = """
HloModule m
ENTRY %main (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %c = f32[] call(%x), to_apply=%main
}
"""
    _fails(hlo.parse_module(text), "calls the ENTRY computation %main")


def test_duplicate_parameter_numbers() -> None:
    text = _entry("  %a = f32[] parameter(0)\n  %b = f32[] parameter(0)\n  ROOT %s = f32[] add(%a, %b)")
    _fails(hlo.parse_module(text), "instruction %b", "parameter number 0 is used by both %a and %b")


def test_parameter_without_number_is_reported_with_an_entry_layout() -> None:
    """The module's own layout check reads the parameters in number order; one without a number used to
    make that sort raise TypeError before the verifier could name it."""
    a = HloInstruction("a", Opcode.PARAMETER, scalar("f32"), parameter_number=0)
    b = HloInstruction("b", Opcode.PARAMETER, scalar("f32"))
    s = HloInstruction("s", Opcode.ADD, scalar("f32"), ("a", "b"))
    layout = hlo.ProgramShape((scalar("f32"), scalar("f32")), scalar("f32"))
    module = HloModule("m", (HloComputation("main", (a, b, s), "s"),), "main",
                       hlo.Attrs([("entry_computation_layout", layout)]))
    _fails(module, "instruction %b", "parameter has no valid parameter number (None)")


def test_parameter_numbers_must_be_dense() -> None:
    text = _entry("  %a = f32[] parameter(0)\n  %b = f32[] parameter(2)\n  ROOT %s = f32[] add(%a, %b)")
    _fails(hlo.parse_module(text), "in computation %main", "parameter numbers must be 0..1, but 1 is missing")


@pytest.mark.parametrize("line, fragment", [
    ("ROOT %n = f32[] negate(%a, %a)", "negate takes 1 operand(s), but has 2"),
    ("ROOT %s = f32[] add(%a)", "add takes 2 operand(s), but has 1"),
    ("ROOT %s = f32[] select(%a, %a)", "select takes 3 operand(s), but has 2"),
])
def test_operand_arity(line: str, fragment: str) -> None:
    _fails(hlo.parse_module(_entry(f"  %a = f32[] parameter(0)\n  {line}")), fragment)


def test_missing_entry() -> None:
    comp = hlo.parse_module(_entry("  ROOT %a = f32[] parameter(0)")).entry
    _fails(HloModule("m", (comp,), "elsewhere"), "module m has no ENTRY computation %elsewhere")


def test_missing_root() -> None:
    comp = hlo.parse_module(_entry("  ROOT %a = f32[] parameter(0)")).entry
    _fails(HloModule("m", (comp.replace(root_name="gone"),), "main"), "in computation %main",
           "ROOT %gone is not an instruction of the computation")


def test_duplicate_instruction_names() -> None:
    a = HloInstruction("a", Opcode.PARAMETER, scalar("f32"), parameter_number=0)
    n = HloInstruction("a", Opcode.NEGATE, scalar("f32"), ("a",))
    comp = HloComputation("main", (a, n), "a")
    _fails(HloModule("m", (comp,), "main"), "instruction %a", "defined more than once")


def test_duplicate_computation_names() -> None:
    comp = hlo.parse_module(_entry("  ROOT %a = f32[] parameter(0)")).entry
    _fails(HloModule("m", (comp, comp), "main"), "computation %main is defined more than once")


def test_constant_without_literal() -> None:
    c = HloInstruction("c", Opcode.CONSTANT, scalar("f32"))
    _fails(HloModule("m", (HloComputation("main", (c,), "c"),), "main"), "instruction %c",
           "constant is missing its literal")


def test_constant_literal_must_match_declared_shape() -> None:
    lit = Literal.from_array(np.zeros(3, np.float32))
    c = HloInstruction("c", Opcode.CONSTANT, Shape.array("f32", [4]), literal=lit)
    _fails(HloModule("m", (HloComputation("main", (c,), "c"),), "main"), "instruction %c",
           "literal has shape f32[3] but f32[4] is declared")


def test_invalid_layout() -> None:
    bad = Shape(hlo.PrimitiveType.F32, (2, 3), Layout((1, 1)))
    p = HloInstruction("p", Opcode.PARAMETER, bad, parameter_number=0)
    _fails(HloModule("m", (HloComputation("main", (p,), "p"),), "main"), "instruction %p",
           "is not a permutation of its 2 dimensions")


def test_entry_computation_layout_must_match_signature() -> None:
    good = _entry("  ROOT %a = f32[2]{0} parameter(0)", header=", entry_computation_layout={(f32[2]{0})->f32[2]{0}}")
    hlo.verify(hlo.parse_module(good))
    bad = _entry("  ROOT %a = f32[2]{0} parameter(0)", header=", entry_computation_layout={(f32[3]{0})->f32[3]{0}}")
    _fails(hlo.parse_module(bad), "entry_computation_layout parameter 0 is f32[3] but the ENTRY's parameter 0 "
           "is f32[2]")
    count = _entry("  ROOT %a = f32[2]{0} parameter(0)", header=", entry_computation_layout={()->f32[2]{0}}")
    _fails(hlo.parse_module(count), "has 0 parameter(s) but the ENTRY takes 1")


def test_entry_layout_may_differ_in_layout_only() -> None:
    text = _entry("  ROOT %a = f32[2,3]{1,0} parameter(0)",
                  header=", entry_computation_layout={(f32[2,3]{0,1})->f32[2,3]{0,1}}")
    module = hlo.parse_module(text)
    assert "entry_computation_layout" in module.attrs
    hlo.verify(module)


# --- modules from the builder -------------------------------------------------------------------------------


def test_builder_module_verifies() -> None:
    a = ComputationBuilder("max")
    p, q = a.parameter(scalar("f32")), a.parameter(scalar("f32"))
    mx = a.build(a.maximum(p, q))
    b = ComputationBuilder("main")
    x = b.parameter(Shape.array("f32", [1, 4, 6, 2]))
    init = b.constant(-np.inf, "f32")
    window = hlo.Window(tuple(hlo.WindowDim(size=s, stride=s) for s in (1, 2, 2, 1)))
    pooled = b.reduce_window(x, init, window=window, to_apply=mx)
    assert pooled.shape == Shape.array("f32", [1, 2, 3, 2])
    hlo.verify(module_of("pool", b.build(pooled), b))


def test_tampered_builder_module_fails() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(Shape.array("f32", [2, 3]))
    module = module_of("m", b.build(b.exponential(x)))
    comp = module.entry
    root = comp.root.replace(shape=Shape.array("f32", [3, 2]))
    tampered = module.with_computation(comp.replace(instructions=(comp.instructions[0], root)))
    _fails(tampered, "instruction %exponential.1", "inferred f32[2,3] from operands, declared f32[3,2]")


def test_malformed_attribute_value_is_reported_not_raised() -> None:
    text = _entry("  %a = f32[2,3] parameter(0)\n  ROOT %t = f32[3,2] transpose(%a), dimensions={1,0}")
    module = hlo.parse_module(text)
    root = module.entry.root.with_attr("dimensions", hlo.Raw("1x0"))
    broken = module.with_computation(module.entry.replace(instructions=(module.entry.instructions[0], root)))
    _fails(broken, "instruction %t", "malformed attributes")


# --- boundaries: sizes beyond int64, callees named as XLA's grammar names them, constants of token type ------


def test_shape_whose_byte_size_overflows_int64_is_rejected() -> None:
    # XLA's ShapeUtil::ValidateShape: "Shape ... size may overflow int64_t". f32 is 4 bytes, so 2^61 - 1
    # elements (2^63 - 4 bytes) is the largest f32 vector; 2^61 elements is 2^63 bytes, one past int64.
    fits = _entry("  ROOT %p = f32[2305843009213693951]{0} parameter(0)")
    hlo.verify(hlo.parse_module(fits))
    for shape in ("f32[2305843009213693952]{0}", "f32[9223372036854775807,4]{1,0}", "pred[4294967296,4294967296]"):
        _fails(hlo.parse_module(_entry(f"  ROOT %p = {shape} parameter(0)")), "instruction %p",
               f"shape {shape.split('{')[0]} is too large: its byte size overflows int64")


def test_oversized_result_of_a_reshape_is_rejected_not_miscounted() -> None:
    # Element counts were an int64 NumPy product, which wraps: 2^63-1 * 2 read as -2 elements.
    text = _entry("  %a = f32[4,6] parameter(0)\n  ROOT %r = f32[9223372036854775807,2] reshape(%a)")
    err = _fails(hlo.parse_module(text), "instruction %r", "f32[9223372036854775807,2] is too large")
    assert "-2" not in str(err)
    assert Shape.array("f32", [2**62, 4]).num_elements == 2**64


def test_oversized_tuple_element_is_rejected() -> None:
    text = _entry("  ROOT %p = (f32[2], s64[1152921504606846976]) parameter(0)")
    _fails(hlo.parse_module(text), "instruction %p", "s64[1152921504606846976] is too large")


CALLEE = "%f (a: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  ROOT %n = f32[] negate(%a)\n}\n\n"


def test_call_spelled_with_calls_is_rejected() -> None:
    # XLA's parser: kCall takes attrs["to_apply"] (required); calls= is fusion's attribute.
    text = _entry("  %x = f32[] parameter(0)\n  ROOT %c = f32[] call(%x), calls=%f", "x: f32[]").replace(
        "ENTRY", CALLEE + "ENTRY")
    _fails(hlo.parse_module(text), "in computation %main, instruction %c",
           "call names its computation with to_apply=, not calls=")
    hlo.verify(hlo.parse_module(text.replace("calls=%f", "to_apply=%f")))


@pytest.mark.parametrize("line, fragment", [
    ("ROOT %c = f32[] fusion(%x), kind=kLoop, to_apply=%f", "fusion names its computation with calls=, not to_apply="),
    ("ROOT %c = f32[] negate(%x), to_apply=%f", "negate calls no computation, but has to_apply="),
    ("%z = f32[] constant(0)\n  ROOT %c = f32[] reduce(%x, %z), dimensions={}, calls=%f",
     "reduce names its computation with to_apply=, not calls="),
    ("ROOT %c = f32[] call(%x), to_apply=%f, body=%f", "call names its computation with to_apply=, not body="),
])
def test_called_computations_use_the_opcodes_attribute(line: str, fragment: str) -> None:
    text = _entry(f"  %x = f32[] parameter(0)\n  {line}", "x: f32[]").replace("ENTRY", CALLEE + "ENTRY")
    _fails(hlo.parse_module(text), "instruction %c", fragment)


def test_constant_of_token_type_is_rejected() -> None:
    token = Shape(hlo.PrimitiveType.TOKEN)
    c = HloInstruction("c", Opcode.CONSTANT, token, literal=Literal.elided(token))
    _fails(HloModule("m", (HloComputation("main", (c,), "c"),), "main"), "instruction %c",
           "a constant cannot have type token[]")
