"""Single-thread kernels for the data-dependent opcodes: scatter, select-and-scatter, sort and TopK.

These run the serial kernels every backend shares (``backends/codegen/serial/``: ``SERIAL``) inside a
``<<<1, 1>>>`` kernel, through ``SerialAdapter``, the ``SerialEmitter`` of a kernel being built
(operand buffers as kernel parameters, a buffer to write into, temporaries, scratch bytes), with
the CUDA dialect (``__half``, ``__device__`` comparators). The semantics are therefore exactly the
CPU backend's, which runs the same kernels (scatter applies updates in order, so non-unique indices combine deterministically;
sort is a stable merge sort), at single-thread speed: correct, but a known slow path on the GPU
(``docs/cuda.md``). Copies of operands into results become device-to-device copies before the
launch. A scatter carrying TF's index check (``index_check=``) is refused: its status could not
leave the device kernel.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, NoReturn

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.serial import SERIAL
from backends.codegen.values import Buf
from backends.cuda import dialect as D
from backends.cuda.kernels import KernelBuilder, strategy
from backends.cuda.program import Copy
from hlo.ir import HloInstruction
from hlo.shapes import Shape


class SerialAdapter:
    """The ``SerialEmitter`` (``backends/codegen/serial``) of one single-thread kernel."""

    def __init__(self, kb: KernelBuilder, body: IndentedBuffer):
        self.kb = kb
        self.buf = body
        self.names = kb.names
        gen = kb.gen
        if not hasattr(gen, "serial_module"):  # one per module: comparators are shared by its kernels
            gen.serial_module = SimpleNamespace(module=gen.module, dialect=D.CUDA, constant_ref=gen.constants.ref,
                                                names=gen.comparator_names, globals=IndentedBuffer())
            gen.device_globals_parts.append(gen.serial_module.globals)
        self.gen = gen.serial_module
        self._values = dict(zip(kb.inst.operands, kb.operands))

    def value(self, name: str):
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

    def emit_scatter_check(self, inst: HloInstruction, operand: Shape, indices: Shape, updates: Shape,
                           read: Callable) -> None:
        if inst.attr("index_check", None) is not None:
            _refuse_checked(inst)

    def target(self):
        self._bufs = {}
        self._sources = {self.kb.pointer(v): v for v in self.kb.operands if not isinstance(v, tuple)}
        outs = []
        for o in self.kb.outs:
            b = Buf(self.kb.pointer(o, write=True), o.shape)
            self._bufs[b.ptr] = o
            outs.append(b)
        return outs[0] if len(outs) == 1 and self.kb.inst.shape == outs[0].shape else tuple(outs)


def _refuse_checked(inst: HloInstruction) -> NoReturn:
    """A checked scatter's status 3 could not leave a device kernel."""
    raise CodegenUnsupported(f"%{inst.name}: scatter with index_check={inst.attr('index_check').value}: no CUDA "
                             "kernel strategy checks its indices before it writes yet")


@strategy("serial")
def serial_kernel(kb: KernelBuilder):
    kernel = SERIAL.get(kb.inst.opcode)
    if kernel is None:
        return None
    if kb.inst.attr("index_check", None) is not None:  # refused before anything is written
        _refuse_checked(kb.inst)
    body = IndentedBuffer()
    adapter = SerialAdapter(kb, body)
    kernel(adapter, kb.inst, adapter.target())
    note = f"one thread runs the shared serial {kb.inst.opcode.text} kernel (data-dependent, sequential)"
    return kb.finish(body, (1,), (1,), note)
