/* %fusion.2 = f32[3]{0} fusion, kind=kInput */
/* launch: grid=(1,10,1) block=(32,8,1) shared=0B; column reduction [1, 10000, 3] -> [1, 3] split into 10 slices of 1000 rows: 32 columns x 8 rows per block, partial columns combined by the last block of each tile */
extern "C" __global__ void __launch_bounds__(256) k2_fusion_2(const float* __restrict__ p0, float* __restrict__ r0) {
  float acc1 = 0.0f;
  __shared__ float smem2[8][33];
  const int64_t a = blockIdx.x / 1;
  const int64_t col = (int64_t)(blockIdx.x % 1) * 32 + threadIdx.x;
  const int64_t k_lo = (int64_t)blockIdx.y * 1000;
  const int64_t k_hi = k_lo + 1000 < 10000 ? k_lo + 1000 : 10000;
  if (col < 3) {
    for (int64_t k = k_lo + threadIdx.y; k < k_hi; k += 8) {
      const float x3 = p0[(col) + (((k) % 10) * 3) + (((k) / 10) * 30)];
      const float v4 = (acc1 + x3);
      acc1 = v4;
    }
  }
  smem2[threadIdx.y][threadIdx.x] = acc1;
  __syncthreads();
  if (threadIdx.y == 0 && col < 3) {
    for (int t = 1; t < 8; ++t) {
      const float o5 = smem2[t][threadIdx.x];
      const float v6 = (acc1 + o5);
      acc1 = v6;
    }
  }
  __shared__ bool last;
  if (threadIdx.y == 0 && col < 3) {
    k2_fusion_2_partial0[blockIdx.y * 3 + a * 3 + col] = acc1;
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    last = atomicAdd(&k2_fusion_2_ticket[blockIdx.x], 1u) == 9u;
  }
  __syncthreads();
  if (last && threadIdx.y == 0 && col < 3) {
    __threadfence();
    acc1 = 0.0f;
    for (int s = 0; s < 10; ++s) {
      const float o7 = ((volatile float*)k2_fusion_2_partial0)[s * 3 + a * 3 + col];
      const float v8 = (acc1 + o7);
      acc1 = v8;
    }
    r0[a * 3 + col] = acc1;
  }
  if (last && threadIdx.x == 0 && threadIdx.y == 0) {
    k2_fusion_2_ticket[blockIdx.x] = 0u;
  }
}
