"""Tiled GEMM kernels: dot, and convolution as an implicit GEMM.

Both are ``C[batch, M, N] = sum_K A[batch, M, K] B[batch, K, N]``. ``dot_gemm`` and ``conv_gemm``
describe the product (a ``gemm.Gemm``: sizes, element loaders, the result index); two engines
compute it:

* ``kernel_wmma`` (strategies ``dot-wmma``, ``conv-wmma``, tried first): f16 x f16 and bf16 x bf16
  products on the tensor cores;
* ``emit_gemm`` here (``dot-tiled``, ``conv-implicit-gemm``): CUDA-core FMAs with 64x64 output tiles,
  16-deep shared-memory slices and a 4x4 register tile per thread (block 16x16: rows ``ty + 16 i``,
  cols ``tx + 16 j``, so stores are coalesced).

A and B elements are computed by the elemental rules while the slices load
(zeros past the edges), so fused operand producers (a transpose, a convert, a
broadcast) cost no memory pass. f32, f16 and bf16 accumulate in f32, f64 in
f64 (the value is rounded to the dot's type before an epilogue). The kernels
take the dot or convolution alone, or at the heart of an output fusion whose
root is an elementwise function of it (bias, activation, residual: computed
per result element before the store, ``store_result``). Integer and pred dots,
grouped or lhs-dilated convolutions, and products under 1024 outputs go to
other strategies (depthwise convolutions have their own kernel; the rest the
elemental loop).

* dot: ``A`` is the lhs with free dims flattened to M and contracting dims to
  K (dim order), ``B`` the rhs likewise.
* convolution: M runs over (batch, output spatial positions), N over output
  features and K over (window positions, input features); ``A(m, k)`` is the
  input element under window position k of output position m (zero in the
  padding), ``B(k, n)`` the kernel element.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.cuda.gemm import Gemm, emit_slice_loads
from backends.cuda import kernel_wmma  # read at call time: kernel_wmma imports kernels, which imports us
from backends.cuda.kernels import KernelBuilder, ceil_div, delinearize, epilogue_core, prod, store_result, strategy
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode

BM = BN = 64
BK = 16
MIN_OUTPUTS = 1024  # smaller products are left to the elemental loop
FLOATS = (P.F32, P.F16, P.BF16, P.F64)


def _row_major(shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


def emit_gemm(kb: KernelBuilder, g: Gemm):
    """The CUDA-core tiled GEMM kernel for ``g``."""
    core, nb, m, n, k = g.core, g.nb, g.m, g.n, g.k
    acc_t = "double" if core.shape.dtype is P.F64 else "float"
    body = IndentedBuffer()
    em = kb.emitter(body)
    body.line(f"__shared__ {acc_t} As[{BK}][{BM + 1}];")
    body.line(f"__shared__ {acc_t} Bs[{BK}][{BN + 1}];")
    body.line(f"{acc_t} acc[4][4] = {{}};")
    body.line("const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;")
    body.line("[[maybe_unused]] const int64_t bt = blockIdx.z;")
    body.line(f"const int64_t m0 = (int64_t)blockIdx.y * {BM}, n0 = (int64_t)blockIdx.x * {BN};")
    with body.block(f"for (int64_t k0 = 0; k0 < {k}; k0 += {BK})"):
        emit_slice_loads(body, em, g, (BM, BN, BK), 256, (f"As[l % {BK}][l / {BK}]", f"Bs[l / {BN}][l % {BN}]"), acc_t)
        body.line("__syncthreads();")
        body.line("#pragma unroll")
        with body.block(f"for (int kk = 0; kk < {BK}; ++kk)"):
            body.line(f"{acc_t} a[4], b[4];")
            body.line("#pragma unroll")
            body.line("for (int i = 0; i < 4; ++i) { a[i] = As[kk][ty + 16 * i]; b[i] = Bs[kk][tx + 16 * i]; }")
            body.line("#pragma unroll")
            body.line("for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];")
        body.line("__syncthreads();")
    with body.block("for (int i = 0; i < 4; ++i)"):
        body.line("const int64_t mm = m0 + ty + 16 * i;")
        with body.block("for (int j = 0; j < 4; ++j)"):
            body.line("const int64_t nn = n0 + tx + 16 * j;")
            with body.block(f"if (mm < {m} && nn < {n})"):
                store_result(body, kb, em, core, g.out_index, "acc[i][j]")
    epilogue = f", epilogue %{kb.root.name}" if core is not kb.root else ""
    note = "tiled " + g.note + f"{epilogue}, {BM}x{BN} tiles, {BK}-deep shared slices, 4x4 per thread, {acc_t} accumulation"
    return kb.finish(body, (ceil_div(n, BN), ceil_div(m, BM), nb), (16, 16), note)


def _guarded(body, em, guard: str, operand: str, idx, var: str, acc_t: str) -> None:
    with body.block(f"if ({guard})"):
        body.line(f"{var} = ({acc_t})({em.emit(operand, idx)});")


def _index(shape, groups) -> tuple[str, ...]:
    """A multi-index of ``shape`` from (dims, linear coordinate) groups (row-major within a group)."""
    idx = ["0"] * shape.rank
    for dims, coord in groups:
        for d, e in zip(dims, delinearize(coord, [shape.dims[d] for d in dims])):
            idx[d] = e
    return tuple(idx)


def dot_gemm(kb: KernelBuilder) -> Gemm | None:
    """The product of a dot (alone or under an epilogue), or None when the GEMM kernels don't take it."""
    root = epilogue_core(kb, Opcode.DOT)
    if root is None or len(kb.outs) != 1:
        return None
    out = kb.outs[0]
    if root.shape.dtype not in FLOATS or not _row_major(out.shape):
        return None
    lhs, rhs = kb.shape_of(root.operands[0]), kb.shape_of(root.operands[1])
    lb, lc = tuple(root.attr("lhs_batch_dims", ())), tuple(root.attr("lhs_contracting_dims", ()))
    rb, rc = tuple(root.attr("rhs_batch_dims", ())), tuple(root.attr("rhs_contracting_dims", ()))
    lfree = [d for d in range(lhs.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs.rank) if d not in rb and d not in rc]
    nb = prod(lhs.dims[d] for d in lb)
    m, n, k = prod(lhs.dims[d] for d in lfree), prod(rhs.dims[d] for d in rfree), prod(lhs.dims[d] for d in lc)
    if nb > 65535 or ceil_div(m, BM) > 65535 or m * n < MIN_OUTPUTS or k == 0:
        return None
    acc_t = "double" if root.shape.dtype is P.F64 else "float"

    def load_a(body, em, mv, kv):
        return _guarded(body, em, f"{mv} < {m} && {kv} < {k}", root.operands[0],
                        _index(lhs, ((lb, "bt"), (lfree, mv), (lc, kv))), "av", acc_t)

    def load_b(body, em, nv, kv):
        return _guarded(body, em, f"{kv} < {k} && {nv} < {n}", root.operands[1],
                        _index(rhs, ((rb, "bt"), (rfree, nv), (rc, kv))), "bv", acc_t)

    def out_index():
        offset = f"(bt * {m} + mm) * {n} + nn"  # the result is row-major
        return delinearize(offset, out.shape.dims), offset
    return Gemm(root, nb, m, n, k, load_a, load_b, out_index, f"dot: batch {nb}, [{m}, {k}] x [{k}, {n}]")


