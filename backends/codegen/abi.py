"""The checks every backend's ``tfxla_run`` starts with (the kernel ABI, ``backends/README.md``).

A kernel is compiled for exact input dims; ``in_dims`` holds the dims the caller passes, all inputs
concatenated. Before anything reads a buffer, ``tfxla_run`` refuses a NULL state and any dim that
differs, naming the input and both sizes.

Status codes of ``tfxla_run``: 0 success; ``STATUS_INVALID_ARGUMENT`` (3, TF's code number) when the
data is invalid for the program (a gather index outside its operand, with TF's message: the launch op
raises ``InvalidArgumentError``, the Python runtime ``KernelInvalidArgument``); any other nonzero
value is an internal failure (1 for the dims check and library errors).
"""

from __future__ import annotations

from typing import Sequence

from backends.codegen.buffer import IndentedBuffer

STATUS_INVALID_ARGUMENT = 3  # = tensorflow::error::INVALID_ARGUMENT


def emit_run_checks(out: IndentedBuffer, inputs: Sequence[tuple[str, Sequence[int]]]) -> None:
    """The state and input-dims checks; ``inputs`` are (label for messages, compiled dims) per input,
    in order. A label is C format text (a ``%`` is written ``%%``)."""
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
