"""Depthwise convolution: a direct kernel, filter taps in registers, inputs reused across outputs.

Takes a convolution (alone, or under an elementwise epilogue such as bias and
relu6, applied per result element before the store) whose
``feature_group_count`` is its number of input features C > 1 (kernel input
feature dim 1), ``batch_group_count`` 1, no lhs dilation, f32/f16/bf16/f64
(f64 accumulates in double, the others in float; the sum is rounded to the
convolution's type before an epilogue). Output feature ``o`` reads input
feature ``o / M`` (M = output features / C, the multiplier: HLO's group
``o / (O / G)`` with G = C) and kernel element ``[window..., 0, o]``.
Reversed and rhs-dilated windows are honoured; padding is bounds checks.
Everything else, and windows over ``MAX_TAPS`` taps or spanning more than
``MAX_SPAN`` input positions in the innermost spatial dim, is declined.

Each thread computes R consecutive outputs along the last spatial dim of the
window (W in NHWC) for one output feature; the feature varies fastest across
threads, so for ``b01f_01io->b01f`` a warp reads and writes consecutive
addresses. A thread loads its window's taps into registers once, and for each
position of the outer window dims loads the ``(R-1)*stride + (K-1)*dilation + 1``
input elements its R outputs share (K taps each), instead of R*K. Any
dim_labels order is correct (positions are read through them), only slower.
Elements are computed by the elemental rules, so fused operand producers cost
no memory pass. R is 4, halved while it exceeds the innermost output size,
leaves fewer than ``MIN_THREADS`` threads, or makes the span exceed ``MAX_SPAN``.
The launch note records R, the loads per window row and the multiplier.
"""

from __future__ import annotations

import contextlib

from backends.codegen.buffer import IndentedBuffer
from backends.cuda.kernels import KernelBuilder, ceil_div, delinearize, epilogue_core, prod, store_result, strategy
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode

FLOATS = (P.F32, P.F16, P.BF16, P.F64)
MAX_TAPS = 64  # filter taps held in registers by one thread
MAX_SPAN = 64  # input elements of one window row held in registers
MIN_THREADS = 1024  # below this, fewer outputs per thread (more threads) are preferred
BLOCK = 256


def _affine(*terms: tuple[str, int], const: int = 0) -> str:
    """``sum(var * coef) + const`` as C, without unit factors or zero terms."""
    parts = [v if c == 1 else f"{v} * {c}" for v, c in terms if c]
    return " + ".join(parts) + (f" - {-const}" if const < 0 else f" + {const}" if const else "")


def _span(r: int, d) -> int:
    """Input positions along the innermost window dim read by ``r`` consecutive outputs."""
    return (r - 1) * d.stride + (d.size - 1) * d.rhs_dilate + 1