def conv_gemm(kb: KernelBuilder) -> Gemm | None:
    """The implicit-GEMM product of a convolution, or None when the GEMM kernels don't take it."""
    root = epilogue_core(kb, Opcode.CONVOLUTION)
    if root is None or len(kb.outs) != 1:
        return None
    window = root.attr("window").dims
    if root.shape.dtype not in FLOATS or root.attr("feature_group_count", 1) != 1 or \
            root.attr("batch_group_count", 1) != 1 or any(d.lhs_dilate != 1 for d in window):
        return None
    lhs, rhs = kb.shape_of(root.operands[0]), kb.shape_of(root.operands[1])
    dl = root.attr("dim_labels")
    out_spatial = [root.shape.dims[d] for d in dl.output_spatial]
    batch = root.shape.dims[dl.output_batch]
    m = batch * prod(out_spatial)
    n = root.shape.dims[dl.output_feature]
    cin = lhs.dims[dl.input_feature]
    k = prod(d.size for d in window) * cin
    if ceil_div(m, BM) > 65535 or m * n < MIN_OUTPUTS or k == 0:
        return None
    acc_t = "double" if root.shape.dtype is P.F64 else "float"
    m_dims = [batch] + out_spatial  # m = (b, o_0, o_1, ...), row-major
    k_dims = [d.size for d in window] + [cin]  # k = (w_0, w_1, ..., c), row-major

    def load_a(body, em, mv, kv):
        mi = delinearize(mv, m_dims)
        ki = delinearize(kv, k_dims)
        idx = ["0"] * lhs.rank
        idx[dl.input_batch] = mi[0]
        idx[dl.input_feature] = ki[-1]
        conds = [f"{mv} < {m}", f"{kv} < {k}"]
        for s, d in enumerate(window):
            w = f"({d.size - 1} - {ki[s]})" if d.reversal else ki[s]
            pos = kb.names.fresh("pos")
            body.line(f"const int64_t {pos} = ({mi[1 + s]}) * {d.stride} + ({w}) * {d.rhs_dilate} - {d.pad_low};")
            idx[dl.input_spatial[s]] = pos
            conds.append(f"{pos} >= 0 && {pos} < {lhs.dims[dl.input_spatial[s]]}")
        return _guarded(body, em, " && ".join(conds), root.operands[0], tuple(idx), "av", acc_t)

    def load_b(body, em, nv, kv):
        ki = delinearize(kv, k_dims)
        idx = ["0"] * rhs.rank
        idx[dl.kernel_input_feature] = ki[-1]
        idx[dl.kernel_output_feature] = nv
        for s in range(len(window)):
            idx[dl.kernel_spatial[s]] = ki[s]
        return _guarded(body, em, f"{kv} < {k} && {nv} < {n}", root.operands[1], tuple(idx), "bv", acc_t)

    def out_index():
        mi = delinearize("mm", m_dims)
        idx = ["0"] * root.shape.rank
        idx[dl.output_batch] = mi[0]
        idx[dl.output_feature] = "nn"
        for s, d in enumerate(dl.output_spatial):
            idx[d] = mi[1 + s]
        return tuple(idx), None
    note = f"convolution as implicit GEMM: [{m} positions, {k} = window x {cin}] x [{k}, {n} features]"
    return Gemm(root, 1, m, n, k, load_a, load_b, out_index, note)


def _register(describe, wmma_name: str, fma_name: str) -> None:
    """The two strategies for the products ``describe`` takes: tensor cores first (f16/bf16), then FMAs."""
    @strategy(wmma_name)
    def on_tensor_cores(kb: KernelBuilder):
        g = describe(kb)
        return kernel_wmma.emit_wmma_gemm(kb, g) if g is not None and kernel_wmma.takes_tensor_cores(kb, g.core) \
            else None

    @strategy(fma_name)
    def on_cuda_cores(kb: KernelBuilder):
        g = describe(kb)
        return None if g is None else emit_gemm(kb, g)


_register(dot_gemm, "dot-wmma", "dot-tiled")
_register(conv_gemm, "conv-wmma", "conv-implicit-gemm")
