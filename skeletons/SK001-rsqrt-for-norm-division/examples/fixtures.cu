// Detector fixtures for SK001 (rsqrt-for-norm-division), CUDA. Profiled statically, never compiled.
#include <cuda_runtime.h>

__global__ void l2norm_rows(const float* __restrict__ x, float* __restrict__ y, int d) {
    const float* row = x + blockIdx.x * d;
    float sum = 0.f;
    for (int i = 0; i < d; ++i) {
        sum += row[i] * row[i];
    }
    for (int i = 0; i < d; ++i) {
        // skel: SK001 opportunity
        y[blockIdx.x * d + i] = row[i] / sqrtf(sum + 1e-6f);
    }
}

__global__ void l2norm_rows_rsqrt(const float* __restrict__ x, float* __restrict__ y, int d) {
    const float* row = x + blockIdx.x * d;
    float sum = 0.f;
    for (int i = 0; i < d; ++i) {
        sum += row[i] * row[i];
    }
    // skel: SK001 instance
    float inv = rsqrtf(sum + 1e-6f);
    for (int i = 0; i < d; ++i) {
        y[blockIdx.x * d + i] = row[i] * inv;
    }
}

__global__ void scale_by_sqrt_of_parameter(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        // skel-ok: SK001
        y[i] = x[i] / sqrtf(s);
    }
}
