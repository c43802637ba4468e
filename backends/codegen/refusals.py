"""Opcodes no backend generates, refused the same way everywhere (the message names the backend)."""

from __future__ import annotations

from typing import NoReturn

from backends.codegen.errors import CodegenUnsupported
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode

RNG_OPCODES = (Opcode.RNG, Opcode.RNG_BIT_GENERATOR, Opcode.RNG_GET_AND_UPDATE_STATE)


def refuse_rng(inst: HloInstruction, backend: str) -> NoReturn:
    """Random numbers: their values depend on XLA's generator state and streams, which the evaluator
    (the spec) does not define either."""
    raise CodegenUnsupported(f"%{inst.name}: {inst.opcode.text}: random number generation is not supported by "
                             f"the {backend} backend (XLA's generator state and streams are not specified by the "
                             f"reference evaluator either)")
