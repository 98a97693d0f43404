// lab.h -- what the stand-alone lab programs in dev/cuda share: CK, a CUDA call that exits on error
// (these are programs, not the library, which returns a status instead), and lab_fill.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(...)                                                                                           \
    do {                                                                                                  \
        cudaError_t e_ = (__VA_ARGS__);                                                                   \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #__VA_ARGS__, cudaGetErrorString(e_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

// x[0 .. n) = a hash of (index, seed), uniform in [-amp, amp): inputs that cost no host copy.
__global__ void lab_fill(__nv_bfloat16 *x, size_t n, uint32_t seed, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16(((h & 0xffffff) / 16777216.0f * 2.f - 1.f) * amp);
    }
}
