"""``tfxla_plugin.function``: the drop-in for ``tf.function(jit_compile=True)``.

    @tfxla_plugin.function(jit_compile=True)
    def f(x, w): ...

Per input signature (dtypes, static shapes and Python values of the arguments) the function is
traced once with ``tf.function``, clustered, compiled (the kernel cache persists across
processes) and rewritten; later calls with the same signature reuse it. ``jit_compile=True`` is
must-compile (an error lists every node that cannot be compiled); ``"auto"`` clusters what it can
and leaves the rest in TensorFlow; ``False`` is plain ``tf.function``.

Shapes: an ``input_signature`` whose only unknown dims are leading (batch) dims compiles once for
every batch size when every cluster tiles over the batch (``batch_tiling``); otherwise (a ``[None,
None]`` signature, a loss reducing over the batch) each call's concrete shapes are compiled, as
TF's XLA does. At most ``--max_specializations`` shapes are compiled per function; calls with a new
shape past that run in plain TensorFlow, with one WARNING per function.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import weakref
from collections import OrderedDict

import numpy as np
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function import polymorphic_function

import backends
from backends.codegen.symbolic import NotSymbolic
from graph_passes.pipeline import batched_inputs
from tfxla_plugin.batch_tiling import symbolic_dims_needed
from tfxla_plugin.compiled_graph import CompiledGraph, GraphImporter, pack_outputs
from tfxla_plugin.eager_launch import quick_context
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")


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


@dataclasses.dataclass(frozen=True)
class _Options:
    """What ``function(...)`` was given, as a bound method's CompiledFunction inherits it."""
    jit_compile: bool | str
    input_signature: object = None
    reduce_retracing: bool = False
    autograph: bool = True
    backend: str | None = None


def _tensor_key(x) -> tuple:
    """How a tensor argument (eager or traced), array or TensorSpec enters a signature key: dtype and shape
    (a tuple with None for unknown dims, None for an unknown rank), as eager calls key their tensors."""
    shape = x.shape
    if isinstance(shape, tf.TensorShape):
        shape = tuple(shape.as_list()) if shape.rank is not None else None
    return (tf.as_dtype(x.dtype), tuple(shape) if shape is not None else None)


def _as_specs(structure):
    """``structure`` with traced (graph) tensors replaced by their TensorSpecs: what ``get_concrete_function``
    of another graph is given (the tensors belong to the graph being traced)."""
    return tf.nest.map_structure(
        lambda x: tf.TensorSpec(x.shape, x.dtype) if isinstance(x, tf.Tensor) and type(x) is not _EagerTensor else x,
        structure)


def _unknown_inner_dims(input_signature) -> str:
    """The input_signature's specs with an unknown dim other than the leading one (or an unknown rank), as
    ``argument k 'name' has shape [None, None]`` text; empty when there is none."""
    if input_signature is None:
        return ""
    found = []
    for k, spec in enumerate(tf.nest.flatten(input_signature, expand_composites=True)):
        if not isinstance(spec, tf.TensorSpec):
            continue
        name = f"argument {k}{f' {spec.name!r}' if spec.name else ''}"
        if spec.shape.rank is None:
            found.append(f"{name} has unknown rank")
        elif any(d is None for d in spec.shape.as_list()[1:]):
            found.append(f"{name} has shape {spec.shape.as_list()}")
    return ", ".join(found)


_SCALARS = (bool, int, float, str, type(None))  # Python arguments a warm call is keyed by (``_remember_run``)


_UNKEPT = object()  # in a warm-call key: an argument no kept key has (a variable, an array, a structure)


def _arg_key(x):
    """How an argument enters ``CompiledFunction.__call__``'s key of a warm call: an eager tensor by dtype
    enum and shape, a Python scalar by type and value, anything else as ``_UNKEPT`` (never hashed: a
    variable's hash raises, and at a cost)."""
    if type(x) is _EagerTensor:
        return (x._datatype_enum(), x._shape_tuple())
    return (type(x), x) if type(x) in _SCALARS else _UNKEPT


