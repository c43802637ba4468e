"""What a caller's graph knows about the functions it calls, carried to their bodies: variable shapes,
and whether the function asked for ``jit_compile=True``.

A function TF instantiates from the top (called eagerly) gets ``_handle_shapes``/``_handle_dtypes`` on
its resource ``_Arg``s, so the hook knows what every ``ReadVariableOp`` yields. A function called from
another one and not inlined by Grappler (a ``jit_compile=True`` function released from XLA, a
``_noinline`` one) gets bare resource ``_Arg``s: its variable reads have unknown shapes and nothing on
them would compile. The caller's graph knows them, though: the hook sees it first, with the callee as
a signature in its library (``graph_passes._graph.is_stub``).

Likewise only the call node says that the callee asked for XLA (``_XlaMustCompile``, which the hook
turns off: ``body.release_from_xla``); under ``enable(jit_compile=True)`` such a body is must-compile.

``note(graph_def, jit_calls)`` records, for each call of a stub, the callee's signature, the handle
attrs of its resource inputs that come from ``_Arg``s with them (or ``VarHandleOp``s), and whether the
call is one of ``jit_calls``. ``lookup`` finds the note of a body whose ``_Arg`` names and dtypes and
``_Retval`` dtypes are exactly that signature's, and ``with_handles`` adds the attrs to its bare
resource ``_Arg``s. A wrong match cannot give wrong results: the launch op checks every input's shape
on every call (docs/design.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from graph_passes._graph import is_stub
from hlo.lowering.tensor_names import data_inputs, node_name
from tfxla_plugin.hook import state

DT_RESOURCE = 20
HANDLE_ATTRS = ("_handle_shapes", "_handle_dtypes")
MAX_NOTES = 256

Signature = tuple[tuple[tuple[str, int], ...], tuple[int, ...]]  # ((arg name, dtype)...), (result dtype...)


@dataclass(frozen=True)
class CalleeNote:
    handles: dict[int, dict[str, Any]] = field(default_factory=dict)  # resource arg index -> handle attrs
    jit: bool = False  # the call asked for XLA (jit_compile=True)


_notes: dict[Signature, CalleeNote] = {}


def _handle_attrs(node) -> dict[str, Any] | None:
    """The handle attrs of a resource producer: an ``_Arg`` that has them, or a ``VarHandleOp``."""
    import tensorflow as tf

    if node.op == "_Arg" and all(k in node.attr for k in HANDLE_ATTRS):
        return {k: node.attr[k] for k in HANDLE_ATTRS}
    if node.op == "VarHandleOp":
        shapes, dtypes = tf.compat.v1.AttrValue(), tf.compat.v1.AttrValue()
        shapes.list.shape.add().CopyFrom(node.attr["shape"].shape)
        dtypes.list.type.append(node.attr["dtype"].type)
        return {"_handle_shapes": shapes, "_handle_dtypes": dtypes}
    return None


def note(graph_def, jit_calls: Iterable[str] = ()) -> None:
    """Remember what ``graph_def`` knows about each function it calls that is a stub here."""
    library = {f.signature.name: f for f in graph_def.library.function}
    if not library:
        return
    jit_calls = set(jit_calls)
    nodes = {n.name: n for n in graph_def.node}
    for node in graph_def.node:
        fname = node.attr["f"].func.name if "f" in node.attr else ""
        fdef = library.get(fname)
        if fdef is None or not is_stub(fdef):
            continue
        sig = fdef.signature
        known = {}
        for k, (arg, src) in enumerate(zip(sig.input_arg, data_inputs(node.input))):
            producer = nodes.get(node_name(src))
            attrs = _handle_attrs(producer) if arg.type == DT_RESOURCE and producer is not None else None
            if attrs is not None:
                known[k] = attrs
        if known or node.name in jit_calls:
            key = (tuple((a.name, a.type) for a in sig.input_arg), tuple(a.type for a in sig.output_arg))
            with state.LOCK:
                _notes[key] = CalleeNote(known, node.name in jit_calls)
                while len(_notes) > MAX_NOTES:
                    _notes.pop(next(iter(_notes)))


def _body_args(graph_def) -> tuple[list, Signature]:
    args = sorted((n for n in graph_def.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    rets = sorted((n for n in graph_def.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    return args, (tuple((n.name, n.attr["T"].type) for n in args), tuple(n.attr["T"].type for n in rets))


def lookup(graph_def) -> CalleeNote | None:
    """The note a caller left for the function whose body ``graph_def`` is, if any."""
    with state.LOCK:
        return _notes.get(_body_args(graph_def)[1])


def with_handles(graph_def, callee: CalleeNote | None):
    """``graph_def`` with the noted handle attrs on its bare resource ``_Arg``s (a copy), or itself."""
    args = _body_args(graph_def)[0]
    bare = {k for k, n in enumerate(args) if n.attr["T"].type == DT_RESOURCE and "_handle_shapes" not in n.attr}
    if callee is None or not bare & callee.handles.keys():
        return graph_def
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    names = {args[k].name: callee.handles[k] for k in bare & callee.handles.keys()}
    for node in out.node:
        if node.name in names:
            for attr, value in names[node.name].items():
                node.attr[attr].CopyFrom(value)
    return out


__all__ = ["CalleeNote", "lookup", "note", "with_handles"]
