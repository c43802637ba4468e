"""The CUDA backend's dialect of the shared elemental emitter (``backends/codegen/dialect.py``).

CUDA C is C++ with a few extensions, so the elemental rules (``backends/codegen/elemental_*.py``:
one scalar C expression per opcode) write device code as they write the CPU's C, asking this
dialect for what differs:

* f16 is stored as ``__half`` (nvcc has no ``_Float16`` in device code), so it is loaded, stored
  and rounded through ``__half`` conversions;
* there are no vector or OpenMP pragmas, and no reduction is split over threads inside one
  element (a reduction kernel strategy parallelizes a reduction instead);
* prelude helpers are ``__device__ __forceinline__`` functions (``backends/cuda/prelude.py``), bit
  counts CUDA intrinsics.

``ConstantTable`` declares constants as ``__device__`` arrays (f16 ones as their bit patterns, read
through a ``const __half*`` cast). ``storage``/``compute``/``load``/``store``/``literal`` are the
dialect's own, for the kernel strategies.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.dialect import Dialect
from backends.codegen.elemental import ElementalEmitter, ParamFn
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.names import Names
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.shapes import Shape


class CudaDialect(Dialect):
    backend = "CUDA"
    f16 = "__half"
    inline_function = "__device__ __forceinline__"

    def popcount64(self, expr: str) -> str:
        return f"__popcll({expr})"

    def clz64(self, expr: str) -> str:
        return f"__clzll((long long){expr})"


CUDA = CudaDialect()
storage, compute, load, store, literal = CUDA.storage, CUDA.compute, CUDA.load, CUDA.store, CUDA.literal


class ConstantTable:
    """``__device__`` arrays for the module's constants, named ``k_0``, ``k_1``, ... in first-use order."""

    def __init__(self) -> None:
        self.globals = IndentedBuffer()
        self._names: dict[int, str] = {}
        self._keep: list[HloInstruction] = []  # keeps ids stable while the table lives

    def symbol(self, inst: HloInstruction) -> str:
        """The name of the device array holding constant ``inst`` (declared on first use)."""
        key = id(inst)
        if key not in self._names:
            if inst.literal is None or inst.literal.is_elided:
                raise CodegenUnsupported(f"%{inst.name}: constant elided in the HLO text ({{...}})")
            shape = inst.shape
            if not isinstance(shape, Shape) or not shape.dtype.is_array_type:
                raise CodegenUnsupported(f"%{inst.name}: tuple constants are not supported")
            name = f"k_{len(self._names)}"
            arr = inst.literal.to_numpy()
            n = max(shape.num_elements, 1)
            if shape.dtype is P.F16:
                bits = np.ascontiguousarray(arr).reshape(-1).astype(np.float16).view(np.uint16)
                values = ", ".join(str(int(v)) for v in bits) or "0"
                self.globals.line(f"[[maybe_unused]] __device__ const uint16_t {name}[{n}] = {{{values}}};")
            else:
                values = CUDA.numpy_to_c_array(arr, shape.dtype) if shape.num_elements else "0"
                self.globals.line(f"[[maybe_unused]] __device__ const {storage(shape.dtype)} {name}[{n}] = {{{values}}};")
            self._names[key] = name
            self._keep.append(inst)
        return self._names[key]

    def ref(self, inst: HloInstruction) -> str:
        """A pointer expression to the constant's elements in their storage type (for the elemental rules)."""
        name = self.symbol(inst)
        return f"((const __half*){name})" if isinstance(inst.shape, Shape) and inst.shape.dtype is P.F16 else name


def emitter(module: HloModule, comp: HloComputation, params: Sequence[ParamFn], buf: IndentedBuffer,
            names: Names, constants: ConstantTable, external: dict[str, ParamFn] | None = None) -> ElementalEmitter:
    """The elemental emitter writing CUDA C into ``buf`` (one element per call of ``emit``)."""
    return ElementalEmitter(CUDA, module, comp, params, buf, names, constants.ref, external)
