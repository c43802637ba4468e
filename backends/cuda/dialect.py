"""The CUDA dialect of the CPU backend's elemental emitter (a CUDA-side adapter, no CPU change).

CUDA C is C++ with a few extensions, so the CPU elemental rules
(``backends/cpu/elemental_*.py``: one scalar C expression per opcode) are
reused as they are, with three adaptations made here:

* ``CudaBuffer`` drops the OpenMP pragmas those rules emit and spells the f16
  storage type ``__half`` (nvcc has no ``_Float16`` in device code);
* ``ConstantTable`` declares constants as ``__device__`` arrays (f16 ones as
  their bit patterns, read through a ``const __half*`` cast);
* the helper functions the rules call are ``__device__`` functions of the
  CUDA prelude (``backends/cuda/prelude.py``).

Types: ``storage``/``compute``/``load``/``store`` are the CPU ones in CUDA spelling.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from backends.codegen.buffer import IndentedBuffer
from backends.cpu import ctypes_c as C
from backends.cpu import elemental_data, elemental_math, elemental_misc, elemental_window  # noqa: F401 (rules)
from backends.cpu.elemental import CodegenUnsupported, ElementalEmitter, Names
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.shapes import Shape

_F16_CPU, _F16_CUDA = "_Float16", "__half"


def cuda_text(text: str) -> str:
    return text.replace(_F16_CPU, _F16_CUDA)


class CudaBuffer(IndentedBuffer):
    """An ``IndentedBuffer`` that writes CUDA C: OpenMP pragmas dropped, f16 spelled ``__half``."""

    def line(self, text: str = "") -> None:
        if text.lstrip().startswith("#pragma omp"):
            return
        super().line(cuda_text(text))


def storage(t: P) -> str:
    try:
        return cuda_text(C.storage(t))
    except CodegenUnsupported:
        raise CodegenUnsupported(f"the CUDA backend does not support element type {t.value}") from None


def compute(t: P) -> str:
    storage(t)
    return C.compute(t)


def load(t: P, expr: str) -> str:
    return cuda_text(C.load(t, expr))


def store(t: P, expr: str) -> str:
    return cuda_text(C.store(t, expr))


def literal(value, t: P) -> str:
    return C.literal(value, t)


class ConstantTable:
    """``__device__`` arrays for the module's constants, named ``k_0``, ``k_1``, ... in first-use order."""

    def __init__(self) -> None:
        self.globals = CudaBuffer()
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
                values = C.numpy_to_c_array(arr, shape.dtype) if shape.num_elements else "0"
                self.globals.line(f"[[maybe_unused]] __device__ const {storage(shape.dtype)} {name}[{n}] = {{{values}}};")
            self._names[key] = name
            self._keep.append(inst)
        return self._names[key]

    def ref(self, inst: HloInstruction) -> str:
        """A pointer expression to the constant's elements in their storage type (for the elemental rules)."""
        name = self.symbol(inst)
        return f"((const __half*){name})" if inst.shape.dtype is P.F16 else name


def emitter(module: HloModule, comp: HloComputation, params: Sequence[Callable], buf: IndentedBuffer,
            names: Names, constants: ConstantTable, external: dict | None = None) -> ElementalEmitter:
    """The CPU elemental emitter writing CUDA C into ``buf`` (one element per call of ``emit``)."""
    em = ElementalEmitter(module, comp, params, buf, names, constants.ref, external)
    em.parallel_reduce = False
    return em
