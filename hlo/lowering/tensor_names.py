"""The one parser of TensorFlow tensor names, for GraphDefs and FunctionDefs alike.

A GraphDef input is ``"node:k"`` (output ``k`` of ``node``), ``"node"`` (output 0) or ``"^node"`` (a
control edge); the canonical spelling of a data input is always ``"node:k"``. A FunctionDef body refers to
``"node:out_arg:i"`` (element ``i`` of output argument ``out_arg``), to an argument by its bare name, or to
``"^node"``. Every pass, the lowering and the API parse names here, once, into a ``TensorRef`` (or a
``FunctionRef``), and never split strings on ``":"`` themselves.

A name that TensorFlow could not have written (an empty or odd-character node name, an output index that is
not a non-negative integer, ``"^"`` on a tensor) raises ``ValueError`` naming the text, so a bad graph fails
where it is read rather than as a missing node later.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, NamedTuple

# TensorFlow's node names (python/framework/ops.py and core/graph: a letter, digit, "." or "_" first; then
# also "-", "/" and ">").
_NODE = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._\-/>]*")
_INDEX = re.compile(r"0|[1-9][0-9]*")


class TensorRef(NamedTuple):
    """One input or fetch: ``node``, its ``output`` index (-1 for a control input) and ``control``."""

    node: str
    output: int
    control: bool = False

    def __str__(self) -> str:
        return f"^{self.node}" if self.control else f"{self.node}:{self.output}"


class FunctionRef(NamedTuple):
    """A FunctionDef reference: ``node:output_arg:element``, an argument (``output_arg`` None) or ``^node``."""

    node: str
    output_arg: str | None = None
    element: int = 0
    control: bool = False

    def __str__(self) -> str:
        if self.control:
            return f"^{self.node}"
        return self.node if self.output_arg is None else f"{self.node}:{self.output_arg}:{self.element}"


def _node(name: str, text: str) -> str:
    if not _NODE.fullmatch(name):
        raise ValueError(f"tensor name {text!r}: {name!r} is not a valid node name")
    return name


def _index(index: str, text: str) -> int:
    if not _INDEX.fullmatch(index):
        raise ValueError(f"tensor name {text!r}: output index {index!r} is not a non-negative integer")
    return int(index)


@lru_cache(maxsize=1 << 16)
def parse_input(text: str) -> TensorRef:
    """``"n:1"`` -> ("n", 1); ``"n"`` -> ("n", 0); ``"^n"`` -> ("n", -1, control=True)."""
    if text.startswith("^"):
        return TensorRef(_node(text[1:], text), -1, True)
    node, sep, index = text.partition(":")
    return TensorRef(_node(node, text), _index(index, text) if sep else 0)


def parse_tensor(text: str) -> TensorRef:
    """A data tensor (``parse_input``); a control input is an error."""
    if text.startswith("^"):
        raise ValueError(f"control input {text!r} is not a tensor")
    return parse_input(text)


def parse_function_ref(text: str) -> FunctionRef:
    """A FunctionDef body reference: ``"n:out:0"``, ``"arg"`` (an argument) or ``"^n"``."""
    if text.startswith("^"):
        return FunctionRef(_node(text[1:], text), control=True)
    parts = text.split(":")
    if len(parts) == 1:
        return FunctionRef(_node(text, text))
    if len(parts) != 3 or not parts[1]:
        raise ValueError(f"function tensor name {text!r} is not 'node:output:index', an argument or '^node'")
    return FunctionRef(_node(parts[0], text), parts[1], _index(parts[2], text))


def node_name(text: str) -> str:
    """The node an input, control input or fetch names."""
    return parse_input(text).node


def is_control(text: str) -> bool:
    return text.startswith("^")


def tensor(node: str, index: int) -> str:
    """The canonical name of output ``index`` of ``node``."""
    return f"{node}:{index}"


def control(node: str) -> str:
    """The control input on ``node``."""
    return f"^{node}"


def canonical(text: str) -> str:
    """The canonical spelling of an input or fetch: ``"n"`` -> ``"n:0"``; ``"^n"`` stays."""
    return str(parse_input(text))


def data_inputs(inputs: Iterable[str]) -> list[str]:
    """The data inputs among ``inputs`` (a NodeDef's ``input``), in order."""
    return [i for i in inputs if not is_control(i)]


def control_inputs(inputs: Iterable[str]) -> list[str]:
    """The control inputs among ``inputs``, in order."""
    return [i for i in inputs if is_control(i)]


def fetch_nodes(fetches: Iterable[str]) -> set[str]:
    """The nodes a list of fetches (tensors or ``^targets``) names."""
    return {node_name(f) for f in fetches}


__all__ = ["FunctionRef", "TensorRef", "canonical", "control", "control_inputs", "data_inputs", "fetch_nodes",
           "is_control", "node_name", "parse_function_ref", "parse_input", "parse_tensor", "tensor"]
