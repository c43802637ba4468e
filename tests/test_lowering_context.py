"""The typed attribute accessors of ``LoweringContext``: defaults, list attributes, and errors that name
the node when an attribute is missing or of another kind (hand-written NodeDefs, lowered and evaluated)."""

from __future__ import annotations

import numpy as np
import pytest
from tensorflow.core.framework import attr_value_pb2, node_def_pb2, types_pb2

import hlo
from hlo.lowering import InputSpec, LoweringError, lower_graph

X = np.arange(6, dtype=np.float32).reshape(2, 1, 3)


def _node(name: str, op: str, inputs: list[str], **attrs: attr_value_pb2.AttrValue) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op=op, input=inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _float() -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=types_pb2.DT_FLOAT)


def _lower(node: node_def_pb2.NodeDef) -> list[np.ndarray]:
    x = _node("x", "Placeholder", [], dtype=_float())
    module = lower_graph([x, node], [InputSpec("x:0", types_pb2.DT_FLOAT, X.shape)], [f"{node.name}:0"])
    return hlo.evaluate(module, X)


def test_int_attribute_default_and_value() -> None:
    pack = _node("pack", "Pack", ["x", "x"], T=_float(), N=attr_value_pb2.AttrValue(i=2))
    np.testing.assert_array_equal(_lower(pack)[0], np.stack([X, X], axis=0))  # axis defaults to 0
    pack.attr["axis"].CopyFrom(attr_value_pb2.AttrValue(i=-1))
    np.testing.assert_array_equal(_lower(pack)[0], np.stack([X, X], axis=-1))


def test_list_of_ints_attribute() -> None:
    squeeze = _node("sq", "Squeeze", ["x"], T=_float(),
                    squeeze_dims=attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(i=[1])))
    np.testing.assert_array_equal(_lower(squeeze)[0], X.reshape(2, 3))


def test_attribute_of_another_kind_names_node_and_kind() -> None:
    pack = _node("pack", "Pack", ["x", "x"], T=_float(), N=attr_value_pb2.AttrValue(i=2),
                 axis=attr_value_pb2.AttrValue(s=b"0"))
    with pytest.raises(LoweringError, match=r"node 'pack' \(Pack\): attribute 'axis' is not an int "
                                            r"\(it holds s\)"):
        _lower(pack)


def test_missing_attribute_without_default_names_node() -> None:
    unpack = _node("unpack", "Unpack", ["x"], T=_float())
    with pytest.raises(LoweringError, match=r"node 'unpack' \(Unpack\): missing attribute 'num'"):
        _lower(unpack)
