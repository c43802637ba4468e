"""Errors of TF -> HLO lowering; each names the node, its op type and, where known, the Python line."""

from __future__ import annotations

from hlo.errors import HloError


class LoweringError(HloError):
    """A node that cannot be lowered as given (malformed graph, non-constant shape input, bad attrs)."""

    def __init__(self, message: str, node: str | None = None, op_type: str | None = None,
                 source: tuple[str, int] | None = None):
        where = ""
        if node is not None:
            where = f"node '{node}'" + (f" ({op_type})" if op_type else "")
            if source is not None:
                where += f" created at {source[0]}:{source[1]}"
            where += ": "
        super().__init__(where + message)
        self.node = node
        self.op_type = op_type
        self.source = source


class UnsupportedOpError(LoweringError):
    """An op type, or a dtype of a known op, that tfxla-plugin cannot compile."""

    def __init__(self, message: str, node: str | None = None, op_type: str | None = None,
                 dtype: str | None = None, source: tuple[str, int] | None = None):
        super().__init__(message, node, op_type, source)
        self.dtype = dtype


class InvalidArgumentLoweringError(LoweringError):
    """Inputs the op rejects, as TF's kernel would at run time with ``InvalidArgumentError`` (an empty
    ArgMax axis, MirrorPad paddings past the dimension): shapes are static here, so we know while
    compiling. ``compile_cluster`` raises it to the caller as ``tf.errors.InvalidArgumentError``."""
