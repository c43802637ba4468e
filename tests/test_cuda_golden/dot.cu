/* %d1 = f32[128,70]{1,0} dot */
/* launch: grid=(2,2,1) block=(16,16,1) shared=0B; tiled dot: batch 1, [128, 300] x [300, 70], 64x64 tiles, 16-deep shared slices, 4x4 per thread, float accumulation */
extern "C" __global__ void __launch_bounds__(256) k0_d1(const float* __restrict__ p0, const float* __restrict__ p1, float* __restrict__ r0) {
  __shared__ float As[16][65];
  __shared__ float Bs[16][65];
  float acc[4][4] = {};
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  [[maybe_unused]] const int64_t bt = blockIdx.z;
  const int64_t m0 = (int64_t)blockIdx.y * 64, n0 = (int64_t)blockIdx.x * 64;
  for (int64_t k0 = 0; k0 < 300; k0 += 16) {
    for (int l = tid; l < 1024; l += 256) {
      const int64_t am = m0 + l / 16, ak = k0 + l % 16;
      float av = 0;
      if (am < 128 && ak < 300) {
        const float x1 = p0[(ak) + ((am) * 300)];
        av = (float)(x1);
      }
      As[l % 16][l / 16] = av;
    }
    for (int l = tid; l < 1024; l += 256) {
      const int64_t bk = k0 + l / 64, bn = n0 + l % 64;
      float bv = 0;
      if (bk < 300 && bn < 70) {
        const float x2 = p1[(bn) + ((bk) * 70)];
        bv = (float)(x2);
      }
      Bs[l / 64][l % 64] = bv;
    }
    __syncthreads();
    #pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      float a[4], b[4];
      #pragma unroll
      for (int i = 0; i < 4; ++i) { a[i] = As[kk][ty + 16 * i]; b[i] = Bs[kk][tx + 16 * i]; }
      #pragma unroll
      for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t mm = m0 + ty + 16 * i;
    for (int j = 0; j < 4; ++j) {
      const int64_t nn = n0 + tx + 16 * j;
      if (mm < 128 && nn < 70) {
        r0[(bt * 128 + mm) * 70 + nn] = acc[i][j];
      }
    }
  }
}
