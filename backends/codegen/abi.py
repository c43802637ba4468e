"""The kernel ABI every backend's ``tfxla_run`` speaks (``backends/README.md``): the signature and the
checks ``tfxla_run`` starts with.

The signature is JSON the kernel returns from ``tfxla_signature``: ``abi_version``, ``module``,
``inputs`` and ``outputs`` (each dtype, dims and the ``minor_to_major`` order its buffer holds them
in) and ``scratch_bytes``; a backend may add keys after those. ``emit_exports`` writes the three
exported functions that describe a kernel (version, signature, scratch size).

A kernel is compiled for exact input dims; ``in_dims`` holds the dims the caller passes, all inputs
concatenated. Before anything reads a buffer, ``tfxla_run`` refuses a NULL state and any dim that
differs, naming the input and both sizes.

``tfxla_run`` takes the caller's threads (ABI version 2): ``const tfxla_runtime* rt`` (``RUNTIME_C``,
declared identically in the CPU prelude, the CUDA host launcher and the launch op) is a parallel-for the
kernel runs its parallel loops through; NULL, or ``num_threads`` < 2, runs everything on the calling
thread. A loader accepts exactly ``ABI_VERSION`` (``check_abi_version``).

Status codes of ``tfxla_run``: 0 success; ``STATUS_INVALID_ARGUMENT`` (3, TF's code number) when the
data is invalid for the program (a gather index outside its operand, with TF's message: the launch op
raises ``InvalidArgumentError``, the Python runtime ``KernelInvalidArgument``); any other nonzero
value is an internal failure (1 for the dims check and library errors).
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Sequence

from backends.codegen.buffer import IndentedBuffer
from hlo.shapes import Shape

ABI_VERSION = 2
ABI_VERSIONS = (2, 3)  # what loaders accept: 3 is a kernel with symbolic dims (``backends/codegen/symbolic.py``)
# True while a probe for symbolic dims is generated: the dims checks and exports are markers that
# ``symbolic.assemble`` replaces with the symbolic kernel's own.
PROBING: ContextVar = ContextVar("tfxla_abi_probing", default=False)
STATUS_INVALID_ARGUMENT = 3  # = tensorflow::error::INVALID_ARGUMENT

# The parallel-for a caller hands ``tfxla_run`` (C and C++); /work/ABI_V2.md, backends/README.md.
RUNTIME_C = r"""
typedef void (*tfxla_task_fn)(void* ctx, int64_t begin, int64_t end);
typedef struct tfxla_runtime {
  int64_t struct_size;  /* sizeof(tfxla_runtime) as the caller knows it: a kernel reads no field past it */
  int64_t num_threads;  /* threads parallel_for runs blocks on at once, the calling thread included;
                           < 2: the kernel runs everything on the calling thread */
  void* pool;           /* opaque, handed back to parallel_for */
  /* Calls fn(ctx, b, e) on disjoint, contiguous, non-empty ranges that cover [0, n) exactly once,
     concurrently on up to num_threads threads (the calling thread takes part), and returns after every
     call has returned. n >= 1. fn never fails and never calls parallel_for itself. May be NULL (serial). */
  void (*parallel_for)(void* pool, int64_t n, tfxla_task_fn fn, void* ctx);
} tfxla_runtime;
"""

# The parameters of ``tfxla_run`` (every backend's definition spells them so).
RUN_PARAMS = ("void* state, const void* const* in, const int64_t* in_dims, void* const* out, char* scratch, "
              "const tfxla_runtime* rt, char* err, size_t errlen")


def check_abi_version(version: int, what: str) -> str | None:
    """Why a kernel that says it speaks ABI ``version`` cannot be run (``what`` names it), or None."""
    if version in ABI_VERSIONS:
        return None
    if version < min(ABI_VERSIONS):
        return (f"{what} was built by an older tfxla (kernel ABI version {version}; this tfxla speaks "
                f"{ABI_VERSION}) and must be recompiled")
    return f"{what} speaks kernel ABI version {version}, newer than this tfxla's {max(ABI_VERSIONS)}: upgrade tfxla"


def signature_entry(shape: Shape) -> dict:
    """An input or output of the ABI: its buffer holds ``dims`` in ``minor_to_major`` order."""
    m2m = shape.layout.minor_to_major if shape.layout is not None and shape.layout.minor_to_major \
        else tuple(range(shape.rank - 1, -1, -1))
    return {"dtype": shape.dtype.value, "dims": list(shape.dims), "minor_to_major": list(m2m)}


def signature(module: str, inputs: Sequence[Shape], outputs: Sequence[Shape], scratch_bytes: int) -> dict:
    """The signature of a kernel of HLO module ``module`` (inputs are the ENTRY parameters' shapes,
    outputs the leaves of its result)."""
    return {
        "abi_version": ABI_VERSION,
        "module": module,
        "inputs": [signature_entry(s) for s in inputs],
        "outputs": [signature_entry(s) for s in outputs],
        "scratch_bytes": scratch_bytes,
    }


def physical_order(entry: dict) -> list[int] | None:
    """The dims from major to minor of a signature entry's buffer; ``None`` for row-major."""
    m2m = entry.get("minor_to_major")
    rank = len(entry["dims"])
    if not m2m or list(m2m) == list(range(rank - 1, -1, -1)):
        return None
    return list(reversed(m2m))


def emit_exports(out: IndentedBuffer, sig: dict) -> None:
    """``tfxla_abi_version``, ``tfxla_signature`` (``sig`` as JSON) and ``tfxla_scratch_bytes``."""
    if PROBING.get():
        from backends.codegen.symbolic import EXPORTS_MARKER
        out.line(EXPORTS_MARKER)
        return
    out.line(f"TFXLA_EXPORT int tfxla_abi_version(void) {{ return {ABI_VERSION}; }}")
    out.line(f"TFXLA_EXPORT const char* tfxla_signature(void) {{ return {json.dumps(json.dumps(sig))}; }}")
    out.line(f"TFXLA_EXPORT int64_t tfxla_scratch_bytes(void) {{ return {sig['scratch_bytes']}; }}")


def emit_run_checks(out: IndentedBuffer, inputs: Sequence[tuple[str, Sequence[int]]]) -> None:
    """The state and input-dims checks; ``inputs`` are (label for messages, compiled dims) per input,
    in order. A label is C format text (a ``%`` is written ``%%``)."""
    if PROBING.get():
        from backends.codegen.symbolic import RUN_CHECKS_MARKER
        out.line(RUN_CHECKS_MARKER)
        return
    out.line('if (!state) { snprintf(err, errlen, "tfxla_run: state is NULL (call tfxla_init first)"); return 1; }')
    pos = 0
    for label, dims in inputs:
        for d, n in enumerate(dims):
            with out.block(f"if (in_dims[{pos}] != {n})"):
                out.line(f'snprintf(err, errlen, "{label}: dimension {d} is %lld, but the kernel was compiled '
                         f'for {n}", (long long)in_dims[{pos}]);')
                out.line("return 1;")
            pos += 1
    out.line("(void)in_dims;")
