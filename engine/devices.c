/* engine/devices.c: the devices this machine offers: the CPU, then any CUDA
 * devices when the CUDA backend is compiled in, listed by its plugin
 * (engine/cuda/plugin.h), which is opened here on first use where an NVIDIA
 * driver is present. Never fails. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/net.h"
#ifdef KILN_HAVE_CUDA
#include "engine/cuda/plugin.h"    /* cuda_plugin_open */
#endif

/* The CPU's model name from /proc/cpuinfo ("model name", or the ARM fields),
 * or "CPU" where there is none. */
static void cpu_name(char *out, size_t len)
{
    char line[512];
    snprintf(out, len, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0 && strncmp(line, "Model", 5) != 0)
            continue;
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        v[strcspn(v, "\n")] = '\0';
        if (*v) {
            snprintf(out, len, "%s", v);
            break;
        }
    }
    fclose(f);
}

/* What the kernel thinks can be allocated without swapping (MemAvailable in
 * /proc/meminfo), or 0 where it does not say. */
static uint64_t cpu_available(void)
{
    char line[256];
    unsigned long long kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

int engine_devices(engine_device *out, int max)
{
    int n = 0;
    if (max > 0) {
        engine_device *d = &out[0];
        memset(d, 0, sizeof *d);
        snprintf(d->kind, sizeof d->kind, "cpu");
        d->index = 0;
        cpu_name(d->name, sizeof d->name);
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
        d->memory_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
        d->free_bytes = cpu_available();
    }
    n = 1;
#ifdef KILN_HAVE_CUDA
    /* No driver: no GPUs, and nothing opened. A plugin that would not load
     * said why on stderr, once (engine/backend.c). */
    const kiln_cuda_plugin *p = cuda_plugin_open(NULL, 0);
    if (p)
        n += p->devices(max > 1 ? out + 1 : NULL, max > 1 ? max - 1 : 0);
#endif
    return n;
}
