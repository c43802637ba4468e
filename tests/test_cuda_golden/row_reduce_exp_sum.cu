/* %fusion.0 = f32[64]{0} fusion, kind=kInput */
/* launch: grid=(8,1,1) block=(32,8,1) shared=0B; row reduction of 64 rows x 300: a warp per row, 8 rows per block, warp shuffles */
extern "C" __global__ void __launch_bounds__(256) k0_fusion_0(const float* __restrict__ p0, float* __restrict__ r0) {
  float acc1 = 0.0f;
  const int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.y;
  if (row < 64) {
    for (int64_t k = threadIdx.x; k < 300; k += 32) {
      const float x2 = p0[(k) + ((row) * 300)];
      const float v3 = tfxla_vexpf(x2);
      const float v4 = (acc1 + v3);
      acc1 = v4;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    const float o5 = tfxla_shfl_down(acc1, off);
    const float v6 = (acc1 + o5);
    acc1 = v6;
  }
  if (threadIdx.x == 0 && row < 64) {
    r0[row] = acc1;
  }
}
