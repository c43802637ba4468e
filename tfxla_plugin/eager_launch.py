"""Calling one ``TfxlaLaunch`` eagerly at the cost of TF's executor alone.

The generated op wrapper (``tfxla_launch(...)``) converts every attr on every call through
``TFE_Py_FastPathExecute``: ~21 us here for a scalar launch, against ~8 us for executing the same
op with its attrs converted once (``TFE_Py_Execute``, what ``execute.quick_execute`` does). An
``EagerLaunch`` converts them once, when a signature is compiled, and takes that path whenever
nothing can want the op on a tape: executing eagerly with no GradientTape or forward accumulator
active. Otherwise (a tape is recording, or a graph is being built) it calls the wrapper, which
records the op for the registered gradient or adds a node.

``EagerStep`` is a whole call of a function that is one launch: its variable reads, the launch, and
the assigns of launch results back to variables (an optimizer step), in that order, as the graph
orders them. Without a tape the launch reads the variables itself from their handles, and the
assigns are executed like the launch (~4 us instead of ~10 us through their wrapper).
"""

from __future__ import annotations

from typing import NamedTuple

from tensorflow.python import pywrap_tfe
from tensorflow.python.framework import dtypes
from tensorflow.python.eager import context, core
from tensorflow.python.eager import execute as tf_execute
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops

from tfxla_plugin import _op

OP_NAME = "TfxlaLaunch"


class EagerLaunch:
    """One launch op with its attrs converted once. ``recorded`` attrs (the cluster graph its gradient
    differentiates, ``gradient.GRADIENT_ATTRS``) go only with an op a tape or a graph records."""

    def __init__(self, path, tin, tout, output_shapes, cluster: str, kernel_hash: str, extra: dict,
                 recorded: dict | None = None):
        self.path = path  # a string tensor: the kernel file
        self.kwargs = dict(kernel_path=path, Tout=tout, output_shapes=output_shapes, cluster=cluster,
                           kernel_hash=kernel_hash, **extra, **(recorded or {}))
        self.num_outputs = len(tout)
        attrs = ["Tin", [t.as_datatype_enum for t in tin], "Tout", [t.as_datatype_enum for t in tout],
                 "output_shapes", [tf_execute.make_shape(s, "output_shapes") for s in output_shapes],
                 "cluster", cluster, "kernel_hash", kernel_hash]
        for key, value in extra.items():
            attrs += [key, list(value)]
        self.attrs = tuple(attrs)

    def __call__(self, args: list) -> list:
        ctx = quick_context()
        if ctx is not None:
            try:
                return quick_execute(ctx, OP_NAME, [self.path, *args], self.attrs, self.num_outputs)
            except TypeError:  # an input that is not an EagerTensor: the wrapper converts it
                pass
        return self.wrapper(args)

    def wrapper(self, args: list) -> list:
        """The generated op wrapper: records the op on active tapes, or adds a node to a graph."""
        return _op.load_op_library().tfxla_launch(args=args, **self.kwargs)


def quick_context():
    """The eager context when nothing can want ops on a tape (executing eagerly, no tape or forward
    accumulator active), else None."""
    ctx = context.context()
    if ctx._context_handle is None:  # noqa: SLF001 - a context reset since the last call
        ctx.ensure_initialized()
    if ctx._thread_local_data.is_eager and pywrap_tfe.TFE_Py_TapeSetIsEmpty():  # noqa: SLF001
        return ctx
    return None


def quick_execute(ctx, op_name: str, inputs: list, attrs: tuple, num_outputs: int) -> list:
    """Execute ``op_name`` eagerly with attrs already converted; a TF error status raises its TF error.
    ``ctx`` is ``quick_context``'s: its handle and device are read without their properties."""
    try:
        return pywrap_tfe.TFE_Py_Execute(ctx._context_handle, ctx._thread_local_data.device_name,  # noqa: SLF001
                                         op_name, inputs, attrs, num_outputs)
    except core._NotOkStatusException as e:  # noqa: SLF001
        raise core._status_to_exception(e) from None  # noqa: SLF001


class CapturedHandle(NamedTuple):
    """A captured variable's resource handle whose Python variable is gone (a loaded SavedModel's, once
    the loaded object is freed; the handle keeps the resource alive): read and assigned through the
    handle, like a variable, but no tape can watch it."""

    handle: object  # an eager resource tensor
    dtype: object  # the variable's tf.DType


