"""Exhaustiveness of the CUDA backend: the CPU backend's per-opcode cases all run, or are refused alike.

``tests/test_cpu_backend_opcodes.py`` holds tiny modules for every HLO opcode (several element
types each) and the opcodes refused with a reason. Here every case, run on the host emulator
(``backends.cuda.host_emulator``), matches the evaluator (``tests.gpu.cases.compare``; the
cases also compile with nvcc in test_cuda_nvcc.py); every refused opcode raises
``CodegenUnsupported`` with the CPU backend's reason, naming the CUDA backend; every case with a complex
element type is refused, saying so.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import backends.cuda as cuda
import hlo
from backends.cuda.host_emulator import CUDA_INCLUDE, host_executables
from tests.cpu_backend_util import parse, random_args
from tests.gpu.cases import compare
from tests.test_cpu_backend_opcodes import ALL_CASES as CPU_CASES, REFUSED

COMPLEX_CASES = [(op, case) for op, case in CPU_CASES if re.search(r"\bc(64|128)\[", case.text)]
ALL_CASES = [(op, case) for op, case in CPU_CASES if (op, case) not in COMPLEX_CASES]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_fp16.h")),
                                reason=f"no CUDA headers in {CUDA_INCLUDE} (set TFXLA_CUDA_INCLUDE)")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    modules = [parse(case.text) for _, case in ALL_CASES]
    exes = host_executables(modules, str(tmp_path_factory.mktemp("cuda_opcodes")))
    return {case.id: exe for (_, case), exe in zip(ALL_CASES, exes)}


@pytest.mark.parametrize("op, case", ALL_CASES, ids=[case.id for _, case in ALL_CASES])
def test_opcode_matches_evaluator(op, case, compiled) -> None:
    exe = compiled[case.id]
    assert any(inst.opcode is op for comp in exe.module.computations for inst in comp.instructions)
    args = random_args(exe.module, seed=len(case.id))
    if case.args is not None:
        args = case.args(np.random.default_rng(len(case.id)), args)
    problems = compare(exe(*args), hlo.evaluate(exe.module, *args), case.id)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("op", list(REFUSED), ids=lambda op: op.text)
def test_refused_opcode_says_why(op) -> None:
    text, reason = REFUSED[op]
    with pytest.raises(cuda.CodegenUnsupported, match=reason.replace("CPU backend", "CUDA backend")):
        cuda.emit_source(parse(text))


@pytest.mark.parametrize("op, case", COMPLEX_CASES, ids=[case.id for _, case in COMPLEX_CASES])
def test_complex_types_are_refused(op, case) -> None:
    with pytest.raises(cuda.CodegenUnsupported, match=r"(%\S+|output).*: the CUDA backend does not support "
                       r"element type c(64|128) \(complex types are not supported by the CUDA backend yet\)"):
        cuda.emit_source(parse(case.text))
