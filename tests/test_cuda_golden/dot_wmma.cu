/* %d2 = f16[2,64,80]{2,1,0} dot */
/* launch: grid=(2,1,2) block=(128,1,1) shared=0B; dot: batch 2, [64, 32] x [32, 80], tensor cores: __half wmma 16x16x16 fragments, 64x64 tiles of 4 warps (32x32 each), 32-deep shared slices, float accumulation */
extern "C" __global__ void __launch_bounds__(128) k1_d2(const __half* __restrict__ p0, const __half* __restrict__ p1, __half* __restrict__ r0) {
  __shared__ __align__(32) __half As[64][40];
  __shared__ __align__(32) __half Bs[32][72];
  __shared__ __align__(32) float Cs[64][68];
  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  [[maybe_unused]] const int64_t bt = blockIdx.z;
  const int64_t m0 = (int64_t)blockIdx.y * 64, n0 = (int64_t)blockIdx.x * 64;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < 32; k0 += 32) {
    for (int l = tid; l < 2048; l += 128) {
      const int64_t am = m0 + l / 32, ak = k0 + l % 32;
      float av = 0;
      if (am < 64 && ak < 32) {
        const float x1 = (float)(p0[(ak) + ((am) * 32) + ((bt) * 2048)]);
        av = (float)(x1);
      }
      As[l / 32][l % 32] = __float2half(av);
    }
    for (int l = tid; l < 2048; l += 128) {
      const int64_t bk = k0 + l / 64, bn = n0 + l % 64;
      float bv = 0;
      if (bk < 32 && bn < 80) {
        const float x2 = (float)(p1[(bn) + ((bk) * 80) + ((bt) * 2560)]);
        bv = (float)(x2);
      }
      Bs[l / 64][l % 64] = __float2half(bv);
    }
    __syncthreads();
    for (int kk = 0; kk < 32; kk += 16) {
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa[2];
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> fb[2];
      for (int i = 0; i < 2; ++i) nvcuda::wmma::load_matrix_sync(fa[i], &As[wm + 16 * i][kk], 40);
      for (int j = 0; j < 2; ++j) nvcuda::wmma::load_matrix_sync(fb[j], &Bs[kk][wn + 16 * j], 72);
      for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) nvcuda::wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i) for (int j = 0; j < 2; ++j) nvcuda::wmma::store_matrix_sync(&Cs[wm + 16 * i][wn + 16 * j], acc[i][j], 68, nvcuda::wmma::mem_row_major);
  __syncthreads();
  for (int l = tid; l < 4096; l += 128) {
    const int64_t mm = m0 + l / 64, nn = n0 + l % 64;
    if (mm < 64 && nn < 80) {
      r0[(bt * 64 + mm) * 80 + nn] = (__half)(Cs[l / 64][l % 64]);
    }
  }
}
