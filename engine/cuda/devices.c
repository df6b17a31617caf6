/* engine/cuda/devices.c: listing CUDA devices through the runtime API. */
#include "engine/cuda/devices.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

int cuda_devices(engine_device *out, int max)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();          /* clear the sticky "no driver" error */
        return 0;
    }
    for (int i = 0; i < n && i < max; i++) {
        struct cudaDeviceProp p;
        engine_device *d = &out[i];
        memset(d, 0, sizeof *d);
        snprintf(d->kind, sizeof d->kind, "cuda");
        d->index = i;
        if (cudaGetDeviceProperties(&p, i) == cudaSuccess) {
            snprintf(d->name, sizeof d->name, "%.127s", p.name);
            d->memory_bytes = (uint64_t)p.totalGlobalMem;
        } else {
            (void)cudaGetLastError();
            snprintf(d->name, sizeof d->name, "CUDA device %d", i);
        }
    }
    return n;
}
