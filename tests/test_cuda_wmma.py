"""Tensor-core kernels (``backends/cuda/kernel_wmma.py``): which products take them, their shared-memory
layout's alignment rules, and their numbers (host emulator and through TensorFlow) without a GPU.

The emulator's ``nvcuda::wmma`` gives every thread of a warp the whole fragment and stores once per
warp, so it checks the kernel's tiling, edges, conversions and epilogue, not the hardware's fragment
layout (which the kernel never depends on: it only loads, multiplies and stores whole fragments).
Numbers: the module ``tensor_cores`` of ``tests.gpu.cases`` also runs in ``test_cuda_emulated`` and is
compiled by nvcc for sm_80/sm_90 in ``test_cuda_nvcc``; here the f16 product through TensorFlow is
compared with TF (its own f16 rounding: rtol 1e-2 / atol 5e-2) and with the exact product of the f16
inputs rounded once to f16 (within one f16 rounding step: f32 accumulation).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import backends.cuda as cuda
import hlo
from backends.cuda import kernel_wmma as W
from backends.cuda.codegen import CodegenOptions
from backends.cuda.host_emulator import CUDA_INCLUDE
from backends.cuda.pipeline import optimize
from tests.gpu.cases import MODULES


def _strategies(name: str, **options) -> dict[str, str]:
    g = cuda.generate(optimize(hlo.parse_module(MODULES[name])), CodegenOptions(**options))
    return {k.split("_", 1)[1]: v for k, v in g.strategies.items()}


def test_f16_and_bf16_dots_and_convolutions_take_the_tensor_cores() -> None:
    assert _strategies("tensor_cores") == {"fusion_0": "dot-wmma", "c": "conv-wmma", "wh": "loop", "mixed": "dot-wmma"}
    source = cuda.emit_source(optimize(hlo.parse_module(MODULES["tensor_cores"])))
    assert "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16" in source
    assert "nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half" in source
    assert "epilogue %dr, tensor cores" in source  # the bias + relu of the bf16 dot's output fusion
    # f32 and f64 products stay on the CUDA cores
    assert _strategies("dots") == {"d1": "dot-tiled", "d2": "dot-wmma", "d3": "dot-tiled"}


def test_the_option_keeps_every_product_on_the_cuda_cores() -> None:
    assert _strategies("tensor_cores", tensor_cores=False) == {
        "fusion_0": "dot-tiled", "c": "conv-implicit-gemm", "wh": "loop", "mixed": "dot-tiled"}


def test_fragment_pointers_and_strides_keep_wmma_alignment() -> None:
    # load/store_matrix_sync need 32-byte aligned pointers and ldm a multiple of 16 bytes.
    half, single = 2, 4
    lda, ldb, ldc = W.BK + W.PAD_AB, W.BN + W.PAD_AB, W.BN + W.PAD_C
    for ld, size in ((lda, half), (ldb, half), (ldc, single)):
        assert ld * size % 16 == 0
    for offset in range(0, W.BM, W.FRAG):  # fragment row starts: As rows, Cs rows
        assert offset * lda * half % 32 == 0 and offset * ldc * single % 32 == 0
    for offset in range(0, W.BK, W.FRAG):  # Bs rows, As columns
        assert offset * ldb * half % 32 == 0 and offset * half % 32 == 0
    for offset in range(0, W.BN, W.FRAG):  # Bs and Cs columns
        assert offset * half % 32 == 0 and offset * single % 32 == 0
    assert W.THREADS == 32 * (W.BM // W.WM) * (W.BN // W.WN)
    # the shared tiles fit the 48 KB a block gets without opting in
    assert (W.BM * lda + W.BK * ldb) * half + W.BM * ldc * single <= 48 * 1024


@pytest.mark.skipif(shutil.which("nvcc") is None or not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_fp16.h")),
                    reason="needs nvcc and the CUDA headers")
def test_an_f16_dense_layer_through_tensorflow_matches_tf_and_the_exact_product(monkeypatch) -> None:
    import tensorflow as tf

    import tfxla_plugin
    from tests.test_cuda_tf import _emulated_build
    import backends

    monkeypatch.setattr(backends.get("cuda"), "compile", _emulated_build)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 70)).astype(np.float16)
    w = (rng.standard_normal((70, 50)) * 0.2).astype(np.float16)
    b = rng.standard_normal(50).astype(np.float16)

    def dense(x, w, b):
        return tf.nn.relu(tf.matmul(x, w) + b)
    f = tfxla_plugin.function(dense, backend="cuda")
    args = [tf.constant(a) for a in (x, w, b)]
    source = f.experimental_get_compiler_ir(*args)(stage="c")
    assert "tensor cores: __half wmma" in source
    got = f(*args).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), dense(*args).numpy().astype(np.float32), rtol=1e-2, atol=5e-2)
    product = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)  # the dot, rounded to f16
    exact = np.maximum(product.astype(np.float64) + b, 0).astype(np.float16).astype(np.float64)
    step = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= 2 * step + 1e-3)
