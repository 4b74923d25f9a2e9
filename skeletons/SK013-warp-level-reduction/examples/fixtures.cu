// Detector fixtures for SK013 (warp-level-reduction), CUDA. Profiled statically, never compiled.
#include <cuda_runtime.h>

__global__ void row_sums_shared_tree(const float* __restrict__ x, float* __restrict__ y, int rows, int d) {
    __shared__ float sdata[256];
    unsigned tid = threadIdx.x;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        sdata[tid] = tid < d ? x[r * d + tid] : 0.f;
        __syncthreads();
        // skel: SK013 opportunity
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) {
                sdata[tid] += sdata[tid + s];
            }
            __syncthreads();
        }
        if (tid == 0) {
            y[r] = sdata[0];
        }
        __syncthreads();
    }
}

__global__ void row_sums_shuffle(const float* __restrict__ x, float* __restrict__ y, int rows, int d) {
    unsigned lane = threadIdx.x;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        float v = lane < d ? x[r * d + lane] : 0.f;
        // skel: SK013 instance
        for (int offset = 16; offset > 0; offset >>= 1) {
            v += __shfl_xor_sync(0xffffffff, v, offset);
        }
        if (lane == 0) {
            y[r] = v;
        }
    }
}

__global__ void row_sums_tree_stops_at_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int d) {
    // near-miss: the tree stops at stride 32; the last warp is already handled apart
    __shared__ float sdata[256];
    unsigned tid = threadIdx.x;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        sdata[tid] = tid < d ? x[r * d + tid] : 0.f;
        __syncthreads();
        // skel-ok: SK013
        for (unsigned s = blockDim.x / 2; s > 32; s >>= 1) {
            if (tid < s) {
                sdata[tid] += sdata[tid + s];
            }
            __syncthreads();
        }
        if (tid == 0) {
            y[r] = sdata[0];
        }
        __syncthreads();
    }
}
