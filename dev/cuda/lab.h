// lab.h -- what the stand-alone lab programs in dev/cuda share: CK, a CUDA call that exits on error
// (these are programs, not the library, which returns a status instead), lab_fill and lab_median_ms.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(...)                                                                                           \
    do {                                                                                                  \
        cudaError_t e_ = (__VA_ARGS__);                                                                   \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #__VA_ARGS__, cudaGetErrorString(e_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

// x[0 .. n) = a hash of (index, seed), uniform in [-amp, amp) and rounded to T (bf16, e4m3):
// inputs that cost no host copy.
template <typename T>
__global__ void lab_fill(T *x, size_t n, uint32_t seed, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = T(((h & 0xffffff) / 16777216.0f * 2.f - 1.f) * amp);
    }
}

// The median time of 15 launches (ms, by events), after one launch to warm up.
template <typename F>
static double lab_median_ms(F launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < 15; i++) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
