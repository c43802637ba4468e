"""Calling one ``TfxlaLaunch`` eagerly at the cost of TF's executor alone.

The generated op wrapper (``tfxla_launch(...)``) converts every attr on every call through
``TFE_Py_FastPathExecute``: ~21 us here for a scalar launch, against ~8 us for executing the same
op with its attrs converted once (``TFE_Py_Execute``, what ``execute.quick_execute`` does). An
``EagerLaunch`` converts them once, when a signature is compiled, and takes that path whenever
nothing can want the op on a tape: executing eagerly with no GradientTape or forward accumulator
active. Otherwise (a tape is recording, or a graph is being built) it calls the wrapper, which
records the op for the registered gradient or adds a node.
"""

from __future__ import annotations

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, core
from tensorflow.python.eager import execute as tf_execute

from tfxla_plugin import _op

OP_NAME = "TfxlaLaunch"


class EagerLaunch:
    def __init__(self, path, tin, tout, output_shapes, cluster: str, kernel_hash: str, extra: dict):
        self.path = path  # a string tensor: the kernel file
        self.kwargs = dict(kernel_path=path, Tout=tout, output_shapes=output_shapes, cluster=cluster,
                           kernel_hash=kernel_hash, **extra)
        self.num_outputs = len(tout)
        attrs = ["Tin", [t.as_datatype_enum for t in tin], "Tout", [t.as_datatype_enum for t in tout],
                 "output_shapes", [tf_execute.make_shape(s, "output_shapes") for s in output_shapes],
                 "cluster", cluster, "kernel_hash", kernel_hash]
        for key, value in extra.items():
            attrs += [key, list(value)]
        self.attrs = tuple(attrs)

    def __call__(self, args: list) -> list:
        ctx = context.context()
        if ctx._handle is None:  # noqa: SLF001 - a context reset since the last call
            ctx.ensure_initialized()
        if ctx._thread_local_data.is_eager and pywrap_tfe.TFE_Py_TapeSetIsEmpty():  # noqa: SLF001
            try:
                return pywrap_tfe.TFE_Py_Execute(ctx._handle, ctx.device_name, OP_NAME,  # noqa: SLF001
                                                 [self.path, *args], self.attrs, self.num_outputs)
            except core._NotOkStatusException as e:  # noqa: SLF001
                raise core._status_to_exception(e) from None  # noqa: SLF001
            except TypeError:  # an input that is not an EagerTensor: the wrapper converts it
                pass
        return _op.load_op_library().tfxla_launch(args=args, **self.kwargs)
