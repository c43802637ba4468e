/* %fusion.0 = f32[2,9,11,24]{3,2,1,0} fusion, kind=kOutput */
/* launch: grid=(6,1,1) block=(256,1,1) shared=0B; depthwise convolution: 24 features (24 inputs x multiplier 1), 3x3 window, 4 output(s) per thread along output dim 2 (6 input loads for 4x3 products per window row), taps in registers, float accumulation, epilogue %relu6 */
extern "C" __global__ void __launch_bounds__(256) k0_fusion_0(const float* __restrict__ p0, const float* __restrict__ p1, const float* __restrict__ p2, float* __restrict__ r0) {
  const int64_t lin = (int64_t)blockIdx.x * 256 + threadIdx.x;
  if (lin >= 1296) return;
  const int64_t feat = lin % 24;  // the output feature; input feature chan (multiplier 1)
  [[maybe_unused]] const int64_t chan = feat;
  [[maybe_unused]] const int64_t b1 = ((lin / 24) / 27);
  [[maybe_unused]] const int64_t x2 = ((lin / 24) / 3) % 9;
  [[maybe_unused]] const int64_t x3 = ((lin / 24) % 3) * 4;
  float wt[9];
  #pragma unroll
  for (int j = 0; j < 9; ++j) {
    const float x4 = p1[feat + (((j) % 3) * 24) + (((j) / 3) * 72)];
    wt[j] = (float)(x4);
  }
  float acc[4] = {};
  #pragma unroll
  for (int j5 = 0; j5 < 3; ++j5) {
    const int64_t i6 = x2 + j5 - 1;
    if (i6 < 0 || i6 >= 9) continue;
    float row[6];
    #pragma unroll
    for (int l = 0; l < 6; ++l) {
      const int64_t at = x3 + l - 1;
      row[l] = 0;
      if (at >= 0 && at < 11) {
        const float x7 = p0[chan + (at * 24) + (i6 * 264) + (b1 * 2376)];
        row[l] = (float)(x7);
      }
    }
    #pragma unroll
    for (int q = 0; q < 4; ++q) {
      #pragma unroll
      for (int k = 0; k < 3; ++k) acc[q] += row[q + k] * wt[j5 * 3 + k];
    }
  }
  #pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (x3 + q >= 11) break;
    const float c8 = acc[q];
    const float x9 = p2[feat];
    const float v10 = (c8 + x9);
    const float v11 = tfxla_maxf(v10, 0.0f);
    const float v12 = tfxla_minf(v11, 6.0f);
    r0[feat + ((x3 + q) * 24) + (x2 * 264) + (b1 * 2376)] = v12;
  }
}