@strategy("conv-depthwise")
def depthwise_kernel(kb: KernelBuilder):
    core = epilogue_core(kb, Opcode.CONVOLUTION)
    if core is None or len(kb.outs) != 1 or core.shape.dtype not in FLOATS:
        return None
    lhs, rhs = kb.shape_of(core.operands[0]), kb.shape_of(core.operands[1])
    dl = core.attr("dim_labels")
    window = core.attr("window").dims
    chans = lhs.dims[dl.input_feature]
    if chans < 2 or core.attr("feature_group_count", 1) != chans or core.attr("batch_group_count", 1) != 1 or \
            rhs.dims[dl.kernel_input_feature] != 1 or not window or any(d.lhs_dilate != 1 for d in window):
        return None
    feats = core.shape.dims[dl.output_feature]
    mult = feats // chans
    out_sp = [core.shape.dims[d] for d in dl.output_spatial]
    inner = window[-1]
    taps = prod(d.size for d in window)
    if taps > MAX_TAPS or _span(1, inner) > MAX_SPAN or prod(core.shape.dims) == 0:
        return None
    batch = core.shape.dims[dl.output_batch]
    r = 4
    while r > 1 and (r > out_sp[-1] or _span(r, inner) > MAX_SPAN or
                     batch * prod(out_sp[:-1]) * ceil_div(out_sp[-1], r) * feats < MIN_THREADS):
        r //= 2
    chunks = ceil_div(out_sp[-1], r)
    total = batch * prod(out_sp[:-1]) * chunks * feats
    span = _span(r, inner)
    loads = len({q * inner.stride + k * inner.rhs_dilate for q in range(r) for k in range(inner.size)})  # used ones
    acc_t = "double" if core.shape.dtype is P.F64 else "float"

    body = IndentedBuffer()
    em = kb.emitter(body)
    body.line(f"const int64_t lin = (int64_t)blockIdx.x * {BLOCK} + threadIdx.x;")
    body.line(f"if (lin >= {total}) return;")
    body.line(f"const int64_t feat = lin % {feats};  // the output feature; input feature chan (multiplier {mult})")
    body.line(f"[[maybe_unused]] const int64_t chan = {'feat' if mult == 1 else f'feat / {mult}'};")
    pos = delinearize(f"lin / {feats}", [batch] + out_sp[:-1] + [chunks])  # (batch, outer positions..., chunk)
    names = []
    for k, p in enumerate(pos):
        names.append(kb.names.fresh("b" if k == 0 else "x"))
        value = f"({p}) * {r}" if k == len(pos) - 1 and p != "0" else p
        body.line(f"[[maybe_unused]] const int64_t {names[-1]} = {value};")
    bvar, outer, first = names[0], names[1:-1], names[-1]  # ``first``: the thread's first innermost output

    # The window's taps, read once (the kernel element at window position j, reversed where asked).
    body.line(f"{acc_t} wt[{taps}];")
    body.line("#pragma unroll")
    with body.block(f"for (int j = 0; j < {taps}; ++j)"):
        kidx = ["0"] * rhs.rank
        kidx[dl.kernel_output_feature] = "feat"
        for s, (d, e) in enumerate(zip(window, delinearize("j", [d.size for d in window]))):
            kidx[dl.kernel_spatial[s]] = f"({d.size - 1} - {e})" if d.reversal and d.size > 1 else e
        em.push()
        body.line(f"wt[j] = ({acc_t})({em.emit(core.operands[1], tuple(kidx))});")
        em.pop()
    body.line(f"{acc_t} acc[{r}] = {{}};")

    # Outer window dims: one (unrolled) loop each; the innermost dim: ``span`` loads shared by the r outputs.
    idx = ["0"] * lhs.rank
    idx[dl.input_batch] = bvar
    idx[dl.input_feature] = "chan"
    loops = []
    with contextlib.ExitStack() as nest:
        for s, d in enumerate(window[:-1]):
            j, i = kb.names.fresh("j"), kb.names.fresh("i")
            loops.append(j)
            body.line("#pragma unroll")
            nest.enter_context(body.block(f"for (int {j} = 0; {j} < {d.size}; ++{j})"))
            body.line(f"const int64_t {i} = {_affine((outer[s], d.stride), (j, d.rhs_dilate), const=-d.pad_low)};")
            body.line(f"if ({i} < 0 || {i} >= {lhs.dims[dl.input_spatial[s]]}) continue;")
            idx[dl.input_spatial[s]] = i
        body.line(f"{acc_t} row[{span}];")
        body.line("#pragma unroll")
        with body.block(f"for (int l = 0; l < {span}; ++l)"):
            body.line(f"const int64_t at = {_affine((first, inner.stride), ('l', 1), const=-inner.pad_low)};")
            body.line("row[l] = 0;")
            idx[dl.input_spatial[-1]] = "at"
            with body.block(f"if (at >= 0 && at < {lhs.dims[dl.input_spatial[-1]]})"):
                em.push()
                body.line(f"row[l] = ({acc_t})({em.emit(core.operands[0], tuple(idx))});")
                em.pop()
        row0 = "".join(f"{j} * {prod(d.size for d in window[s + 1:])} + " for s, j in enumerate(loops))
        body.line("#pragma unroll")
        with body.block(f"for (int q = 0; q < {r}; ++q)"):
            body.line("#pragma unroll")
            body.line(f"for (int k = 0; k < {inner.size}; ++k) "
                      f"acc[q] += row[{_affine(('q', inner.stride), ('k', inner.rhs_dilate))}] * wt[{row0}k];")

    # Stores (the epilogue per element), feature fastest across threads.
    oidx = ["0"] * core.shape.rank
    oidx[dl.output_batch] = bvar
    oidx[dl.output_feature] = "feat"
    for s, d in enumerate(dl.output_spatial[:-1]):
        oidx[d] = outer[s]
    oidx[dl.output_spatial[-1]] = f"({first} + q)" if r > 1 else first
    body.line("#pragma unroll")
    with body.block(f"for (int q = 0; q < {r}; ++q)"):
        if out_sp[-1] % r:
            body.line(f"if ({first} + q >= {out_sp[-1]}) break;")
        store_result(body, kb, em, core, lambda: (tuple(oidx), None), "acc[q]")
    epilogue = f", epilogue %{kb.root.name}" if core is not kb.root else ""
    note = (f"depthwise convolution: {feats} features ({chans} inputs x multiplier {mult}), "
            f"{'x'.join(str(d.size) for d in window)} window, {r} output(s) per thread along output dim "
            f"{dl.output_spatial[-1]} ({loads} input loads for {r}x{inner.size} products per window row), "
            f"taps in registers, {acc_t} accumulation{epilogue}")
    return kb.finish(body, (ceil_div(total, BLOCK),), (BLOCK,), note)
