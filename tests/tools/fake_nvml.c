/* tests/tools/fake_nvml.c: a stand-in for libnvidia-ml.so.1 with fixed figures,
 * for the tests of GET /api/v1/hardware and GET /metrics on machines without a
 * GPU. The server opens it instead of the real library when KILN_NVML_LIBRARY
 * names it (the test seam of base/nvml_lib.h).
 *
 * Two GPUs. GPU 0: "Fake GPU \"A\" \\ 0" (a name that needs escaping in
 * Prometheus labels), 37 % busy, 3 GiB of 16 GiB used, 61 C, 123.456 W.
 * GPU 1: "Fake GPU B", 0 % busy, 1 GiB of 8 GiB, no temperature sensor (NVML's
 * NOT_SUPPORTED: the server must report it as unknown), 50 W.
 * Exports only the symbols kiln resolves; the ABI is NVML's (0 is success). */
#include <stdio.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3

typedef struct { unsigned int gpu, memory; } nvml_utilization;
typedef struct { unsigned long long total, free, used; } nvml_memory;

static const struct fake_gpu {
    const char *name;
    unsigned int util;
    unsigned long long used, total;
    int temperature;                 /* < 0: not supported */
    unsigned int milliwatts;
} gpus[] = {
    { "Fake GPU \"A\" \\ 0", 37, 3ULL << 30, 16ULL << 30, 61, 123456 },
    { "Fake GPU B", 0, 1ULL << 30, 8ULL << 30, -1, 50000 },
};
#define NGPUS (sizeof gpus / sizeof gpus[0])

/* A handle is a pointer to its entry. */
typedef const struct fake_gpu *nvml_device;

int nvmlInit_v2(void) { return NVML_SUCCESS; }
int nvmlShutdown(void) { return NVML_SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = NGPUS;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvml_device *d)
{
    if (i >= NGPUS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &gpus[i];
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvml_device *d)
{
    (void)bus;
    *d = &gpus[0];
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(nvml_device d, char *name, unsigned int len)
{
    snprintf(name, len, "%s", d->name);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvml_device d, nvml_utilization *u)
{
    u->gpu = d->util;
    u->memory = d->util / 2;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvml_device d, nvml_memory *m)
{
    m->total = d->total;
    m->used = d->used;
    m->free = d->total - d->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvml_device d, int sensor, unsigned int *t)
{
    if (sensor != 0 || d->temperature < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *t = (unsigned int)d->temperature;
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(nvml_device d, unsigned int *mw)
{
    *mw = d->milliwatts;
    return NVML_SUCCESS;
}
