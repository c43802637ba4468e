"""Running a compiled module: device buffers, the host program, PyCUDA (imported lazily).

``compile(module)`` verifies the module, generates the CUDA source and host
program, and compiles the fat binary (nvcc, cached); none of this needs a
GPU or PyCUDA. The first call of the ``Executable`` loads the fat binary
into the primary context of device 0 (``pycuda.autoprimaryctx``, the context
TensorFlow and JAX share; never ``autoinit``), and allocates every device
buffer once: one per entry input and output and the scratch arena; each
launch's pointer arguments are resolved then. A call copies the inputs in,
runs the program's steps on one stream (host control flow reads a
predicate or branch index back), and copies the outputs out.

The device is an object with a small interface (``Device``), so the program
interpreter is the same for PyCUDA and for tests that emulate kernels on
the host. ``CudaUnavailable`` names what is missing when PyCUDA or a GPU is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backends.codegen.abi import physical_order
from backends.cuda.codegen import CodegenOptions, GeneratedModule, generate
from backends.cuda.compiler import CompiledFatbin, NvccOptions, compile_fatbin
from backends.cuda.pipeline import prepare
from backends.cuda.program import BufRef, Copy, Launch, Switch, WhileLoop
from hlo.dtypes import PrimitiveType
from hlo.ir import HloModule
from hlo.verifier import verify


class CudaUnavailable(RuntimeError):
    """PyCUDA, the CUDA driver or a GPU is missing (the message says which)."""


class Device(Protocol):
    def load(self, fatbin: bytes, kernels: tuple[str, ...]) -> None: ...
    def alloc(self, nbytes: int) -> int: ...
    def global_ptr(self, symbol: str) -> int: ...
    def htod(self, ptr: int, array: np.ndarray) -> None: ...
    def dtoh(self, array: np.ndarray, ptr: int) -> None: ...
    def dtod(self, dst: int, src: int, nbytes: int) -> None: ...
    def launch(self, kernel: str, grid, block, args: tuple[int, ...], shared_bytes: int) -> None: ...
    def synchronize(self) -> None: ...


class PyCudaDevice:
    """Device 0 through PyCUDA, in the primary context, on one stream."""

    def __init__(self):
        try:
            import pycuda.driver as drv
        except ImportError as e:
            raise CudaUnavailable(
                "the CUDA backend needs PyCUDA to run kernels, and it is not installed "
                "(pip install pycuda on a machine with the CUDA driver and headers; "
                f"generating and compiling CUDA needs only nvcc): {e}") from e
        try:
            import pycuda.autoprimaryctx  # noqa: F401 (the primary context, shared with TF/JAX)
        except Exception as e:  # noqa: BLE001 (pycuda raises its own error types, or RuntimeError)
            raise CudaUnavailable(f"no usable CUDA GPU: the CUDA driver could not be initialized: {e}") from e
        self.drv = drv
        self.stream = drv.Stream()
        self.module = None
        self.functions: dict = {}
        self._prepared: set[str] = set()
        self._keep: list = []

    def load(self, fatbin: bytes, kernels: tuple[str, ...]) -> None:
        self.module = self.drv.module_from_buffer(fatbin)
        self.functions = {name: self.module.get_function(name) for name in kernels}

    def alloc(self, nbytes: int) -> int:
        mem = self.drv.mem_alloc(max(int(nbytes), 256))
        self._keep.append(mem)
        return int(mem)

    def global_ptr(self, symbol: str) -> int:
        ptr, _size = self.module.get_global(symbol)
        return int(ptr)

    # Host copies are synchronous (NumPy arrays are pageable memory); on the legacy default stream they
    # are ordered with the work on ``self.stream`` (a blocking stream).
    def htod(self, ptr: int, array: np.ndarray) -> None:
        if array.nbytes:
            self.drv.memcpy_htod(ptr, array)

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        if array.nbytes:
            self.stream.synchronize()
            self.drv.memcpy_dtoh(array, ptr)

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        self.drv.memcpy_dtod_async(dst, src, nbytes, self.stream)

    def launch(self, kernel: str, grid, block, args: tuple[int, ...], shared_bytes: int) -> None:
        fn = self.functions[kernel]
        if kernel not in self._prepared:  # every kernel parameter is a pointer
            fn.prepare("P" * len(args))
            self._prepared.add(kernel)
        fn.prepared_async_call(tuple(grid), tuple(block), self.stream, *args, shared_size=shared_bytes)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def timer(self):
        """A pair of events around work on this stream: ``start()``, ``stop() -> milliseconds``."""
        drv, stream = self.drv, self.stream

        class Timer:
            def start(self):
                self.a, self.b = drv.Event(), drv.Event()
                self.a.record(stream)

            def stop(self) -> float:
                self.b.record(stream)
                self.b.synchronize()
                return self.b.time_since(self.a)
        return Timer()


@dataclass(frozen=True)
class CompileOptions:
    codegen: CodegenOptions | None = None
    nvcc: NvccOptions | None = None
    cache_dir: str | None = None
    prepared: bool = False  # the module went through the CUDA pipeline (or ``prepare``): compile it as given


class Executable:
    """A compiled module; ``exe(*arrays)`` runs it on the GPU and returns the outputs as NumPy arrays."""

    def __init__(self, module: HloModule, generated: GeneratedModule, compiled: CompiledFatbin,
                 device_factory=PyCudaDevice):
        self.module = module
        self.generated = generated
        self.compiled = compiled
        self._device_factory = device_factory
        self.device = None
        sig = generated.signature
        self.inputs = [(PrimitiveType.from_text(i["dtype"]), tuple(i["dims"]), physical_order(i)) for i in sig["inputs"]]
        self.outputs = [(PrimitiveType.from_text(o["dtype"]), tuple(o["dims"]), physical_order(o)) for o in sig["outputs"]]

    @property
    def source(self) -> str:
        return self.generated.source

    @property
    def cache_hit(self) -> bool:
        return self.compiled.cache_hit

    # --- loading, once ---------------------------------------------------------------
    def load(self) -> None:
        if self.device is not None:
            return
        device = self._device_factory()
        device.load(self.compiled.read(), self.generated.kernels)
        self._in_ptrs = [device.alloc(_nbytes(d, s)) for d, s, _ in self.inputs]
        self._out_ptrs = [device.alloc(_nbytes(d, s)) for d, s, _ in self.outputs]
        self._scratch = device.alloc(self.generated.program.scratch_bytes)
        self._globals: dict[str, int] = {}
        self.device = device
        self._steps = self._bind(self.generated.program.steps)

    def _ptr(self, ref: BufRef) -> int:
        if ref.space == "input":
            return self._in_ptrs[ref.index]
        if ref.space == "output":
            return self._out_ptrs[ref.index]
        if ref.space == "scratch":
            return self._scratch + ref.offset
        if ref.symbol not in self._globals:
            self._globals[ref.symbol] = self.device.global_ptr(ref.symbol)
        return self._globals[ref.symbol] + ref.offset

    def _bind(self, steps) -> list:
        """Steps with every buffer resolved to a device address (done once, at load)."""
        out = []
        for s in steps:
            if isinstance(s, Launch):
                out.append(("launch", s.kernel, s.grid, s.block, tuple(self._ptr(a) for a in s.args), s.shared_bytes))
            elif isinstance(s, Copy):
                out.append(("copy", self._ptr(s.dst), self._ptr(s.src), s.nbytes))
            elif isinstance(s, WhileLoop):
                out.append(("while", self._bind(s.cond), self._ptr(s.pred), self._bind(s.body)))
            elif isinstance(s, Switch):
                out.append(("switch", self._ptr(s.index), s.is_pred, [self._bind(b) for b in s.branches]))
        return out

    # --- running -----------------------------------------------------------------------
    def _run(self, steps) -> None:
        dev = self.device
        for s in steps:
            kind = s[0]
            if kind == "launch":
                dev.launch(s[1], s[2], s[3], s[4], s[5])
            elif kind == "copy":
                dev.dtod(s[1], s[2], s[3])
            elif kind == "while":
                flag = np.zeros(1, np.uint8)
                while True:
                    self._run(s[1])
                    dev.dtoh(flag, s[2])
                    dev.synchronize()
                    if not flag[0]:
                        break
                    self._run(s[3])
            elif kind == "switch":
                index = np.zeros(1, np.uint8 if s[2] else np.int32)
                dev.dtoh(index, s[1])
                dev.synchronize()
                k = (0 if index[0] else 1) if s[2] else int(index[0])
                branches = s[3]
                self._run(branches[k if 0 <= k < len(branches) else len(branches) - 1])

    def set_inputs(self, *args) -> None:
        """Copy inputs to the device (checked like the CPU backend: count, dtype, rank, dims)."""
        self.load()
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.module.name} takes {len(self.inputs)} input(s), got {len(args)}")
        for k, (arg, (dtype, dims, order)) in enumerate(zip(args, self.inputs)):
            if hasattr(arg, "gpudata") and not isinstance(arg, np.ndarray):  # a pycuda GPUArray
                self._check(k, np.dtype(arg.dtype), tuple(arg.shape), dtype, dims)
                if order is not None:
                    raise ValueError(f"input {k}: a GPUArray input needs a row-major layout")
                self.device.dtod(self._in_ptrs[k], int(arg.gpudata), _nbytes(dtype, dims))
                continue
            a = np.asarray(arg)
            self._check(k, a.dtype, a.shape, dtype, dims)
            a = np.ascontiguousarray(a if order is None else np.transpose(a, order))
            self.device.htod(self._in_ptrs[k], a)

    @staticmethod
    def _check(k, got_dtype, got_dims, dtype, dims) -> None:
        if got_dtype != dtype.numpy:
            raise TypeError(f"input {k}: expected dtype {dtype.value} ({dtype.numpy}), got {got_dtype}")
        if len(got_dims) != len(dims):
            raise ValueError(f"input {k}: expected rank {len(dims)} {list(dims)}, got dims {list(got_dims)}")
        if tuple(got_dims) != tuple(dims):
            raise ValueError(f"input {k}: expected dims {list(dims)}, got {list(got_dims)}")

    def run_device(self) -> None:
        """Run the program on the inputs already on the device (no copies in or out; asynchronous)."""
        self.load()
        self._run(self._steps)

    def get_outputs(self) -> list[np.ndarray]:
        outs = []
        for (dtype, dims, order), ptr in zip(self.outputs, self._out_ptrs):
            o = np.empty(dims if order is None else tuple(dims[d] for d in order), dtype.numpy)
            self.device.dtoh(o, ptr)
            outs.append(o)
        self.device.synchronize()
        return [o if order is None else np.ascontiguousarray(np.transpose(o, np.argsort(order)))
                for o, (_, _, order) in zip(outs, self.outputs)]

    def __call__(self, *args) -> list[np.ndarray]:
        self.set_inputs(*args)
        self.run_device()
        return self.get_outputs()


def _nbytes(dtype: PrimitiveType, dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n * np.dtype(dtype.numpy).itemsize


def compile(module: HloModule, options: CompileOptions | None = None, device_factory=PyCudaDevice) -> Executable:  # noqa: A001
    """Verify ``module``, run the CUDA backend's kernel-shape passes on it (``pipeline.prepare``: the row
    programs) unless ``options.prepared``, generate and compile it (nvcc; no GPU needed until the first call)."""
    options = options or CompileOptions()
    verify(module)
    if not options.prepared:
        module = prepare(module)
    generated = generate(module, options.codegen)
    compiled = compile_fatbin(generated.source, options.nvcc, options.cache_dir, name=module.name)
    return Executable(module, generated, compiled, device_factory)
