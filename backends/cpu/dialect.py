"""The CPU backend's dialect: C11 for GCC/Clang with OpenMP (``backends/codegen/dialect.py``).

f16 is GCC's ``_Float16``; helpers are ``static inline`` (the prelude, ``prelude.py``); a reduction
loop is vectorized with ``#pragma omp simd reduction(...)``, or split over threads with
``#pragma omp parallel for simd`` where the kernel computes few elements (``parallel_reductions``).
``C`` is the instance every CPU file writes through (``C.storage(t)``, ``C.load(t, x)``, ...).
"""

from __future__ import annotations

from backends.codegen.dialect import Dialect
from hlo.opcodes import Opcode

# (reducer opcode, compute type) -> OpenMP reduction identifier. Float max/min use the NaN-propagating
# reductions the prelude declares; reassociating float sums is allowed, as XLA's CPU backend does.
SIMD_REDUCTIONS = {
    **{(Opcode.ADD, t): "+" for t in ("float", "double", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
                                       "uint16_t", "uint32_t", "uint64_t")},
    **{(Opcode.MULTIPLY, t): "*" for t in ("float", "double", "int32_t", "int64_t", "uint32_t", "uint64_t")},
    (Opcode.MAXIMUM, "float"): "tfxla_maxf", (Opcode.MINIMUM, "float"): "tfxla_minf",
    (Opcode.MAXIMUM, "double"): "tfxla_max", (Opcode.MINIMUM, "double"): "tfxla_min",
    **{(Opcode.MAXIMUM, t): "max" for t in ("int32_t", "int64_t", "uint32_t", "uint64_t")},
    **{(Opcode.MINIMUM, t): "min" for t in ("int32_t", "int64_t", "uint32_t", "uint64_t")},
    (Opcode.AND, "int"): "&&", (Opcode.OR, "int"): "||",
}


class CDialect(Dialect):
    backend = "CPU"
    parallel_reductions = True

    def reduction_clause(self, op: Opcode, compute: str, acc: str) -> str | None:
        ident = SIMD_REDUCTIONS.get((op, compute))
        return f"reduction({ident}:{acc})" if ident else None

    def simd_pragma(self, clause: str) -> str | None:
        return f"#pragma omp simd {clause}"

    def parallel_simd_pragma(self, loops: int, clause: str) -> str | None:
        collapse = f" collapse({loops})" if loops > 1 else ""
        return f"#pragma omp parallel for simd{collapse} schedule(static) {clause}"


C = CDialect()
