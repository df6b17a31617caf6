/* engine/cuda/devices.c: listing CUDA devices through the runtime API, with
 * their free memory from NVML.
 *
 * The runtime's cudaMemGetInfo would need a context on each GPU, which costs
 * hundreds of MiB of its memory and would stay in the server's process; NVML
 * (the driver's management library) reads free memory without one. It comes
 * with the driver, not the toolkit, so it is opened at run time: where it is
 * missing the free memory is simply not known, and the binary still starts on
 * machines without a driver. NVML numbers GPUs its own way (CUDA_VISIBLE_DEVICES
 * does not apply to it), so a GPU is found by its PCI bus id. */
#include "engine/cuda/devices.h"
#include "base/nvml_lib.h"        /* nvml_library: the library's name, and the tests' seam */

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The few NVML declarations used (nvml.h is not in the toolkit): the ABI of
 * nvmlInit_v2, nvmlShutdown, nvmlDeviceGetHandleByPciBusId_v2 and
 * nvmlDeviceGetMemoryInfo, as NVIDIA documents them. */
typedef struct nvml_device *nvml_device;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;

static struct {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_pci)(const char *bus_id, nvml_device *out);
    int (*memory)(nvml_device d, nvml_memory *out);
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_open(void)
{
    void *lib = dlopen(nvml_library(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    *(void **)&nvml.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&nvml.shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&nvml.by_pci = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nvml.memory = dlsym(lib, "nvmlDeviceGetMemoryInfo");
    if (!nvml.init || !nvml.shutdown || !nvml.by_pci || !nvml.memory) {
        dlclose(lib);
        memset(&nvml, 0, sizeof nvml);
        return;
    }
    nvml.lib = lib;
}

/* Free bytes on CUDA device i, or 0 when NVML cannot say. */
static uint64_t free_memory(int i)
{
    char bus[64];
    nvml_device d;
    nvml_memory m;
    uint64_t free_bytes = 0;
    pthread_once(&nvml_once, nvml_open);
    if (!nvml.lib || cudaDeviceGetPCIBusId(bus, (int)sizeof bus, i) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (nvml.init() != 0)                   /* NVML_SUCCESS is 0; init and shutdown nest */
        return 0;
    if (nvml.by_pci(bus, &d) == 0 && nvml.memory(d, &m) == 0)
        free_bytes = (uint64_t)m.free;
    nvml.shutdown();
    return free_bytes;
}

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
            d->cc_major = p.major;
            d->cc_minor = p.minor;
        } else {
            (void)cudaGetLastError();
            snprintf(d->name, sizeof d->name, "CUDA device %d", i);
        }
        d->free_bytes = free_memory(i);
    }
    return n;
}
