"""An eager call of a function traced with unknown dims runs a twin traced for the call's static shapes.

TF traces a ``tf.function`` once per input signature, and one made with ``reduce_retracing=True`` (every
Keras step function) relaxes the dims that changed between calls to ``None``: ``predict_on_batch`` at
batch 1 then 32, or ``predict`` whose last batch is partial, runs a function whose data ``_Arg``s have a
``None`` batch dim. Grappler hands the hook that body once, before any input exists, so what depends
on the batch stays in TensorFlow ("dynamic shape"). The call itself knows the shapes, though. So while the switch is on, an eager
call (``AtomicFunction.call_flat``, wrapped by ``eager_jit.install``) of such a function runs a twin: the
same FunctionDef with the call's shapes in its data arguments' ``_output_shapes``, registered under
``<name>__tfxla_s<hex>`` (``twin_name``: a digest of the shapes) the first time that shape comes, and freed with the function.
TF instantiates the twin as any function and the hook compiles its body with static shapes: one kernel
per recurring shape, compiled once (the kernel cache keeps it across processes).

A twin's calls of ``jit_compile=True`` functions (``model.compile(jit_compile=True)``'s predict step calls its
jit one) are pointed at the callee's definition without ``_XlaMustCompile``/``_noinline`` (``inlinable``), so
TF inlines it into the twin, which then compiles whole (not under must-compile: the callee stays on its own).

Bounded: at most ``MAX_SHAPES`` twins per function (further shapes run the function itself, as TF
would); and a function whose first twin the hook did not rewrite (nothing to compile even with static
shapes) gets no more twins. Graph-mode calls (a function called from another, inlined by TF) are not
affected, nor are calls while the hook is at work on this thread (the compiler's own TF calls). The
twins' records are kept under their own names; ``lookup`` finds them from the function
(``twin_names``). Counted in ``stats().shape_twins``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping

from tfxla_plugin.hook import state

log = logging.getLogger("tfxla_plugin")
SHAPE_SUFFIX = "__tfxla_s"
MAX_SHAPES = 8  # twins per function: a function called with ever new shapes stops compiling after these
OUTPUT_SHAPES = "_output_shapes"
XLA_MUST_COMPILE = "_XlaMustCompile"
NOINLINE = "_noinline"
INLINE_SUFFIX = "__tfxla_inline"  # a jit_compile=True callee's definition without the attr, for twins to inline
_NOT_DATA = frozenset({20, 21})  # DT_RESOURCE, DT_VARIANT: handles, not shaped data

Shapes = tuple[tuple[int, ...], ...]


@dataclass
class Specializer:
    """The twins of one function: which of its arguments have unknown dims, a twin per shape of those."""

    positions: tuple[int, ...]  # flat argument indices of the data inputs with an unknown dim or rank
    twins: dict[Shapes, Any] = field(default_factory=dict)  # shapes of those arguments -> AtomicFunction
    live: bool = True  # False: a twin compiled nothing; calls run the function itself


_specializers: "weakref.WeakKeyDictionary[Any, Specializer | None]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_MISSING: Any = object()


def unknown_positions(definition) -> tuple[int, ...]:
    """The indices of ``definition``'s data arguments (not resources or variants) whose recorded shape
    (``arg_attr``'s ``_output_shapes``) has an unknown dim or rank."""
    out = []
    for i, arg in enumerate(definition.signature.input_arg):
        if arg.type in _NOT_DATA or i not in definition.arg_attr:
            continue
        attrs = definition.arg_attr[i].attr
        shapes = list(attrs[OUTPUT_SHAPES].list.shape) if OUTPUT_SHAPES in attrs else []
        if len(shapes) == 1 and (shapes[0].unknown_rank or any(d.size < 0 for d in shapes[0].dim)):
            out.append(i)
    return tuple(out)


def twin_definition(definition, name: str, positions: tuple[int, ...], shapes: Shapes, *,
                    inlined: Mapping[str, str] | None = None) -> tuple[object, list[str]]:
    """(a copy of ``definition`` called ``name`` whose arguments at ``positions`` have the static ``shapes``,
    the names of the ``jit_compile=True`` functions it calls). ``inlined``: such a callee's name -> the name
    of its definition without ``_XlaMustCompile`` (``inlinable``); each call of one is pointed there and
    loses its own ``_XlaMustCompile``, so TF inlines the callee into the twin (at instantiation, before
    Grappler) and the hook compiles it with the twin's static shapes. Left calling XLA's callee, the call
    would instantiate that on its own, from its definition traced with the unknown dims."""
    import tensorflow as tf

    fdef = type(definition)()
    fdef.CopyFrom(definition)
    fdef.signature.name = name
    for i, dims in zip(positions, shapes):
        listed = fdef.arg_attr[i].attr[OUTPUT_SHAPES].list
        del listed.shape[:]
        listed.shape.add().CopyFrom(tf.TensorShape(list(dims)).as_proto())
    callees = []
    for node in fdef.node_def:
        if XLA_MUST_COMPILE in node.attr and node.attr[XLA_MUST_COMPILE].b and "f" in node.attr:
            callees.append(node.attr["f"].func.name)
            if inlined and callees[-1] in inlined:
                del node.attr[XLA_MUST_COMPILE]
                node.attr["f"].func.name = inlined[callees[-1]]
    return fdef, callees


def inlinable(context, callee: str) -> str:
    """The name of ``callee``'s definition without ``_XlaMustCompile`` and ``_noinline`` (``<callee>__tfxla_inline``), registered
    in ``context`` if it is not yet. Registered once per callee and process and never removed: a twin made
    later may still need it, and one FunctionDef per ``jit_compile=True`` function called from a function
    with unknown dims is small."""
    name = callee + INLINE_SUFFIX
    if not context.has_function(name.encode()):
        fdef = type(context.get_function_def(callee))()
        fdef.CopyFrom(context.get_function_def(callee))
        fdef.signature.name = name
        for attr in (XLA_MUST_COMPILE, NOINLINE):  # TF marks a jit_compile=True function _noinline as well
            fdef.attr.pop(attr, None)
        context.add_function_def(fdef)
    return name


def twin_name(base: str, shapes: Shapes) -> str:
    """``<base>__tfxla_s<hex>``: named by the shapes, so two ``AtomicFunction``s of one runtime function (TF
    may wrap one twice) that share a registration by name share it only for the same shapes."""
    return f"{base}{SHAPE_SUFFIX}{hashlib.sha256(repr(shapes).encode()).hexdigest()[:12]}"


def _shapes(args, positions: tuple[int, ...]) -> Shapes:
    return tuple(tuple(args[i].shape.as_list()) for i in positions)


def _specializer(function) -> Specializer | None:
    spec = _specializers.get(function, _MISSING)  # the per-call path: no lock once the function has been seen
    if spec is not _MISSING:
        return spec
    with _LOCK:
        spec = _specializers.get(function, _MISSING)
        if spec is _MISSING:
            try:
                positions = unknown_positions(function.cached_definition)
            except Exception as e:  # noqa: BLE001  (never into the user's call)
                log.debug("tfxla hook: no shapes for %s: %s: %s", function.name, type(e).__name__, e)
                positions = ()
            spec = Specializer(positions) if positions else None
            _specializers[function] = spec
        return spec


def _make_twin(function, definition_of, spec: Specializer, shapes: Shapes):
    from tensorflow.python.eager.polymorphic_function import atomic_function

    base = definition_of.name.decode() if isinstance(definition_of.name, bytes) else definition_of.name
    name = twin_name(base, shapes)
    context = function._bound_context  # noqa: SLF001  (the context the function is registered in)
    definition = definition_of.cached_definition
    fdef, callees = twin_definition(definition, name, spec.positions, shapes)
    if callees and not state.SWITCH.must_compile:  # must-compile: such a callee keeps its own body (all or an ERROR)
        fdef, _ = twin_definition(definition, name, spec.positions, shapes,
                                  inlined={c: inlinable(context, c) for c in set(callees)})
        with state.LOCK:
            state.stats().xla_calls_taken += len(callees)
    if context.has_function(name.encode()):  # TF wrapped one runtime function twice: share the registration
        return atomic_function.AtomicFunction(name, context, function.function_type)
    return atomic_function.from_function_def(fdef, function.function_type)


def choose(function, runs, args) -> tuple[object, bool]:
    """(what to call, whether it is a new twin): ``runs`` (``function`` or its ``eager_jit`` twin), or a
    twin of it for the static shapes of ``args`` where ``function`` has data arguments of unknown dims.
    A new twin's first call must be followed by ``called(function, twin)``."""
    spec = _specializer(function)
    if spec is None or not spec.live:
        return runs, False
    try:
        shapes = _shapes(args, spec.positions)
    except (AttributeError, ValueError):  # not a tensor of known shape (graph-mode arguments)
        return runs, False
    twin = spec.twins.get(shapes)
    if twin is not None:
        return twin, False
    with _LOCK:
        twin = spec.twins.get(shapes)
        if twin is not None:
            return twin, False
        if len(spec.twins) >= MAX_SHAPES:
            return runs, False
        try:
            twin = _make_twin(function, runs, spec, shapes)
        except Exception as e:  # noqa: BLE001  (never into the user's call: TF runs the function itself)
            log.warning("tfxla hook: %s runs as traced, with unknown dims: its static-shape twin failed: %s: %s",
                        function.name.decode(), type(e).__name__, e)
            spec.live = False
            return runs, False
        spec.twins[shapes] = twin
        with state.LOCK:
            state.stats().shape_twins += 1
        return twin, True


def called(function, twin) -> None:
    """After a new twin's first call (TF instantiated it: the hook has decided its body): a twin the hook did
    not rewrite stops the function's specialization."""
    from tfxla_plugin.hook import eager_jit

    try:
        record = state.hooked(eager_jit.original_name(twin.name.decode())[0])
        if record is not None and record.decision == state.REWRITTEN:
            return
        spec = _specializers.get(function)
        if spec is not None and spec.live:
            spec.live = False
            log.info("tfxla hook: %s: its static-shape twin compiled nothing (%s); its calls run it as traced",
                     function.name.decode(), record.decision if record is not None else "not seen by the hook")
    except Exception as e:  # noqa: BLE001  (the user's call has returned: never raise after it)
        log.debug("tfxla hook: after a twin's first call: %s: %s", type(e).__name__, e)


def twin_names(function) -> list[str]:
    """The names of the twins made for the TF ``AtomicFunction`` ``function`` (for ``lookup``)."""
    spec = _specializers.get(function)
    if spec is None:
        return []
    return [t.name.decode() if isinstance(t.name, bytes) else t.name for t in list(spec.twins.values())]


__all__ = ["MAX_SHAPES", "SHAPE_SUFFIX", "Specializer", "called", "choose", "inlinable", "twin_definition", "twin_name",
           "twin_names", "unknown_positions"]
