"""Loading a compiled kernel and calling it from Python through its C ABI (ctypes), on the process's
kernel thread pool (``thread_pool.py``)."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from backends.codegen.abi import STATUS_INVALID_ARGUMENT, check_abi_version, physical_order
from backends.cpu import thread_pool
from backends.shared_object import LoadError, load_library, read_record
from hlo.dtypes import PrimitiveType

_ERR_LEN = 1024


class KernelError(RuntimeError):
    """A kernel returned an error status (its message says why)."""


class KernelInvalidArgument(KernelError, ValueError):
    """The kernel refused the data (``STATUS_INVALID_ARGUMENT``: a gather index outside its operand), with
    TF's message; where TF raises ``InvalidArgumentError``."""


class Kernel:
    """A loaded shared object with its signature; ``run`` calls it on NumPy arrays.

    The object loaded is the bytes of ``path`` as read once and checked (``backends.shared_object``):
    a complete ELF file whose sha256 is ``sha256``, or, when that is not given, the one its kernel
    cache record (``<path>.sha256``) holds, if it has one.

    ``num_threads``: the threads its parallel loops run on (the calling thread included; None: the CPUs
    this process may use, ``thread_pool.default_threads()``; 1: all on the calling thread; a CUDA host
    launcher, whose program runs on the device, gets none). Each object has its own scratch: threads
    calling kernels at once use one ``Kernel`` each."""

    def __init__(self, path: str | Path, sha256: str | None = None, num_threads: int | None = None):
        self.path = Path(path)
        try:
            self.lib = load_library(self.path, sha256 if sha256 is not None else read_record(self.path))
        except LoadError as e:
            raise KernelError(f"cannot load kernel {self.path}: {e}") from None
        for sym in ("tfxla_abi_version", "tfxla_signature", "tfxla_run", "tfxla_init", "tfxla_teardown"):
            if not hasattr(self.lib, sym):
                raise KernelError(f"{self.path} is not a tfxla kernel: missing symbol {sym}")
        self.lib.tfxla_abi_version.restype = ctypes.c_int
        refused = check_abi_version(int(self.lib.tfxla_abi_version()), f"kernel {self.path}")
        if refused is not None:
            raise KernelError(refused)
        self.lib.tfxla_signature.restype = ctypes.c_char_p
        self.signature = json.loads(self.lib.tfxla_signature().decode())
        self.lib.tfxla_run.restype = ctypes.c_int
        self.lib.tfxla_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.tfxla_init.restype = ctypes.c_int
        self.lib.tfxla_init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.tfxla_teardown.argtypes = [ctypes.c_void_p]
        # A kernel with symbolic dims (ABI 3) has -1 for them and says its output dims and scratch per call.
        self.symbolic = int(self.signature.get("abi_version", 2)) >= 3
        if self.symbolic:
            if not hasattr(self.lib, "tfxla_shapes"):
                raise KernelError(f"{self.path} has symbolic dims but no tfxla_shapes")
            self.lib.tfxla_shapes.restype = ctypes.c_int
            self.lib.tfxla_shapes.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                                              ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t]
        self.inputs = [(PrimitiveType.from_text(i["dtype"]), tuple(i["dims"])) for i in self.signature["inputs"]]
        self.outputs = [(PrimitiveType.from_text(o["dtype"]), tuple(o["dims"])) for o in self.signature["outputs"]]
        self._runtime = None if self.signature.get("backend") == "cuda" else thread_pool.runtime(num_threads)
        self.num_threads = self._runtime.num_threads if self._runtime is not None else 1
        # Buffers are in each shape's layout: the major-to-minor order of the dims, when it is not row-major.
        self._in_order = [physical_order(i) for i in self.signature["inputs"]]
        self._out_order = [physical_order(o) for o in self.signature["outputs"]]
        self._scratch_for(int(self.signature["scratch_bytes"]))
        self._state = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERR_LEN)
        if self.lib.tfxla_init(ctypes.byref(self._state), err, _ERR_LEN) != 0:
            raise KernelError(f"kernel init failed: {err.value.decode(errors='replace')}")

    def _scratch_for(self, nbytes: int) -> None:
        """A 64-byte aligned scratch of at least ``nbytes`` (kept, grown when a call needs more)."""
        if getattr(self, "_scratch", None) is not None and self._scratch.size >= nbytes + 64:
            return
        self._scratch = np.empty(nbytes + 64, np.uint8)
        self._scratch_ptr = self._scratch.ctypes.data + (-self._scratch.ctypes.data) % 64

    def _output_dims(self, dims: list[int]) -> list[tuple[int, ...]]:
        """The outputs' dims for these input dims: the signature's, or a symbolic kernel's ``tfxla_shapes``."""
        if not self.symbolic:
            return [shape for _, shape in self.outputs]
        dim_arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        out = (ctypes.c_int64 * max(sum(len(s) for _, s in self.outputs), 1))()
        scratch = ctypes.c_int64()
        err = ctypes.create_string_buffer(_ERR_LEN)
        status = self.lib.tfxla_shapes(dim_arr, out, ctypes.byref(scratch), err, _ERR_LEN)
        if status != 0:
            message = err.value.decode(errors="replace")
            raise (KernelInvalidArgument if status == STATUS_INVALID_ARGUMENT else KernelError)(message)
        self._scratch_for(scratch.value)
        shapes, pos = [], 0
        for _, shape in self.outputs:
            shapes.append(tuple(out[pos:pos + len(shape)]))
            pos += len(shape)
        return shapes

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is not None and getattr(self, "_state", None) is not None:
            lib.tfxla_teardown(self._state)

    def run(self, *args) -> list[np.ndarray]:
        if len(args) != len(self.inputs):
            raise TypeError(f"kernel takes {len(self.inputs)} input(s), got {len(args)}")
        arrays = []
        dims: list[int] = []
        for k, (arg, (dtype, shape)) in enumerate(zip(args, self.inputs)):
            a = np.asarray(arg)
            if a.dtype != dtype.numpy:
                raise TypeError(f"input {k}: expected dtype {dtype.value} ({dtype.numpy}), got {a.dtype}")
            if a.ndim != len(shape):
                raise ValueError(f"input {k}: expected rank {len(shape)} {list(shape)}, got dims {list(a.shape)}")
            order = self._in_order[k]
            arrays.append(np.ascontiguousarray(a if order is None else np.transpose(a, order)))
            dims.extend(a.shape)
        outs = [np.empty(shape if order is None else tuple(shape[d] for d in order), dtype.numpy)
                for (dtype, _), shape, order in zip(self.outputs, self._output_dims(dims), self._out_order)]
        in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        dim_arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        err = ctypes.create_string_buffer(_ERR_LEN)
        rt = ctypes.byref(self._runtime) if self._runtime is not None else None
        status = self.lib.tfxla_run(self._state, in_ptrs, dim_arr, out_ptrs, self._scratch_ptr, rt, err, _ERR_LEN)
        if status != 0:
            message = err.value.decode(errors="replace")
            raise (KernelInvalidArgument if status == STATUS_INVALID_ARGUMENT else KernelError)(message)
        return [o if order is None else np.ascontiguousarray(np.transpose(o, np.argsort(order)))
                for o, order in zip(outs, self._out_order)]
