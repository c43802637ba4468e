"""A ``tf.function(jit_compile=True)`` called eagerly, compiled by the hook instead of TF's XLA.

TF's eager runtime sends the call of a function whose FunctionDef carries ``_XlaMustCompile=True``
straight to XLA (``XlaLaunch``), without Grappler, so the hook would never see it. An op attr
``_XlaMustCompile=False`` would override the FunctionDef's, but the eager function op accepts only
``executor_type`` and ``config_proto`` (anything else: "Attribute '_XlaMustCompile' does not exist for
this operation"). So with the switch on such a call runs a twin: the same FunctionDef without the attr,
registered under ``<name>__tfxla`` (``TWIN_SUFFIX``) the first time the function is called eagerly, and
freed with it (if that fails, one WARNING and TF's XLA runs the function) (a weak mapping from TF's ``AtomicFunction`` to its twin). TF instantiates the twin as any
function, Grappler hands its body to the hook, and the hook knows by the suffix (``original_name``) that
the function asked for ``jit_compile=True``: must-compile under ``enable(jit_compile=True)``, counted in
``stats().xla_calls_taken``, recorded under the function's own name.

``install()`` wraps ``AtomicFunction.call_flat`` once per process: while the switch is off it runs TF's
path unchanged (TF's XLA compiles the function as before); while it is on, two weak-dictionary lookups
per eager function call, this one and ``static_shapes``' (a function traced with unknown dims runs a twin
for the call's static shapes, made from the definition this module chose). Graph-mode calls (a ``jit_compile=True`` function called from another) are
left to ``body.release_from_xla``.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import weakref

from tfxla_plugin.hook import state, static_shapes

log = logging.getLogger("tfxla_plugin")
TWIN_SUFFIX = "__tfxla"
_SHAPE_TWIN = re.compile(re.escape(static_shapes.SHAPE_SUFFIX) + r"[0-9a-f]+$")
XLA_MUST_COMPILE = "_XlaMustCompile"

_twins: "weakref.WeakKeyDictionary[object, object | None]" = weakref.WeakKeyDictionary()
_TWINS_LOCK = threading.Lock()  # one twin per function, also when two threads call it first at once
_installed = False


def original_name(name: str) -> tuple[str, bool]:
    """(the name to keep the record under, whether ``name`` is a twin's: a ``jit_compile=True`` function called
    eagerly). A static-shape twin (``static_shapes``) keeps its suffix: ``f__tfxla__tfxla_s0`` is ``f__tfxla_s0``."""
    shape = _SHAPE_TWIN.search(name)
    core, tail = (name[:shape.start()], shape.group()) if shape else (name, "")
    if core.endswith(TWIN_SUFFIX):
        return core[:-len(TWIN_SUFFIX)] + tail, True
    return name, False


def twin_name(name: str | bytes) -> str:
    return (name.decode() if isinstance(name, bytes) else name) + TWIN_SUFFIX


def _make_twin(function):
    """The twin of a TF ``AtomicFunction`` whose definition asks for XLA, or None for any other."""
    from tensorflow.python.eager.polymorphic_function import atomic_function

    definition = function.cached_definition
    if XLA_MUST_COMPILE not in definition.attr or not definition.attr[XLA_MUST_COMPILE].b:
        return None
    fdef = type(definition)()
    fdef.CopyFrom(definition)
    fdef.signature.name = twin_name(function.name)
    del fdef.attr[XLA_MUST_COMPILE]
    context = function._bound_context  # noqa: SLF001  (the context the function is registered in)
    if context.has_function(fdef.signature.name.encode()):
        # Another AtomicFunction of the same name made it (TF may wrap one runtime function twice): share the
        # registration, which TF counts per name and frees with the last of them.
        twin = atomic_function.AtomicFunction(fdef.signature.name, context, function.function_type)
    else:
        twin = atomic_function.from_function_def(fdef, function.function_type)
    with state.LOCK:
        state.stats().xla_calls_taken += 1
    return twin


_MISSING = object()


def _twin(function):
    twin = _twins.get(function, _MISSING)  # the per-call path: no lock once the function has been seen
    if twin is not _MISSING:
        return twin
    with _TWINS_LOCK:
        try:
            return _twins[function]
        except KeyError:
            pass
        try:
            twin = _make_twin(function)
        except Exception as e:  # noqa: BLE001  (never into the user's call: TF's XLA runs it, as without the hook)
            log.warning("tfxla hook: jit_compile=True function %s is left to TF's XLA: its twin failed: %s: %s",
                        function.name.decode(), type(e).__name__, e)
            twin = None
        _twins[function] = twin
        return twin


def install() -> None:
    """Wrap ``AtomicFunction.call_flat`` (once per process) so eager calls of ``jit_compile=True`` functions
    run their twins while the switch is on, and calls of functions traced with unknown dims a twin for
    their static shapes (``static_shapes``; not while the hook is at work on this thread)."""
    global _installed
    from tensorflow.python.eager.polymorphic_function import atomic_function

    from tfxla_plugin.hook import callback

    with state.LOCK:
        if _installed:
            return
        _installed = True
    call_flat = atomic_function.AtomicFunction.call_flat

    @functools.wraps(call_flat)
    def call_flat_through_hook(self, *args):
        if not state.SWITCH.on or not self._bound_context.executing_eagerly():  # noqa: SLF001
            return call_flat(self, *args)
        runs = _twin(self) or self
        if callback.at_work():
            return call_flat(runs, *args)
        runs, new = static_shapes.choose(self, runs, args)
        out = call_flat(runs, *args)
        if new:
            static_shapes.called(self, runs)
        return out

    atomic_function.AtomicFunction.call_flat = call_flat_through_hook


__all__ = ["TWIN_SUFFIX", "install", "original_name", "twin_name"]
