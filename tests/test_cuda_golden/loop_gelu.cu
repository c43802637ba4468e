/* %fusion.0 = f32[64,300]{1,0} fusion, kind=kLoop */
/* launch: grid=(19,1,1) block=(256,1,1) shared=0B; elemental loop over 19200 elements, 4 per thread (float4 loads/stores), grid-stride, at most 4096 blocks */
extern "C" __global__ void __launch_bounds__(256) k0_fusion_0(const float* __restrict__ p0, float* __restrict__ r0) {
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < 4800; g += (int64_t)gridDim.x * blockDim.x) {
    [[maybe_unused]] const int64_t i0_0 = (((g * 4)) / 300);
    [[maybe_unused]] const int64_t i0_1 = ((g * 4)) % 300;
    [[maybe_unused]] const int64_t i1_0 = (((g * 4 + 1)) / 300);
    [[maybe_unused]] const int64_t i1_1 = ((g * 4 + 1)) % 300;
    [[maybe_unused]] const int64_t i2_0 = (((g * 4 + 2)) / 300);
    [[maybe_unused]] const int64_t i2_1 = ((g * 4 + 2)) % 300;
    [[maybe_unused]] const int64_t i3_0 = (((g * 4 + 3)) / 300);
    [[maybe_unused]] const int64_t i3_1 = ((g * 4 + 3)) % 300;
    [[maybe_unused]] const float4 vec1 = reinterpret_cast<const float4*>(p0)[g];
    const float v2 = (0.5f * vec1.x);
    const float v3 = (vec1.x * vec1.x);
    const float v4 = (v3 * vec1.x);
    const float v5 = (0.03567739948630333f * v4);
    const float v6 = (0.797885000705719f * vec1.x);
    const float v7 = (v5 + v6);
    const float v8 = tfxla_vtanhf(v7);
    const float v9 = (1.0f + v8);
    const float v10 = (v2 * v9);
    const float v11 = (0.5f * vec1.y);
    const float v12 = (vec1.y * vec1.y);
    const float v13 = (v12 * vec1.y);
    const float v14 = (0.03567739948630333f * v13);
    const float v15 = (0.797885000705719f * vec1.y);
    const float v16 = (v14 + v15);
    const float v17 = tfxla_vtanhf(v16);
    const float v18 = (1.0f + v17);
    const float v19 = (v11 * v18);
    const float v20 = (0.5f * vec1.z);
    const float v21 = (vec1.z * vec1.z);
    const float v22 = (v21 * vec1.z);
    const float v23 = (0.03567739948630333f * v22);
    const float v24 = (0.797885000705719f * vec1.z);
    const float v25 = (v23 + v24);
    const float v26 = tfxla_vtanhf(v25);
    const float v27 = (1.0f + v26);
    const float v28 = (v20 * v27);
    const float v29 = (0.5f * vec1.w);
    const float v30 = (vec1.w * vec1.w);
    const float v31 = (v30 * vec1.w);
    const float v32 = (0.03567739948630333f * v31);
    const float v33 = (0.797885000705719f * vec1.w);
    const float v34 = (v32 + v33);
    const float v35 = tfxla_vtanhf(v34);
    const float v36 = (1.0f + v35);
    const float v37 = (v29 * v36);
    reinterpret_cast<float4*>(r0)[g] = make_float4(v10, v19, v28, v37);
  }
}
