"""``tfxla_plugin.function``: the drop-in for ``tf.function(jit_compile=True)``.

    @tfxla_plugin.function(jit_compile=True)
    def f(x, w): ...

Per input signature (dtypes, static shapes and Python values of the arguments) the function is
traced once with ``tf.function``, clustered, compiled (the kernel cache persists across
processes) and rewritten; later calls with the same signature reuse it. ``jit_compile=True`` is
must-compile (an error lists every node that cannot be compiled); ``"auto"`` clusters what it can
and leaves the rest in TensorFlow; ``False`` is plain ``tf.function``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref

import numpy as np
import tensorflow as tf

import backends
from tfxla_plugin.compiled_graph import CompiledGraph, GraphImporter, pack_outputs
from tfxla_plugin.flags import Flags


def function(fn=None, *, jit_compile=True, backend: str | None = None, input_signature=None,
             reduce_retracing: bool = False, autograph: bool = True):
    """Compile ``fn`` with tfxla-plugin; usable as ``@function`` or ``@function(...)``.

    ``backend``: ``"cpu"`` (C kernels) or ``"cuda"`` (CUDA kernels behind a host launcher: needs nvcc to
    compile and an NVIDIA GPU to run; the tensors stay in host memory and are copied to the device and
    back on every call); ``None`` takes ``--backend`` from ``TFXLA_FLAGS`` (default cpu).

    ``fn`` may be a ConcreteFunction: ``function(tf.saved_model.load(p).signatures["serving_default"])``
    keeps working once the loaded object is freed (see ``_traceable``).
    """
    if jit_compile not in (True, False, "auto"):
        raise ValueError(f"jit_compile must be True, False or \"auto\", got {jit_compile!r}")
    if backend is not None:
        backends.get(backend)  # an unknown name is a ValueError now, not at the first call

    def wrap(f):
        return CompiledFunction(f, jit_compile=jit_compile, input_signature=input_signature,
                                reduce_retracing=reduce_retracing, autograph=autograph, backend=backend)
    return wrap if fn is None else wrap(fn)


_EagerTensor = type(tf.constant(0))


def _is_tensor_like(x) -> bool:
    return isinstance(x, (tf.Tensor, np.ndarray, np.generic, tf.Variable))


def _bound_method(fn, instance_ref):
    """``fn`` bound to the instance ``instance_ref`` refers to, with ``fn``'s signature less ``self``."""
    def method(*args, **kwargs):
        instance = instance_ref()
        if instance is None:
            raise ReferenceError(f"{fn.__qualname__}: the object this method was bound to has been deleted")
        return fn(instance, *args, **kwargs)

    functools.update_wrapper(method, fn)
    signature = inspect.signature(fn)
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        parameters = parameters[1:]  # ``self``; a ``*args`` method takes the instance in args[0]
    method.__signature__ = signature.replace(parameters=parameters)
    return method


def _traceable(fn):
    """What ``tf.function`` traces for ``fn``: ``fn`` itself, but a ConcreteFunction (a loaded SavedModel's
    signature, say) is imported rather than called: its GraphDef bound to its captured handles
    (``GraphImporter``). Calling it would touch its variables, which it references weakly: a loaded
    object's die with it (``function(tf.saved_model.load(p).signatures[k])``) while their values live on
    in the handles, and TF's call then raises."""
    from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction

    if not isinstance(fn, ConcreteFunction):
        return fn
    importer = GraphImporter(fn, fn.graph.as_graph_def())
    function_type, structure = fn.function_type, fn.structured_outputs

    def imported(*args, **kwargs):
        if function_type is None:  # a flat signature (tf.compat.v1.wrap_function's)
            flat = list(args)
        else:
            flat = function_type.unpack_inputs(function_type.bind(*args, **kwargs))
        return pack_outputs(structure, importer(flat))

    name = fn.name.decode() if isinstance(fn.name, bytes) else str(fn.name)
    imported.__name__ = imported.__qualname__ = name
    return tf.autograph.experimental.do_not_convert(imported)  # graph already built: nothing to convert


