"""The top-level kernel of ``fft``: the C library of ``fft_c.py``, one plan per transformed length in the
kernel's state (built by ``tfxla_init``), and one driver call per transformed axis.

* FFT/IFFT: the operand is copied into the result (unless the result took its buffer), then every
  transformed axis, last first, is transformed in place.
* RFFT: the real rows of the last axis go to their ``n/2 + 1`` frequencies in the result, then the
  other transformed axes are complex FFTs in place.
* IRFFT: the operand is copied into a scratch buffer, the transformed axes but the last are inverse
  FFTs there in place, then the Hermitian rows become the real rows of the result.

Buffers must be row-major (the layout pass gives every buffer XLA's default layout on this backend);
another layout is refused with ``CodegenUnsupported``. A zero-size operand or result writes nothing
(a result with elements, from an empty transform, is zeros, as the evaluator's).
"""

from __future__ import annotations

import enum
import math

from backends.codegen.errors import CodegenUnsupported
from backends.cpu.computation import Buf, ComputationEmitter, Value, top_level
from backends.cpu.fft_c import common_c, precision_c
from backends.cpu.kernels_dnnl import strides_of
from hlo.attributes import FftType
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


class Lines(enum.IntEnum):
    """What ``tfxla_fft_run`` does to each line (the C library's ``kind``)."""

    COMPLEX = 0  # a complex line, in place
    REAL_TO_HALF = 1  # a real row to its n/2 + 1 non-negative frequencies (RFFT)
    HALF_TO_REAL = 2  # a Hermitian half spectrum to its real row (IRFFT)


def _row_major(buf: Buf, inst: HloInstruction, what: str) -> None:
    if strides_of(buf.shape) != strides_of(Shape.array(buf.shape.dtype, buf.shape.dims)):
        raise CodegenUnsupported(f"%{inst.name}: fft on the CPU backend needs row-major buffers; the {what} is "
                                 f"{buf.shape}")


def _plan(em: ComputationEmitter, n: int, sfx: str, real: bool = False) -> str:
    """The state field holding the plan of length ``n`` (built once per module, precision and kind: a real
    plan transforms real rows)."""
    gen = em.gen
    plans: dict[tuple[int, str, bool], str] = gen.__dict__.setdefault("_fft_plans", {})
    key = (n, sfx, real)
    if key not in plans:
        field = f"fft_{'r' if real else ''}{sfx}{n}"
        init = f"tfxla_fft_plan_init_{'real_' if real else ''}{sfx}"
        plans[key] = field
        gen.state_fields.line(f"struct tfxla_fft_plan_{sfx}* {field};")
        gen.init_code.line(f"st->{field} = (tfxla_fft_plan_{sfx}*)malloc(sizeof(tfxla_fft_plan_{sfx}));")
        gen.init_code.line(f"if (!st->{field} || {init}(st->{field}, {n})) "
                           f"{{ snprintf(err, errlen, \"fft: out of memory planning length {n}\"); return 1; }}")
        gen.teardown_code.line(f"if (st->{field}) {{ tfxla_fft_plan_free_{sfx}(st->{field}); free(st->{field}); }}")
    return f"tfxla_st->{plans[key]}"


def _run(em: ComputationEmitter, inst: HloInstruction, plan: str, sfx: str, src: str, dst: str, lines: int,
         length: int, inner: int, half: int, kind: Lines, inverse: bool) -> None:
    """One driver call: ``lines`` lines of ``length`` elements, ``inner`` apart (1: contiguous rows)."""
    threshold = em.gen.options.parallel_threshold
    em.buf.line(f"if (tfxla_fft_run_{sfx}({plan}, {src}, {dst}, {lines}, {length}, {inner}, {half}, {int(kind)}, "
                f"{int(inverse)}, {threshold})) {{ snprintf(err, errlen, \"%s\", \"fft %{inst.name}: out of memory\"); "
                f"return 1; }}")


@top_level(Opcode.FFT)
def _fft(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    assert isinstance(target, Buf)
    src = em.value(inst.operands[0])
    assert isinstance(src, Buf)
    _row_major(src, inst, "operand")
    _row_major(target, inst, "result")
    kind: FftType = inst.attr("fft_type")
    lengths = tuple(inst.attr("fft_length"))
    out, x = target.shape, src.shape
    cplx = out.dtype if out.dtype.is_complex else x.dtype
    sfx = "f" if cplx is P.C64 else "d"
    if out.num_elements == 0:
        return
    if x.num_elements == 0 or 0 in lengths:
        em.buf.line(f"memset({target.ptr}, 0, {out.byte_size});")
        return
    _library(em, sfx)
    rank, k = out.rank, len(lengths)
    dims = out.dims if kind is not FftType.IRFFT else x.dims  # the complex array the axes run over

    def complex_axes(data: str, inverse: bool, axes) -> None:
        for a in axes:
            inner, length = math.prod(dims[a + 1:]), dims[a]
            lines = math.prod(dims) // length
            _run(em, inst, _plan(em, length, sfx), sfx, data, data, lines, length, inner, 0, Lines.COMPLEX, inverse)

    transformed = range(rank - k, rank)
    if kind in (FftType.FFT, FftType.IFFT):
        em.emit_copy(target, src)
        complex_axes(target.ptr, kind is FftType.IFFT, reversed(transformed))
    elif kind is FftType.RFFT:
        n, half = lengths[-1], out.dims[-1]
        _run(em, inst, _plan(em, n, sfx, real=True), sfx, src.ptr, target.ptr, x.num_elements // n, n, 1, half,
             Lines.REAL_TO_HALF, False)
        complex_axes(target.ptr, False, reversed(transformed[:-1]))
    else:
        n, half = lengths[-1], x.dims[-1]
        data = src.ptr
        if k > 1:
            data = f"(({em.gen.dialect.storage(x.dtype)}*){em.alloc_bytes(x.byte_size, f'{inst.name}.spectrum')})"
            em.buf.line(f"memcpy({data}, {src.ptr}, {x.byte_size});")
            complex_axes(data, True, reversed(transformed[:-1]))
        _run(em, inst, _plan(em, n, sfx, real=True), sfx, data, target.ptr, out.num_elements // n, n, 1, half,
             Lines.HALF_TO_REAL, True)


def _library(em: ComputationEmitter, sfx: str) -> None:
    """The FFT library for precision ``sfx``, once per module (after the complex helpers in the globals)."""
    done: set[str] = em.gen.__dict__.setdefault("_fft_precisions", set())
    if not done:
        em.gen.globals.line(common_c())
    if sfx not in done:
        done.add(sfx)
        em.gen.globals.line(precision_c(sfx))