class EagerStep:
    """One call of a single-launch function: ``sources`` say where each launch input comes from, as
    (kind, what) pairs: ("arg", index) a data argument, ("value", tensor) a captured eager tensor,
    ("var", variable) a captured variable (or a ``CapturedHandle``), ("argvar", index) a variable passed
    as an argument;
    ``outputs`` are the launch results returned, ``assigns`` (("var", v) or ("argvar", index), result index)
    pairs.

    Without a tape the launch gets each variable's resource handle and reads it itself (one op per call;
    an eager ReadVariableOp costs ~5 us and a MobileNetV2 reads 262 variables); with one, the variables
    are read here, so that the tape sees them and the recorded launch takes their values."""

    def __init__(self, launch: EagerLaunch, sources: list, outputs: list[int], assigns: list):
        self.launch = launch
        self.sources = sources
        self.outputs = outputs
        self.assigns = assigns
        tin = list(launch.attrs[launch.attrs.index("Tin") + 1])
        for k, (kind, _) in enumerate(sources):
            if kind in ("var", "argvar"):
                tin[k] = dtypes.resource.as_datatype_enum
        attrs = list(launch.attrs)
        attrs[attrs.index("Tin") + 1] = tin
        self.handle_attrs = tuple(attrs)
        tout = launch.attrs[launch.attrs.index("Tout") + 1]
        self.assign_attrs = [("dtype", tout[k], "validate_shape", False) for _, k in assigns]
        # The launch inputs of a call without a tape, planned once: the kernel path, captured values and
        # captured variables' handles are fixed (the graph captured those handles when it was traced);
        # ``slots`` are (position, argument index, is a variable) to fill from each call's arguments;
        # ``direct``: the launch takes the first arguments as they are.
        self.direct = [kind for kind, _ in sources] == ["arg"] * len(sources) and \
            [src for _, src in sources] == list(range(len(sources)))
        self.num_inputs = len(sources)
        self.template = [launch.path] + [src.handle if kind == "var" else src if kind == "value" else None
                                         for kind, src in sources]
        self.slots = tuple((k + 1, src, kind == "argvar") for k, (kind, src) in enumerate(sources)
                           if kind in ("arg", "argvar"))
        self.all_outputs = bool(outputs) and outputs == list(range(launch.num_outputs))

    def __call__(self, flat_args: list) -> list:
        ctx = quick_context()
        if ctx is not None:
            return self.quick(ctx, flat_args)
        outs = self.launch.wrapper(self._values(flat_args))
        for target, k in self.assigns:
            gen_resource_variable_ops.assign_variable_op(_variable(target, flat_args).handle, outs[k])
        return [outs[k] for k in self.outputs]

    def quick(self, ctx, flat_args) -> list:
        """The call when nothing records it (``ctx`` from ``quick_context``): the launch on the variables'
        handles, executed with its attrs converted once, then the assigns."""
        if self.direct:  # arguments past the launch's are unused
            inputs = [self.launch.path, *flat_args[:self.num_inputs]]
        else:
            inputs = list(self.template)
            for pos, k, variable in self.slots:
                inputs[pos] = flat_args[k].handle if variable else flat_args[k]
        try:
            outs = pywrap_tfe.TFE_Py_Execute(ctx._context_handle, ctx._thread_local_data.device_name,  # noqa: SLF001
                                             OP_NAME, inputs, self.handle_attrs, self.launch.num_outputs)
        except core._NotOkStatusException as e:  # noqa: SLF001
            raise core._status_to_exception(e) from None  # noqa: SLF001
        except TypeError:  # an argument that is not an EagerTensor: the wrapper converts it
            outs = self.launch.wrapper(self._values(flat_args))
        if self.assigns:
            for (target, k), attrs in zip(self.assigns, self.assign_attrs):
                quick_execute(ctx, "AssignVariableOp", [_variable(target, flat_args).handle, outs[k]], attrs, 0)
        return outs if self.all_outputs else [outs[k] for k in self.outputs]

    def _values(self, flat_args: list) -> list:
        """The launch inputs as values: the variables read (a tape sees the reads)."""
        return [flat_args[src] if kind == "arg" else src if kind == "value" else _read(_variable((kind, src), flat_args))
                for kind, src in self.sources]


def _variable(target: tuple, flat_args: list):
    """The variable a ("var", variable) or ("argvar", index) source or assign target names."""
    kind, src = target
    return src if kind == "var" else flat_args[src]


def _read(v):
    """An eager variable read for the launch: ~5x cheaper than ``v.read_value()`` (no name scope,
    no identity), and still marks the variable accessed so an outer GradientTape watches it."""
    if not isinstance(v, CapturedHandle):
        resource_variable_ops.variable_accessed(v)
    return gen_resource_variable_ops.read_variable_op(v.handle, v.dtype)
