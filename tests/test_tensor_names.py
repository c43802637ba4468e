"""The one tensor-name parser (``hlo.lowering.tensor_names``): GraphDef and FunctionDef forms, and the
errors a name TensorFlow could not have written gets."""

from __future__ import annotations

import pytest
import tensorflow as tf

from graph_passes._graph import GraphIndex
from hlo.lowering import LoweringError, lower_graph
from hlo.lowering.tensor_names import (FunctionRef, TensorRef, canonical, control, control_inputs, data_inputs,
                                       fetch_nodes, node_name, parse_function_ref, parse_input, parse_tensor)


@pytest.mark.parametrize("text, ref", [
    ("a", TensorRef("a", 0)),
    ("a:0", TensorRef("a", 0)),
    ("scope/b_1:12", TensorRef("scope/b_1", 12)),
    ("^c", TensorRef("c", -1, True)),
    ("_internal.x-y:3", TensorRef("_internal.x-y", 3)),
    ("while/body/_1>x:1", TensorRef("while/body/_1>x", 1)),
])
def test_graph_names(text: str, ref: TensorRef) -> None:
    assert parse_input(text) == ref
    assert node_name(text) == ref.node
    assert canonical(text) == (f"^{ref.node}" if ref.control else f"{ref.node}:{ref.output}")
    assert canonical(canonical(text)) == canonical(text)


@pytest.mark.parametrize("text, message", [
    ("a:x", "output index 'x' is not a non-negative integer"),
    ("a:-1", "output index '-1' is not a non-negative integer"),
    ("a:01", "output index '01' is not a non-negative integer"),
    ("a:", "output index '' is not a non-negative integer"),
    ("a:1:2", "output index '1:2' is not a non-negative integer"),  # a FunctionDef name in a GraphDef
    ("", "'' is not a valid node name"),
    ("^", "'' is not a valid node name"),
    (":0", "'' is not a valid node name"),
    ("a b:0", "'a b' is not a valid node name"),
    ("^^a", "'^a' is not a valid node name"),
    ("/a", "'/a' is not a valid node name"),
])
def test_bad_graph_names_are_refused_naming_the_text(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_input(text)
    assert str(info.value) == f"tensor name {text!r}: {message}"


def test_a_control_input_is_not_a_tensor() -> None:
    assert parse_tensor("a:1") == TensorRef("a", 1)
    with pytest.raises(ValueError, match=r"control input '\^a' is not a tensor"):
        parse_tensor("^a")


def test_input_lists() -> None:
    inputs = ["a", "^b", "c:2", "^d"]
    assert data_inputs(inputs) == ["a", "c:2"]
    assert control_inputs(inputs) == ["^b", "^d"]
    assert fetch_nodes(["x:1", "^y", "z"]) == {"x", "y", "z"}
    assert control("n") == "^n" and str(TensorRef("n", 2)) == "n:2"


@pytest.mark.parametrize("text, ref", [
    ("mul:z:0", FunctionRef("mul", "z", 0)),
    ("split:output:3", FunctionRef("split", "output", 3)),
    ("x", FunctionRef("x")),  # an argument
    ("^assign", FunctionRef("assign", control=True)),
])
def test_function_refs(text: str, ref: FunctionRef) -> None:
    assert parse_function_ref(text) == ref
    assert str(ref) == text


@pytest.mark.parametrize("text", ["mul:0", "mul::0", "mul:z:x", "a:b:c:0"])
def test_bad_function_refs(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_function_ref(text)
    assert repr(text) in str(info.value)


def _graph_with_input(bad: str):
    gd = tf.compat.v1.GraphDef()
    a = gd.node.add(name="a", op="Const")
    a.attr["dtype"].type = tf.float32.as_datatype_enum
    a.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(1.0))
    n = gd.node.add(name="n", op="Neg", input=[bad])
    n.attr["T"].type = tf.float32.as_datatype_enum
    return gd


def test_graph_index_names_the_node_with_a_bad_input() -> None:
    with pytest.raises(ValueError, match=r"node 'n' has a bad input: tensor name 'a:one': output index 'one'"):
        GraphIndex(_graph_with_input("a:one").node)


def test_lowering_names_the_node_with_a_bad_input() -> None:
    with pytest.raises(LoweringError, match=r"node 'n' \(Neg\): bad input: tensor name 'a:-2': output index '-2'"):
        lower_graph(_graph_with_input("a:-2"), [], ["n:0"])