def _data_inputs(flat: list) -> list:
    """The flat arguments a traced function takes as inputs, in order: tensors and arrays, and each
    variable once (tf.function gives a variable passed twice one resource input)."""
    out, seen = [], []
    for x in flat:
        if isinstance(x, tf.Variable):
            if any(x is v for v in seen):
                continue
            seen.append(x)
        if _is_tensor_like(x):
            out.append(x)
    return out


class CompiledFunction:
    # Marks calls as autograph's own artifacts: called inside a user's tf.function, autograph would
    # otherwise convert the whole compiler (minutes of tracing). A class attribute, unlike
    # ``do_not_convert``, adds nothing to each call.
    autograph_info__ = frozenset()

    def __init__(self, fn, *, jit_compile, input_signature=None, reduce_retracing=False, autograph=True,
                 backend: str | None = None, _instance=None):
        self._python_function = fn
        self._backend = backend
        self._jit_compile = jit_compile
        self._input_signature = input_signature
        self._reduce_retracing = reduce_retracing
        self._autograph = autograph
        self._instance = _instance  # a weak reference to the instance a method is bound to, or None
        target = _traceable(fn) if _instance is None else _bound_method(fn, _instance)
        # Traced at concrete shapes (our kernels are specialised); the user's input_signature is
        # checked separately so that `None` dims still accept any size.
        self._tf_function = tf.function(target, autograph=autograph)
        self._plain = tf.function(target, input_signature=input_signature, reduce_retracing=reduce_retracing,
                                  autograph=autograph)
        self._cache: dict[tuple, CompiledGraph] = {}
        # None: not tried yet; False: per-shape kernels instead (or no None batch dim in input_signature)
        self._tiled: CompiledGraph | None | bool = None if self._batch_polymorphic(input_signature) else False
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        functools.update_wrapper(self, fn)
        if _instance is not None:
            self.__signature__ = target.__signature__  # without ``self``: Keras binds call arguments by it

    # methods of tf.Module / Keras models: bind per instance, as tf.function does (the binding holds the
    # instance weakly, so it can still be freed; a Keras model's call binds its arguments by the signature)
    def __get__(self, instance, owner):
        if instance is None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            bound = CompiledFunction(self._python_function, jit_compile=self._jit_compile,
                                     input_signature=self._input_signature, reduce_retracing=self._reduce_retracing,
                                     autograph=self._autograph, backend=self._backend,
                                     _instance=weakref.ref(instance))
            self._bound[instance] = bound
        return bound

    def _flags(self) -> Flags:
        """``TFXLA_FLAGS`` as set now, with this function's own ``backend`` when it names one."""
        flags = Flags.from_env()
        return flags if self._backend is None else dataclasses.replace(flags, backend=self._backend)

    # --- signature handling --------------------------------------------------------------
    def _key(self, args, kwargs):
        flat = tf.nest.flatten((args, kwargs), expand_composites=True)
        if not kwargs and all(type(a) is _EagerTensor for a in args):
            return tuple((a.dtype, a._shape_tuple()) for a in args), flat
        key, variables = [], []
        for x in flat:
            if isinstance(x, tf.Variable):
                # as tf.function traces variable arguments: by dtype and shape, and which arguments alias
                alias = next((k for k, v in enumerate(variables) if v is x), len(variables))
                variables.append(x)
                key.append(("var", x.dtype.name, tuple(x.shape.as_list()) if x.shape.rank is not None else None,
                            x.trainable, alias))
            elif isinstance(x, (tf.Tensor, np.ndarray, np.generic)):
                key.append((x.dtype.name if hasattr(x.dtype, "name") else str(x.dtype), tuple(np.shape(x))))
            else:
                try:
                    hash(x)
                    key.append((type(x).__name__, x))
                except TypeError:
                    key.append((type(x).__name__, id(x)))
        return tuple(key), flat

    def _check_signature(self, flat_tensors) -> None:
        if self._input_signature is None:
            return
        specs = tf.nest.flatten(self._input_signature, expand_composites=True)
        if len(specs) != len(flat_tensors):
            raise TypeError(f"{self.__name__}: expected {len(specs)} tensor argument(s) matching input_signature, "
                            f"got {len(flat_tensors)}")
        for k, (spec, x) in enumerate(zip(specs, flat_tensors)):
            t = tf.TensorSpec(x.shape if isinstance(x, tf.Variable) else np.shape(x), tf.as_dtype(x.dtype))
            if not tf.TensorSpec(spec.shape, spec.dtype).is_compatible_with(t):  # a TensorSpec or VariableSpec
                raise TypeError(f"{self.__name__}: argument {k} is {t}, not compatible with input_signature {spec}")

    @staticmethod
    def _batch_polymorphic(input_signature) -> bool:
        """An input_signature with a ``None`` leading dim: compile once for every batch size."""
        if input_signature is None:
            return False
        specs = tf.nest.flatten(input_signature, expand_composites=True)
        return any(isinstance(s, tf.TensorSpec) and s.shape.rank and s.shape[0] is None for s in specs)

    def _compiled_tiled(self, args, kwargs):
        """The batch-tiled compilation for the input_signature (see ``batch_tiling``), or None."""
        if self._tiled is None:
            flags = self._flags()
            from tfxla_plugin.batch_tiling import NotTileable

            cf = self._plain.get_concrete_function()
            try:
                self._tiled = CompiledGraph.build_tiled(cf, must_compile=self._jit_compile is True, flags=flags)
            except NotTileable as e:
                import logging

                logging.getLogger("tfxla_plugin").info(
                    "%s: compiling per input shape instead of once for every batch size: %s", self.__name__, e)
                self._tiled = False
        if self._tiled is False:
            return None
        flat = tf.nest.flatten((args, kwargs), expand_composites=True)
        # the input_signature's TensorSpecs take a variable's value, as tf.function's do
        tensors = [tf.convert_to_tensor(x) if isinstance(x, tf.Variable) else x for x in flat if _is_tensor_like(x)]
        self._check_signature(tensors)
        return self._tiled, tensors

    def _compiled(self, args, kwargs) -> tuple[CompiledGraph, list]:
        if self._tiled is not False:
            found = self._compiled_tiled(args, kwargs)
            if found is not None:
                return found
        if not kwargs and all(type(a) is _EagerTensor for a in args):  # the common case, kept cheap
            compiled = self._cache.get(tuple((a.dtype, a._shape_tuple()) for a in args))
            if compiled is not None:
                return compiled, list(args)
        key, flat = self._key(args, kwargs)
        tensors = _data_inputs(flat)  # variables stay variables: the function may assign them
        compiled = self._cache.get(key)
        if compiled is None:
            self._check_signature(tensors)
            flags = self._flags()
            cf = self._tf_function.get_concrete_function(*args, **kwargs)
            compiled = CompiledGraph.build(cf, must_compile=self._jit_compile is True, flags=flags)
            self._cache[key] = compiled
        return compiled, tensors

    # --- the public surface ----------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._jit_compile is False:
            return self._plain(*args, **kwargs)
        compiled, tensors = self._compiled(args, kwargs)
        outs = compiled.call_flat([t if type(t) is _EagerTensor or isinstance(t, tf.Variable) else tf.convert_to_tensor(t)
                                   for t in tensors])
        return compiled.pack_outputs(outs)

    def get_concrete_function(self, *args, **kwargs):
        return self._tf_function.get_concrete_function(*args, **kwargs)

    def explain(self, *args, format: str = "text", **kwargs) -> str:  # noqa: A002
        """Why these arguments compiled as they did: the clustering summary (clusters, coverage, op
        histograms, excluded nodes and why) and per cluster the fusions made and refused, as text or as a
        JSON document (``format="json"``); see ``tfxla_plugin.explain``."""
        from tfxla_plugin.explain import FORMATS, explain

        if format not in FORMATS:  # before compiling anything
            raise ValueError(f"explain: format must be one of {', '.join(map(repr, FORMATS))}, got {format!r}")
        compiled, _ = self._compiled(args, kwargs)
        return explain(compiled, format)

    def experimental_get_compiler_ir(self, *args, **kwargs):
        """Like ``tf.function``'s: returns ``ir(stage="hlo")``; stages hlo, optimized_hlo, clusters, c, graph."""
        compiled, _ = self._compiled(args, kwargs)
        return lambda stage="hlo": compiled.ir(stage)

    def compiled_graph(self, *args, **kwargs) -> CompiledGraph:
        return self._compiled(args, kwargs)[0]
