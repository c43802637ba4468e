"""Which of the hook's records (``state.HookedGraph``) belong to a function the user holds.

The hook keeps what it decided for each function body under TF's name of the function (Grappler's item
id, ``__inference_f_12``). ``hooked_graphs(obj, *args)`` finds the concrete functions of ``obj`` and
returns the records of their bodies and of the functions they call (a ``jit_compile=True`` step Keras
calls from its outer step is instantiated on its own), in that order, each once:

=======================================  ==============================================================
``obj``                                  concrete functions
=======================================  ==============================================================
a ``ConcreteFunction``                   itself
a ``tf.function``                        ``get_concrete_function(*args, **kwargs)`` with arguments,
                                         else every signature traced so far
a Keras model                            its ``train_function``, ``test_function``, ``predict_function``
a Python function (Keras's step)         the ``tf.function``s it closes over (two levels deep)
=======================================  ==============================================================

Nothing is traced or run except what ``get_concrete_function`` traces; a function the hook has not seen
(never called with the switch on, or forgotten: ``state.MAX_GRAPHS``) has no record, and a call Grappler
inlined into its caller is part of the caller's record.
"""

from __future__ import annotations

from typing import Any, Iterator

from tfxla_plugin.hook import eager_jit, state, static_shapes
from tfxla_plugin.hook.state import HookedGraph

KERAS_STEPS = ("train_function", "test_function", "predict_function")
CLOSURE_DEPTH = 2


def _is_concrete(obj) -> bool:
    from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction

    return isinstance(obj, ConcreteFunction)


def _is_tf_function(obj) -> bool:
    from tensorflow.python.eager.polymorphic_function.polymorphic_function import Function

    return isinstance(obj, Function)


def _closure_functions(fn, depth: int) -> Iterator[Any]:
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if _is_tf_function(value):
            yield value
        elif callable(value) and depth > 1 and hasattr(value, "__closure__"):
            yield from _closure_functions(value, depth - 1)


def concrete_functions(obj, *args, **kwargs) -> list:
    """The concrete functions ``obj`` stands for (see the module's table); raises TypeError for others."""
    if _is_concrete(obj):
        return [obj]
    if _is_tf_function(obj):
        if args or kwargs:
            return [obj.get_concrete_function(*args, **kwargs)]
        return list(obj._list_all_concrete_functions())  # noqa: SLF001  (TF has no public listing)
    steps = [getattr(obj, name, None) for name in KERAS_STEPS] if hasattr(obj, "make_train_function") else None
    if steps is not None:
        return [cf for step in steps if step is not None for cf in concrete_functions(step)]
    if callable(obj):
        found = list({id(f): f for f in _closure_functions(obj, CLOSURE_DEPTH)}.values())
        if found:
            return [cf for f in found for cf in concrete_functions(f, *args, **kwargs)]
    raise TypeError(f"tfxla_plugin: expected a tf.function, a ConcreteFunction or a Keras model, got "
                    f"{type(obj).__name__}")


def function_names(cf) -> list[str]:
    """The name of ``cf`` in TF's runtime, the records' names of its static-shape twins (``static_shapes``),
    then the names of the functions in its graph's library."""
    names = [cf.name.decode() if isinstance(cf.name, bytes) else cf.name]
    atomic = getattr(cf, "_inference_function", None)  # TF's runtime function behind cf
    if atomic is not None:
        names += [eager_jit.original_name(n)[0] for n in static_shapes.twin_names(atomic)]
    names += [f.signature.name for f in cf.graph.as_graph_def().library.function]
    return names


def hooked_graphs(obj, *args, **kwargs) -> list[HookedGraph]:
    """The hook's records of the bodies of ``obj``'s concrete functions and their callees (each once)."""
    seen: dict[int, HookedGraph] = {}
    for cf in concrete_functions(obj, *args, **kwargs):
        for name in function_names(cf):
            graph = state.hooked(name)
            if graph is not None:
                seen.setdefault(id(graph), graph)
    return list(seen.values())


def require(obj, *args, **kwargs) -> list[HookedGraph]:
    """``hooked_graphs``, or a LookupError saying why there is none."""
    graphs = hooked_graphs(obj, *args, **kwargs)
    if not graphs:
        name = getattr(obj, "__name__", None) or getattr(obj, "name", None) or type(obj).__name__
        raise LookupError(f"tfxla_plugin: the hook has no record of {name!r}: it sees a function when TF first "
                          f"runs it while the switch is on (tfxla_plugin.enable()); call it first")
    return graphs


__all__ = ["KERAS_STEPS", "concrete_functions", "function_names", "hooked_graphs", "require"]
