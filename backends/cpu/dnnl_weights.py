"""Parameter weights a convolution reorders into oneDNN's layout, reordered only when their bytes changed.

A convolution's weights that are a parameter (a variable) and that oneDNN wants in another layout
(``DnnlPrimitive.weights_mode() == "reorder"``) go through a reorder primitive into the state's buffer.
A variable mostly stays the same between calls, so the state keeps a copy of the weights last reordered
(``<p>_wcopy``) and whether ``m[1]`` holds them (``<p>_wsame``, set only after a successful call): a call
whose weights equal the copy (``memcmp``) skips the reorder. Bytes are compared, not addresses, so a
variable assigned in place is reordered on its next call. All of it runs under the state's oneDNN mutex.
"""

from __future__ import annotations

from typing import Callable

from backends.codegen.buffer import IndentedBuffer


def span_bytes(t) -> int:
    """Bytes from ``t.ptr`` covering every element of the view (a ``dnnl.Tensor``)."""
    if not all(t.dims):
        return 0
    return (1 + sum((d - 1) * st for d, st in zip(t.dims, t.strides))) * t.dtype.bit_width // 8


def state_fields(p: str) -> str:
    """The state's fields: the weights last reordered, and whether ``m[1]`` holds them."""
    return f"void* {p}_wcopy; int {p}_wsame;"


def teardown(p: str) -> str:
    return f"free(st->{p}_wcopy);"


def init_copy(body: IndentedBuffer, p: str, wei, what: str) -> None:
    """At init, after the reorder primitive is made: the copy's buffer (a failure ends init with rc 1)."""
    body.line(f"st->{p}_wcopy = malloc({max(span_bytes(wei), 1)});")
    with body.block(f"if (!st->{p}_wcopy)"):
        body.line(f'snprintf(err, errlen, "oneDNN {what}: out of memory");')
        body.line("rc = 1;")
        body.line("goto done;")


def run(b: IndentedBuffer, p: str, wei, point: Callable[[str, str], None], step: Callable[[str], None]) -> None:
    """Per call: point ``m[1]`` at the weights (reordered when they differ from the copy, or in place when
    the state has no reorder). Declares ``wnew_``, which ``after_run`` reads."""
    n = span_bytes(wei)
    b.line("int wnew_ = 0;")
    with b.block(f"if (st_->{p}_wre)"):
        b.line(f"wnew_ = !st_->{p}_wsame || memcmp(st_->{p}_wcopy, (const void*)({wei.ptr}), {n});")
        with b.block("if (wnew_)"):
            b.line(f"st_->{p}_wsame = 0;")
            point(f"{p}_wuser", wei.ptr)
            b.line(f"dnnl_exec_arg_t ra_[2] = {{{{DNNL_ARG_FROM, st_->{p}_wuser}}, {{DNNL_ARG_TO, st_->{p}_m[1]}}}};")
            step(f"dnnl_primitive_execute(st_->{p}_wre, st_->dnnl_stream, 2, ra_)")
            b.line(f"memcpy(st_->{p}_wcopy, (const void*)({wei.ptr}), {n});")
    with b.block("else"):
        point(f"{p}_m[1]", wei.ptr)


def after_run(b: IndentedBuffer, p: str) -> None:
    """After the primitive ran: ``m[1]`` holds the copy's weights once a call with them succeeded."""
    b.line(f"if (wnew_ && s_ == dnnl_success) st_->{p}_wsame = 1;")
