// lab.h -- what the stand-alone lab programs in dev/cuda share: CK, a CUDA call that exits on error
// (these are programs, not the library, which returns a status instead).
#pragma once
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
