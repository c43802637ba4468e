"""Tensor-core GEMM: f16 and bf16 dots and convolutions on ``wmma`` fragments (sm_80 and later).

The same product as ``kernel_dot`` (``C[batch, M, N] = sum_K A B``, the same loaders, so fused operand
producers and implicit-GEMM convolutions come along), with the inner product on the tensor cores:

* a block of 4 warps owns a 64x64 output tile, each warp a 32x32 quarter as 2x2 accumulator fragments
  of 16x16 (f32);
* per 32-deep K slice the block computes A (64x32) and B (32x64) elements with the elemental rules,
  converts them to the operands' type (exact: they are values of that type) and stores them in shared
  memory, rows padded by 8 elements (16 bytes) so fragment loads keep their 32-byte alignment and
  rows start in different banks; zeros past the edges of M, N and K;
* after the K loop each warp stores its fragments to a shared f32 tile; the block then writes the
  tile element by element (consecutive threads on consecutive columns), rounded to the core's type
  and through the epilogue, exactly as the FMA kernel does.

Accumulation is in f32 as in the FMA kernel; only the order of the additions differs.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.cuda.gemm import Gemm, emit_slice_loads
from backends.cuda.kernels import KernelBuilder, ceil_div, store_result
from hlo.dtypes import PrimitiveType as P

BM = BN = 64  # block tile
BK = 32  # K slice
WM = WN = 32  # warp tile
FRAG = 16  # m = n = k of one wmma fragment
PAD_AB, PAD_C = 8, 4  # row padding, in elements (16 bytes of f16/bf16, 16 bytes of f32)
WARPS = (BM // WM) * (BN // WN)
THREADS = 32 * WARPS

# operand type -> (its CUDA type in shared memory and fragments, float -> that type)
_TYPES = {P.F16: ("__half", "__float2half"), P.BF16: ("__nv_bfloat16", "__float2bfloat16")}


def _operand_type(kb: KernelBuilder, core) -> P | None:
    a, b = (kb.shape_of(o).dtype for o in core.operands[:2])
    return a if a is b and a in _TYPES else None


def takes_tensor_cores(kb: KernelBuilder, core) -> bool:
    """Whether ``core``'s operands are both f16 or both bf16 (what wmma multiplies) and the options allow it."""
    return kb.options.tensor_cores and _operand_type(kb, core) is not None


def emit_wmma_gemm(kb: KernelBuilder, g: Gemm):
    """The tensor-core kernel for ``g`` (one that ``takes_tensor_cores``)."""
    core, nb, m, n, k = g.core, g.nb, g.m, g.n, g.k
    ctype, convert = _TYPES[_operand_type(kb, core)]
    lda, ldb, ldc = BK + PAD_AB, BN + PAD_AB, BN + PAD_C
    frags = WM // FRAG, WN // FRAG
    body = IndentedBuffer()
    em = kb.emitter(body)
    body.line(f"__shared__ __align__(32) {ctype} As[{BM}][{lda}];")
    body.line(f"__shared__ __align__(32) {ctype} Bs[{BK}][{ldb}];")
    body.line(f"__shared__ __align__(32) float Cs[{BM}][{ldc}];")
    body.line("const int tid = threadIdx.x, warp = tid / 32;")
    body.line(f"const int wm = (warp / {BN // WN}) * {WM}, wn = (warp % {BN // WN}) * {WN};")
    body.line("[[maybe_unused]] const int64_t bt = blockIdx.z;")
    body.line(f"const int64_t m0 = (int64_t)blockIdx.y * {BM}, n0 = (int64_t)blockIdx.x * {BN};")
    body.line(f"nvcuda::wmma::fragment<nvcuda::wmma::accumulator, {FRAG}, {FRAG}, {FRAG}, float> "
              f"acc[{frags[0]}][{frags[1]}];")
    body.line(f"for (int i = 0; i < {frags[0]}; ++i) for (int j = 0; j < {frags[1]}; ++j) "
              f"nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);")
    with body.block(f"for (int64_t k0 = 0; k0 < {k}; k0 += {BK})"):
        emit_slice_loads(body, em, g, (BM, BN, BK), THREADS, (f"As[l / {BK}][l % {BK}]", f"Bs[l / {BN}][l % {BN}]"),
                         "float", convert)
        body.line("__syncthreads();")
        with body.block(f"for (int kk = 0; kk < {BK}; kk += {FRAG})"):
            for use, count in (("a", frags[0]), ("b", frags[1])):
                body.line(f"nvcuda::wmma::fragment<nvcuda::wmma::matrix_{use}, {FRAG}, {FRAG}, {FRAG}, {ctype}, "
                          f"nvcuda::wmma::row_major> f{use}[{count}];")
            body.line(f"for (int i = 0; i < {frags[0]}; ++i) "
                      f"nvcuda::wmma::load_matrix_sync(fa[i], &As[wm + {FRAG} * i][kk], {lda});")
            body.line(f"for (int j = 0; j < {frags[1]}; ++j) "
                      f"nvcuda::wmma::load_matrix_sync(fb[j], &Bs[kk][wn + {FRAG} * j], {ldb});")
            body.line(f"for (int i = 0; i < {frags[0]}; ++i) for (int j = 0; j < {frags[1]}; ++j) "
                      f"nvcuda::wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);")
        body.line("__syncthreads();")
    body.line(f"for (int i = 0; i < {frags[0]}; ++i) for (int j = 0; j < {frags[1]}; ++j) "
              f"nvcuda::wmma::store_matrix_sync(&Cs[wm + {FRAG} * i][wn + {FRAG} * j], acc[i][j], {ldc}, "
              f"nvcuda::wmma::mem_row_major);")
    body.line("__syncthreads();")
    with body.block(f"for (int l = tid; l < {BM * BN}; l += {THREADS})"):
        body.line(f"const int64_t mm = m0 + l / {BN}, nn = n0 + l % {BN};")
        with body.block(f"if (mm < {m} && nn < {n})"):
            store_result(body, kb, em, core, g.out_index, f"Cs[l / {BN}][l % {BN}]")
    epilogue = f", epilogue %{kb.root.name}" if core is not kb.root else ""
    note = g.note + (f"{epilogue}, tensor cores: {ctype} wmma {FRAG}x{FRAG}x{FRAG} fragments, {BM}x{BN} tiles of "
             f"{WARPS} warps ({WM}x{WN} each), {BK}-deep shared slices, float accumulation")
    return kb.finish(body, (ceil_div(n, BN), ceil_div(m, BM), nb), (THREADS,), note)