def _call_key(args: tuple, kwargs: dict) -> tuple:
    """The warm-call key of a call with keyword arguments (in the order given)."""
    return (tuple(_arg_key(a) for a in args), tuple((name, _arg_key(v)) for name, v in kwargs.items()))


_MAX_SEEN = 4096  # shape keys a function keeps (``_specialized``'s call counts, ``_runs``), then starts over
_DTYPE_NAMES = frozenset(d.name for d in tf.dtypes.__dict__.values() if isinstance(d, tf.DType))


def _describe_key(key: tuple) -> str:
    """A shape-specialization key as ``float32[4, 7], int32[4]`` (anything else as its repr)."""
    parts = []
    for item in key:
        dtype, value = (item[0].name if isinstance(item[0], tf.DType) else item[0]), item[1:]
        if len(value) == 1 and isinstance(value[0], tuple) and dtype in _DTYPE_NAMES:
            parts.append(f"{dtype}{list(value[0])}")
        else:
            parts.append(repr(item))
    return ", ".join(parts)


class CompiledFunction(polymorphic_function.Function):
    """A ``tf.function`` whose calls run compiled kernels (the module docstring).

    It is a ``tf.function`` (a ``polymorphic_function.Function``) to TensorFlow: ``tf.saved_model.save`` saves
    it as a method of a ``tf.Module`` or Keras model, ``signatures=`` accepts it or its concrete functions,
    and ``get_concrete_function(*specs)`` returns a ConcreteFunction whose graph runs ``TfxlaLaunch`` with
    each kernel read from a SavedModel Asset (``saveable.AssetRunner``: the kernels stored as ``tfxla wrap``
    stores them). What TensorFlow traces is ``_trace``: compile for the traced signature, then import the
    rewritten graph. Eager calls do not go through TensorFlow's dispatch: ``__call__`` looks the compiled
    signature up and runs it (one eager launch where it can).
    """

    # Marks calls as autograph's own artifacts: called inside a user's tf.function, autograph would
    # otherwise convert the whole compiler (minutes of tracing). A class attribute, unlike
    # ``do_not_convert``, adds nothing to each call.
    autograph_info__ = frozenset()

    def __init__(self, fn, *, jit_compile, input_signature=None, reduce_retracing=False, autograph=True,
                 backend: str | None = None, _instance=None):
        # the wrapper attributes (__name__, __doc__, __wrapped__: the signature Keras binds arguments by) but
        # not fn's __dict__, which for a model would be its own tracking state
        functools.update_wrapper(self, fn, updated=())
        self._options = _Options(jit_compile, input_signature, reduce_retracing, autograph, backend)
        self._fn = fn
        self._instance = _instance  # a weak reference to the instance a method is bound to, or None
        target = _traceable(fn) if _instance is None else _bound_method(fn, _instance)
        self._target = target
        # Traced at concrete shapes (our kernels are specialised); the user's input_signature is
        # checked separately so that `None` dims still accept any size.
        self._tf_function = tf.function(target, autograph=autograph)
        self._plain = tf.function(target, input_signature=input_signature, reduce_retracing=reduce_retracing,
                                  autograph=autograph)
        self._cache: OrderedDict[tuple, CompiledGraph] = OrderedDict()  # shape specializations, in compile order
        # warm-call key (``_arg_key`` per argument) -> (eager runner, picks) (``_remember_run``)
        self._runs: dict[tuple, tuple] = {}
        self._over_limit_warned = False  # past --max_specializations: warned once
        self._apart_logged = False  # _symbols_agree logged its INFO line
        self._unknown_dims: tuple[tuple[int, int], ...] | None = None  # _symbols_agree's, found once
        self._seen: dict[tuple, int] = {}  # shape key -> eager calls run by symbolic kernels (``_specialized``)
        # The one compilation for every shape the input_signature accepts (batch tiles or symbolic dims).
        # None: not tried yet; False: per-shape kernels instead (or no None dim in input_signature)
        self._tiled: CompiledGraph | None | bool = None if self._any_shape(input_signature) else False
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._runners: dict[int, tuple[CompiledGraph, object]] = {}  # id(compiled graph) -> (it, its AssetRunner)
        self._holder = None  # kernel_assets: the Assets of every runner's kernels, by file name

        def traced(*args, **kwargs):
            return self._trace(args, kwargs)

        functools.update_wrapper(traced, target, updated=())  # target's signature: TF binds arguments by it
        name = getattr(fn, "__name__", None) or type(fn).__name__
        # jit_compile=None: what TensorFlow saves and reloads is a plain function running our launch ops
        super().__init__(traced, name, input_signature=input_signature, autograph=False, jit_compile=None,
                         reduce_retracing=reduce_retracing)
        if _instance is not None:
            self.__signature__ = target.__signature__  # without ``self``: Keras binds call arguments by it

    # methods of tf.Module / Keras models: bind per instance, as tf.function does (the binding holds the
    # instance weakly, so it can still be freed; a Keras model's call binds its arguments by the signature)
    def __get__(self, instance, owner):
        if instance is None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            o = self._options
            bound = CompiledFunction(self._fn, jit_compile=o.jit_compile, input_signature=o.input_signature,
                                     reduce_retracing=o.reduce_retracing, autograph=o.autograph, backend=o.backend,
                                     _instance=weakref.ref(instance))
            self._bound[instance] = bound
        return bound

    def _flags(self) -> Flags:
        """``TFXLA_FLAGS`` as set now, with this function's own ``backend`` when it names one."""
        flags = Flags.from_env()
        backend = self._options.backend
        return flags if backend is None else dataclasses.replace(flags, backend=backend)

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
            elif isinstance(x, (tf.Tensor, tf.TensorSpec, np.ndarray, np.generic)):
                key.append(_tensor_key(x))  # a traced tensor of a static shape finds an eager call's kernels
            else:
                try:
                    hash(x)
                    key.append((type(x).__name__, x))
                except TypeError:
                    key.append((type(x).__name__, id(x)))
        return tuple(key), flat

    def _check_signature(self, flat_tensors) -> None:
        input_signature = self._options.input_signature
        if input_signature is None:
            return
        specs = tf.nest.flatten(input_signature, expand_composites=True)
        if len(specs) != len(flat_tensors):
            raise TypeError(f"{self.name}: expected {len(specs)} tensor argument(s) matching input_signature, "
                            f"got {len(flat_tensors)}")
        for k, (spec, x) in enumerate(zip(specs, flat_tensors)):
            t = tf.TensorSpec(x.shape if isinstance(x, (tf.Variable, tf.Tensor)) else np.shape(x), tf.as_dtype(x.dtype))
            if not tf.TensorSpec(spec.shape, spec.dtype).is_compatible_with(t):  # a TensorSpec or VariableSpec
                raise TypeError(f"{self.name}: argument {k} is {t}, not compatible with input_signature {spec}")

    @staticmethod
    def _any_shape(input_signature) -> bool:
        """An input_signature with a ``None`` dim (every rank known): try compiling once for every shape it
        accepts (``batch_tiling`` for a leading one alone, else ``symbolic_dims``)."""
        if input_signature is None:
            return False
        specs = [s for s in tf.nest.flatten(input_signature, expand_composites=True) if isinstance(s, tf.TensorSpec)]
        return all(s.shape.rank is not None for s in specs) and any(None in s.shape.as_list() for s in specs)

    def _build_any_shape(self, cf, flags: Flags) -> CompiledGraph | bool:
        """One compilation for every shape: batch tiles where only a leading dim is unknown and the clusters
        tile, else symbolic dims; False (with the reasons at INFO) to compile per input shape instead.
        All or nothing: a cluster that does not generalize is compiled per input shape, never dropped."""
        from tfxla_plugin.batch_tiling import NotTileable
        from tfxla_plugin.errors import UnsupportedGraphError

        must_compile = self._options.jit_compile is True
        why = []
        if not _unknown_inner_dims(self._options.input_signature):
            try:
                return CompiledGraph.build_tiled(cf, must_compile=must_compile, flags=flags, all_or_nothing=True)
            except NotTileable as e:
                why.append(f"batch tiles: {e}")
        try:
            return CompiledGraph.build_symbolic(cf, must_compile=must_compile, flags=flags, all_or_nothing=True)
        except NotSymbolic as e:
            why.append(f"symbolic dims: {e}")
        except UnsupportedGraphError as e:  # e.g. a loop whose shapes TF infers only at concrete input shapes
            why.append(f"symbolic dims: {str(e).splitlines()[0]} ({len(e.nodes)} node(s), at the probe sizes)")
        log.info("%s: compiling per input shape instead of once for every shape (at most --max_specializations=%d "
                 "shapes): %s", self.name, flags.max_specializations, "; ".join(why))
        return False

    def _compiled_tiled(self, args, kwargs):
        """The compilation for every shape of the input_signature (``_build_any_shape``), or None."""
        if self._tiled is None:
            flags = self._flags()
            cf = self._plain.get_concrete_function()  # traced here: an init_scope pauses the tapes it may open
            with tf.init_scope():  # compiled eagerly (the eager launch's constants), also while a graph is traced
                self._tiled = self._build_any_shape(cf, flags)
        if self._tiled is False:
            return None
        flat = tf.nest.flatten((args, kwargs), expand_composites=True)
        # the input_signature's TensorSpecs take a variable's value, as tf.function's do
        tensors = [tf.convert_to_tensor(x) if isinstance(x, tf.Variable) else x for x in flat if _is_tensor_like(x)]
        self._check_signature(tensors)
        if self._tiled.symbolic is not None and not self._symbols_agree(tensors):
            return None  # independent lengths at one position (encoder, decoder): compiled per shape instead
        return self._tiled, tensors

    def _symbols_agree(self, tensors) -> bool:
        """Whether this call's inputs agree on every symbol of the symbolic kernels: a symbol is a dim
        position, shared by every input whose input_signature leaves that dim None (``symbolic_dims``).
        Logged once when they do not (the call is compiled for its shapes)."""
        if self._unknown_dims is None:  # (input, dim position) of every None dim: found once, not per call
            specs = tf.nest.flatten(self._options.input_signature, expand_composites=True)
            self._unknown_dims = tuple((k, j) for k, spec in enumerate(specs) if isinstance(spec, tf.TensorSpec)
                                       for j, d in enumerate(spec.shape.as_list()) if d is None)
        seen: dict[int, set] = {}
        for k, j in self._unknown_dims:
            got = tensors[k].shape[j]  # None for a graph tensor of unknown dim: nothing to compare
            if got is not None:
                seen.setdefault(j, set()).add(int(got))
        apart = sorted(j for j, values in seen.items() if len(values) > 1)
        if apart and not self._apart_logged:
            self._apart_logged = True
            log.info("%s: inputs with unknown dim %s of different sizes in one call: such calls compile per "
                     "input shape (the symbolic kernels take one size per dim position)", self.name,
                     ", ".join(map(str, apart)))
        return not apart

    def _compiled(self, args, kwargs, *, calling: bool = False) -> tuple[CompiledGraph | None, list]:
        """The CompiledGraph for these arguments and its flat inputs. Past ``--max_specializations`` cached
        shapes a new one is compiled but not cached, or with ``calling`` (an eager call) not compiled at all:
        None, the call runs in TensorFlow."""
        if self._tiled is not False:
            found = self._compiled_tiled(args, kwargs)
            if found is not None:
                if calling and found[0].symbolic is not None and found[0].flags.specialize_after > 0:
                    return self._specialized(args, kwargs) or found
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
            limit = self._flags().max_specializations
            full = 0 < limit <= len(self._cache)
            if full and calling:
                self._warn_over_limit(limit, key)
                return None, tensors
            compiled = self._build(args, kwargs)
            if not full:
                self._cache[key] = compiled
        return compiled, tensors

    def _specialized(self, args, kwargs) -> tuple[CompiledGraph, list] | None:
        """Static kernels for this eager call's shapes once they have been called ``--specialize_after`` times
        (a symbolic kernel runs on one thread without oneDNN: where a shape recurs, specializing pays),
        within ``--max_specializations``; None while the symbolic kernels run the call."""
        if not kwargs and all(type(a) is _EagerTensor for a in args):  # the common case, kept cheap
            compiled = self._cache.get(tuple((a.dtype, a._shape_tuple()) for a in args))
            if compiled is not None:
                return compiled, list(args)
        key, flat = self._key(args, kwargs)
        compiled = self._cache.get(key)
        if compiled is None:
            flags = self._tiled.flags
            if len(self._seen) > _MAX_SEEN:
                self._seen.clear()
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen != flags.specialize_after or 0 < flags.max_specializations <= len(self._cache):
                return None
            try:
                compiled = self._build(args, kwargs)
            except Exception as e:  # noqa: BLE001  the symbolic kernels still serve this shape
                log.info("%s: no static kernels for %s (the symbolic ones run it): %s", self.name,
                         _describe_key(key), e)
                return None
            log.info("%s: %s called %d times: compiled static kernels for it", self.name, _describe_key(key), seen)
            self._cache[key] = compiled
        return compiled, _data_inputs(flat)

    def _warn_over_limit(self, limit: int, key: tuple) -> None:
        if self._over_limit_warned:
            return
        self._over_limit_warned = True
        log.warning("%s: %d input shapes compiled (--max_specializations=%d); calls with a new shape run in "
                    "TensorFlow uncompiled from now on (first: %s). Raise the limit in TFXLA_FLAGS, or give an "
                    "input_signature with None dims (compiled once for every shape)", self.name, len(self._cache),
                    limit, _describe_key(key))

    def _build(self, args, kwargs) -> CompiledGraph:
        """Trace and compile for these arguments (eagerly, also while a graph is traced); a ``None`` leading
        dim with the other dims known (traced from a TensorSpec) compiles once per batch tile, as ``wrap``."""
        flags = self._flags()
        must_compile = self._options.jit_compile is True
        args, kwargs = _as_specs((args, kwargs))
        cf = self._tf_function.get_concrete_function(*args, **kwargs)  # traced here: init_scope pauses tapes
        with tf.init_scope():  # compiled eagerly (the eager launch's constants), also while a graph is traced
            if batched_inputs(cf):
                return CompiledGraph.build_tiled(cf, must_compile=must_compile, flags=flags)
            if symbolic_dims_needed(cf):  # traced from TensorSpecs with unknown dims: symbolic kernels if they can be
                try:
                    return CompiledGraph.build_symbolic(cf, must_compile=must_compile, flags=flags,
                                                        all_or_nothing=must_compile)
                except NotSymbolic as e:
                    log.info("%s: no symbolic dims for this trace: %s", self.name, e)
            return self._build_static(cf, must_compile, flags)

    def _build_static(self, cf, must_compile: bool, flags: Flags) -> CompiledGraph:
        """``CompiledGraph.build``; a trace from TensorSpecs with unknown inner dims (``get_concrete_function``,
        saving) that compiles nothing says why, naming the inputs and their dims: in the error under
        must-compile, in a WARNING under "auto"."""
        from tfxla_plugin.errors import UnsupportedGraphError

        try:
            compiled = CompiledGraph.build(cf, must_compile=must_compile, flags=flags)
        except UnsupportedGraphError as e:
            why = symbolic_dims_needed(cf)
            if not why:
                raise
            raise UnsupportedGraphError(f"{e}\nWhy: {why}. Call {self.name} eagerly (each call's shapes are "
                                        "compiled) or trace it with static shapes", e.nodes) from e
        if not compiled.clusters:
            why = symbolic_dims_needed(cf)
            if why:
                log.warning("%s: this trace compiles no cluster and runs in TensorFlow: %s", self.name, why)
        return compiled

    # --- what TensorFlow traces (get_concrete_function, calls inside a graph, saving) -------------------
    def _trace(self, args, kwargs):
        """The body of this function's TensorFlow traces: the compiled graph for these (traced) arguments,
        imported with its kernels read from Assets (``saveable.AssetRunner``)."""
        if self._options.jit_compile is False:
            return self._plain(*args, **kwargs)
        compiled, tensors = self._compiled(args, kwargs)
        return compiled.pack_outputs(self._runner(compiled)(tensors))

    def _runner(self, compiled: CompiledGraph):
        entry = self._runners.get(id(compiled))
        if entry is None:
            from tfxla_plugin.saveable import AssetRunner

            with tf.init_scope():  # stages files and makes Assets: eager work
                entry = self._runners[id(compiled)] = (compiled, AssetRunner(compiled, self.kernel_assets.assets))
                self._track_assets()
        return entry[1]

    @property
    def kernel_assets(self):
        """The Assets of the kernels this function's traces read (``saveable.KernelAssets``). A method's
        instance (a ``tf.Module``, a Keras model) tracks it for ``tf.saved_model.save`` and ``model.export``;
        a function that is no method needs the saved object to hold it: ``module.kernels = f.kernel_assets``."""
        if self._holder is None:
            from tfxla_plugin.saveable import KernelAssets

            self._holder = KernelAssets()
        return self._holder

    def _owner(self):
        """The object this function is a method of (decorated in its class, or a bound method), or None."""
        if self._instance is not None:
            return self._instance()
        return getattr(self._fn, "__self__", None) if inspect.ismethod(self._fn) else None

    def _track_assets(self) -> None:
        holder = self.kernel_assets
        owner = self._owner()
        if isinstance(owner, tf.__internal__.tracking.Trackable):
            # a dependency of the instance: tf.saved_model.save reaches the Assets (a Function's own children
            # may only be its traces), and the captured kernel paths become the Assets' paths in the model
            owner._track_trackable(holder, name=f"_tfxla_kernels_{self.name}", overwrite=True)

    def _list_all_concrete_functions_for_serialization(self):
        # Without an input_signature, tf.function saves a trace per signature it was called with: so do we,
        # for the signatures called eagerly too (our eager calls skip TensorFlow's tracing).
        if self.input_signature is None:
            seen = ([c.concrete_function for c in list(self._cache.values())] if self._options.jit_compile is not False
                    else list(self._plain._list_all_concrete_functions()))
            for cf in seen:
                args, kwargs = cf.structured_input_signature
                self.get_concrete_function(*args, **kwargs)
        return super()._list_all_concrete_functions_for_serialization()

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        children = super()._trackable_children(save_type, **kwargs)  # the traces, when saving a SavedModel
        if save_type != "checkpoint" and self._holder is not None and self._holder.assets and self._owner() is None:
            log.warning(
                "%s: saving a compiled function that is no method: its kernels are saved only if the saved "
                "object tracks them (module.kernels = f.kernel_assets); otherwise the model names files of "
                "this process", self.name)
        return children

    # --- the public surface ----------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # the warm call: arguments whose eager runner was made (``_remember_run``), and nothing recording
        entry = self._runs.get(_call_key(args, kwargs) if kwargs else tuple(
            [(a._datatype_enum(), a._shape_tuple()) if type(a) is _EagerTensor else (type(a), a) if type(a) in _SCALARS
             else _UNKEPT for a in args]))
        if entry is not None:
            ctx = quick_context()
            if ctx is not None:
                run, picks = entry
                return run(ctx, args if picks is None else [args[k] if type(k) is int else kwargs[k] for k in picks])
        if self._options.jit_compile is False:
            return self._plain(*args, **kwargs)
        if not tf.executing_eagerly():  # a graph is being traced: TensorFlow's call, saveable
            return super().__call__(*args, **kwargs)
        compiled, tensors = self._compiled(args, kwargs, calling=True)
        if compiled is None:  # past --max_specializations: TensorFlow runs it (warned once)
            return self._plain(*args, **kwargs)
        outs = compiled.call_flat([t if type(t) is _EagerTensor or isinstance(t, tf.Variable) else tf.convert_to_tensor(t)
                                   for t in tensors])
        self._remember_run(args, kwargs, compiled)
        return compiled.pack_outputs(outs)

    def _remember_run(self, args: tuple, kwargs: dict, compiled: CompiledGraph) -> None:
        """Keep ``compiled``'s eager runner under ``__call__``'s key of these arguments (eager tensors by dtype
        enum and shape, Python scalars by type and value) when ``_compiled`` finds ``compiled`` for every call
        with that key: a per-shape compilation in ``_cache`` (its key is as fine), or the one for every shape
        (``_tiled``: its input_signature check passed for these dtypes and shapes) unless its symbolic kernels
        count calls per shape to specialize them (``_specialized``). A new dtype, shape or value still
        misses and takes ``_compiled``: the input_signature check, tracing, --max_specializations. With the
        runner go ``picks``: where the flat tensors come from (argument indices, keyword names in
        ``tf.nest`` order), None when they are the positional arguments as they are."""
        values = [*args, *kwargs.values()]
        if not all(type(v) is _EagerTensor or type(v) in _SCALARS for v in values):
            return  # variables, arrays, structures: their keys would hold them or cannot be built cheaply
        if kwargs or not all(type(a) is _EagerTensor for a in args):
            cache_key = self._key(args, kwargs)[0]
            picks = tuple([k for k, a in enumerate(args) if type(a) is _EagerTensor]
                          + [name for name in sorted(kwargs) if type(kwargs[name]) is _EagerTensor])
        else:
            cache_key, picks = tuple((a.dtype, a._shape_tuple()) for a in args), None
        stable = compiled is self._cache.get(cache_key) or (
            compiled is self._tiled and (compiled.symbolic is None or compiled.flags.specialize_after <= 0))
        if stable:
            if len(self._runs) >= _MAX_SEEN:  # e.g. every batch size of a tiled function: bounded
                self._runs.clear()
            key = _call_key(args, kwargs) if kwargs else tuple(_arg_key(a) for a in args)
            self._runs[key] = (compiled.eager_runner(), picks)

    @property
    def jit_compile(self) -> bool | str:
        """``True`` (must-compile), ``"auto"`` or ``False``, as given (TensorFlow's own ``_jit_compile`` of this
        Function is ``None``: what it traces and saves is not for XLA)."""
        return self._options.jit_compile

    @property
    def python_function(self):
        """The Python function compiled (for a method bound to an instance, that binding)."""
        return self._fn if self._instance is None else self._target

    def experimental_get_tracing_count(self) -> int:
        """How many times the Python function was traced: once per compiled signature, as ``tf.function``
        traces it per input shape (once with an input_signature that compiles for every batch size)."""
        if self._options.jit_compile is False:
            return self._plain.experimental_get_tracing_count()
        return self._tf_function.experimental_get_tracing_count() + self._plain.experimental_get_tracing_count()

    def pretty_printed_concrete_signatures(self, verbose: bool = True) -> str:
        """The signatures traced, printed as ``tf.function`` prints them (its input_signature's, if given)."""
        if self._options.input_signature is not None or self._options.jit_compile is False:
            return self._plain.pretty_printed_concrete_signatures(verbose)
        return self._tf_function.pretty_printed_concrete_signatures(verbose)

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
        """Like ``tf.function``'s: the arguments are values or TensorSpecs; returns ``ir(stage="hlo")`` (stages
        in ``tfxla_plugin.compiler_ir``: hlo, optimized_hlo, optimized_hlo_dot, c, clusters, graph, and the
        serialized ``HloModuleProto`` stages hlo_serialized, optimized_hlo_serialized,
        optimized_hlo_proto_serialized)."""
        from tfxla_plugin.compiler_ir import compiler_ir

        if self._options.jit_compile is False:
            raise ValueError("Compiler IR can only be returned for functions marked with 'jit_compile=True' "
                             "(or \"auto\")")
        compiled, _ = self._compiled(args, kwargs)

        def ir(stage: str = "hlo", device_name=None, platform_name=None) -> str | bytes | list[bytes]:
            if device_name is not None or platform_name is not None:
                raise ValueError("experimental_get_compiler_ir: tfxla-plugin compiles for its backend "
                                 f"({compiled.flags.backend}); choose it with function(..., backend=...), not "
                                 "device_name/platform_name")
            return compiler_ir(compiled, stage)
        return ir

    def compiled_graph(self, *args, **kwargs) -> CompiledGraph:
        return self._compiled(args, kwargs)[0]
