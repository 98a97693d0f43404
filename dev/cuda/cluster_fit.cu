// cluster_fit.cu -- how many thread-block clusters of the tensor-core decode kernel fit on this GPU at
// once (cudaOccupancyMaxActiveClusters), by dynamic shared memory and cluster size. A split-KV
// merge through distributed shared memory needs all of a call's clusters resident together.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFLASHC_BUILD -DFLASHC_WITH_CUDA \
//        -Iinclude -Isrc dev/cuda/cluster_fit.cu -o build/cluster_fit && build/cluster_fit
// H200, 2026-12-02 (bench/results/h200-2026-12-02-s15.txt call 10): at 128 KB, clusters of 16 / 8 / 4:
// 7 / 15 / 30; at 96 KB or less (two CTAs per SM): 14 / 30 / 62.
#include <stdio.h>

#include "cuda/flashc_cuda_decode.cu"

int main() {
    const void *fn = (const void *)flashc_decode_mma_kernel<__nv_bfloat16, 128>;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    printf("SMs %d\n", sms);
    cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    const int smems[] = {131072, 98304, 65536, 32768};
    for (int si = 0; si < 4; si++) {
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smems[si]);
        printf("smem %6d:", smems[si]);
        for (int cs = 1; cs <= 16; cs *= 2) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at = {};
            at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = cs, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
            cfg.gridDim = dim3(cs * 8), cfg.blockDim = dim3(DEC_THREADS), cfg.dynamicSmemBytes = smems[si];
            cfg.attrs = &at, cfg.numAttrs = 1;
            int n = -1;
            const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, fn, &cfg);
            printf("  size %2d: %3d%s", cs, n, e != cudaSuccess ? cudaGetErrorString(e) : "");
        }
        printf("\n");
    }
    return 0;
}
