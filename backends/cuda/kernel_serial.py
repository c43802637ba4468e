"""Single-thread kernels for the data-dependent opcodes: scatter, select-and-scatter, sort and TopK.

These run the CPU backend's own top-level kernels (its ``TOP_LEVEL`` table:
``kernels_scatter.py``, ``kernels_sort.py``, ``kernels_misc.py``) unchanged inside a
``<<<1, 1>>>`` kernel, through ``CpuKernelAdapter``, which gives them the
small interface of the CPU ``ComputationEmitter`` they use (operand buffers,
a buffer to write into, temporaries, scratch bytes). The semantics are
therefore exactly the CPU backend's (scatter applies updates in order, so
non-unique indices combine deterministically; sort is a stable merge sort),
at single-thread speed: correct, but a known slow path on the GPU
(``docs/cuda.md``). Copies of operands into results become device-to-device
copies before the launch. A scatter carrying TF's index check (``index_check=``)
is refused: its status could not leave the device kernel.
"""

from __future__ import annotations

from types import SimpleNamespace

import backends.cpu.kernels  # noqa: F401 (registers the CPU top-level kernels in TOP_LEVEL)
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.cpu.codegen import TOP_LEVEL, Buf
from backends.cuda import dialect as D
from backends.cuda.kernels import KernelBuilder, strategy
from backends.cuda.program import Copy
from hlo.opcodes import Opcode

SERIAL = {op: TOP_LEVEL[op] for op in (Opcode.SCATTER, Opcode.SELECT_AND_SCATTER, Opcode.SORT, Opcode.CUSTOM_CALL,
                                        Opcode.TOPK)}


class CpuKernelAdapter:
    """The part of the CPU ``ComputationEmitter`` interface the CPU top-level kernels use."""

    def __init__(self, kb: KernelBuilder, body: IndentedBuffer):
        self.kb = kb
        self.buf = body
        self.names = kb.names
        gen = kb.gen
        if not hasattr(gen, "cpu_adapter"):
            # Helper functions the kernels write (comparators) are declared by the dialect: __device__.
            gen.cpu_adapter = SimpleNamespace(module=gen.module, constant_ref=gen.constants.ref, dialect=D.CUDA,
                                              names=gen.comparator_names, globals=IndentedBuffer())
            gen.device_globals_parts.append(gen.cpu_adapter.globals)
        self.gen = gen.cpu_adapter
        self._values = dict(zip(kb.inst.operands, kb.operands))

    def values_or_const(self, name: str):
        value = self._values[name]
        if isinstance(value, tuple):
            raise CodegenUnsupported(f"%{self.kb.inst.name}: tuple operand %{name}")
        return Buf(self.kb.pointer(value), value.shape)

    def gen_tmp(self, ctype: str, expr: str) -> str:
        name = self.names.fresh("t")
        self.buf.line(f"[[maybe_unused]] const {ctype} {name} = {expr};")
        return name

    def emit_copy(self, dst: Buf, src: Buf) -> None:
        d, s = self._bufs[dst.ptr], self._sources[src.ptr]
        if d.ref != s.ref and d.shape.byte_size:
            self.kb.pre_steps.append(Copy(d.ref, s.ref, d.shape.byte_size))

    def alloc_bytes(self, nbytes: int, label: str) -> str:
        return f"((char*){self.kb.pointer(self.kb.temp(nbytes, label), write=True)})"

    def target(self):
        self._bufs = {}
        self._sources = {self.kb.pointer(v): v for v in self.kb.operands if not isinstance(v, tuple)}
        outs = []
        for o in self.kb.outs:
            b = Buf(self.kb.pointer(o, write=True), o.shape)
            self._bufs[b.ptr] = o
            outs.append(b)
        return outs[0] if len(outs) == 1 and self.kb.inst.shape == outs[0].shape else tuple(outs)


@strategy("serial")
def serial_kernel(kb: KernelBuilder):
    kernel = SERIAL.get(kb.inst.opcode)
    if kernel is None:
        return None
    check = kb.inst.attr("index_check", None)
    if check is not None:  # the CPU kernel would return status 3 from inside a device kernel
        raise CodegenUnsupported(f"%{kb.inst.name}: scatter with index_check={check.value}: no CUDA kernel strategy "
                                 "checks its indices before it writes yet")
    body = IndentedBuffer()
    adapter = CpuKernelAdapter(kb, body)
    kernel(adapter, kb.inst, adapter.target())
    note = f"one thread runs the CPU backend's {kb.inst.opcode.text} kernel (data-dependent, sequential)"
    return kb.finish(body, (1,), (1,), note)
