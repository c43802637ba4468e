/* %fusion.0 = f32[257,130]{1,0} fusion, kind=kLoop */
/* launch: grid=(9,5,1) block=(32,8,1) shared=0B; tiled transpose [1, 130, 257] -> [1, 257, 130] through 32x33 shared tiles */
extern "C" __global__ void __launch_bounds__(256) k1_fusion_0(const float* __restrict__ p0, float* __restrict__ r0) {
  __shared__ float tile[32][33];
  const int64_t bt = blockIdx.z;
  const int64_t x0 = (int64_t)blockIdx.y * 32, y0 = (int64_t)blockIdx.x * 32;
  for (int j = threadIdx.y; j < 32; j += 8) {
    const int64_t x = x0 + j, y = y0 + threadIdx.x;
    if (x < 130 && y < 257) {
      const float x1 = p0[(y) + ((x) * 257)];
      const float v2 = tfxla_vexpf(x1);
      tile[j][threadIdx.x] = v2;
    }
  }
  __syncthreads();
  for (int j = threadIdx.y; j < 32; j += 8) {
    const int64_t y = y0 + j, x = x0 + threadIdx.x;
    if (x < 130 && y < 257) {
      r0[(bt * 257 + y) * 130 + x] = tile[threadIdx.x][j];
    }
  }
}
