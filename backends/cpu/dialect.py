"""The CPU backend's dialect: C11 for GCC/Clang with OpenMP SIMD pragmas (``backends/codegen/dialect.py``).

f16 is GCC's ``_Float16``; c64/c128 are ``float _Complex``/``double _Complex``; helpers are ``static inline`` (the prelude, ``prelude.py``); a reduction
loop is vectorized with ``#pragma omp simd reduction(...)`` (compiled with ``-fopenmp-simd``: no OpenMP
runtime). Where the kernel computes few elements a reduction is split over the caller's threads
(``backends/cpu/parallel.py``), each part starting from its reducer's identity (``REDUCTION_IDENTITY``).
``C`` is the instance every CPU file writes through (``C.storage(t)``, ``C.load(t, x)``, ...).
"""

from __future__ import annotations

from backends.codegen.dialect import Dialect
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode

# c64 and c128 are C99 complex types, stored and computed as they are (``complex_c.py`` has their helpers).
_COMPLEX = {P.C64: "float _Complex", P.C128: "double _Complex"}

_INTS = ("int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t")

# (reducer opcode, compute type) -> OpenMP reduction identifier. Float max/min use the NaN-propagating
# reductions the prelude declares; reassociating float sums is allowed, as XLA's CPU backend does.
SIMD_REDUCTIONS = {
    **{(Opcode.ADD, t): "+" for t in ("float", "double", *_INTS)},
    **{(Opcode.MULTIPLY, t): "*" for t in ("float", "double", "int32_t", "int64_t", "uint32_t", "uint64_t")},
    (Opcode.MAXIMUM, "float"): "tfxla_maxf", (Opcode.MINIMUM, "float"): "tfxla_minf",
    (Opcode.MAXIMUM, "double"): "tfxla_max", (Opcode.MINIMUM, "double"): "tfxla_min",
    **{(Opcode.MAXIMUM, t): "max" for t in ("int32_t", "int64_t", "uint32_t", "uint64_t")},
    **{(Opcode.MINIMUM, t): "min" for t in ("int32_t", "int64_t", "uint32_t", "uint64_t")},
    (Opcode.AND, "int"): "&&", (Opcode.OR, "int"): "||",
}

# (OpenMP reduction identifier, compute type) -> the identity a part of a split reduction starts from
# (its parts are combined onto the initial value with the reducer itself).
_LIMITS = {"int32_t": ("INT32_MIN", "INT32_MAX"), "int64_t": ("INT64_MIN", "INT64_MAX"),
           "uint32_t": ("0u", "UINT32_MAX"), "uint64_t": ("UINT64_C(0)", "UINT64_MAX")}
REDUCTION_IDENTITY = {
    **{("+", t): f"({t})0" for t in ("float", "double", *_INTS)},
    **{("*", t): f"({t})1" for t in ("float", "double", "int32_t", "int64_t", "uint32_t", "uint64_t")},
    ("tfxla_maxf", "float"): "-INFINITY", ("tfxla_minf", "float"): "INFINITY",
    ("tfxla_max", "double"): "-(double)INFINITY", ("tfxla_min", "double"): "(double)INFINITY",
    **{("max", t): low for t, (low, _) in _LIMITS.items()},
    **{("min", t): high for t, (_, high) in _LIMITS.items()},
    ("&&", "int"): "1", ("||", "int"): "0",
}


class CDialect(Dialect):
    backend = "CPU"

    def storage(self, t: P) -> str:
        return _COMPLEX.get(t) or super().storage(t)

    def compute(self, t: P) -> str:
        return _COMPLEX.get(t) or super().compute(t)

    def reduction_clause(self, op: Opcode, compute: str, acc: str) -> str | None:
        ident = SIMD_REDUCTIONS.get((op, compute))
        return f"reduction({ident}:{acc})" if ident else None

    def reduction_identity(self, op: Opcode, compute: str) -> str | None:
        """The identity of reducer ``op`` in ``compute`` type (None: it has no vector clause here)."""
        ident = SIMD_REDUCTIONS.get((op, compute))
        return REDUCTION_IDENTITY.get((ident, compute)) if ident else None

    def simd_pragma(self, clause: str) -> str | None:
        return f"#pragma omp simd {clause}"


C = CDialect()
