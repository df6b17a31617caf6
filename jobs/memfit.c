/* jobs/memfit.c: the training-memory check against available memory
 * (contract in memfit.h). */
#include "jobs/memfit.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "engine/net.h"       /* engine_devices */
#include "engine/spec.h"      /* spec_parse */
#include "engine/summary.h"   /* summary_memory, summary_check_memory, summary_max_batch */

#define MAX_DEVICES 65

uint64_t memfit_mem_available(const char *meminfo_path)
{
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    FILE *f = fopen(meminfo_path ? meminfo_path : MEMFIT_MEMINFO, "re");
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    return found && kib <= UINT64_MAX / 1024 ? (uint64_t)kib * 1024 : 0;
}

int64_t memfit_usable(uint64_t available)
{
    if (available > (uint64_t)INT64_MAX)
        available = (uint64_t)INT64_MAX;
    uint64_t margin = available / 100 * MEMFIT_MARGIN_PERCENT +
                      available % 100 * MEMFIT_MARGIN_PERCENT / 100;
    return (int64_t)(available - margin);
}

/* "22,443" into buf. */
static void grouped(char *buf, size_t n, uint64_t v)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

/* The free memory of the job's GPUs that it would run on (the smallest of
 * them): the listed ones, or the `count` with the most free. 0: not known. */
static uint64_t gpu_free(const jobcfg_devices *d)
{
    engine_device dev[MAX_DEVICES];
    int n = engine_devices(dev, MAX_DEVICES);
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    uint64_t frees[MAX_DEVICES];
    int ngpu = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(dev[i].kind, "cuda"))
            frees[ngpu++] = dev[i].free_bytes;
    if (d->count < 1 || d->count > ngpu)
        return 0;                            /* the scheduler refuses it with its own reason */
    uint64_t least = UINT64_MAX;
    if (d->listed) {
        for (int k = 0; k < d->count; k++) {
            if (d->ids[k] < 0 || d->ids[k] >= ngpu || frees[d->ids[k]] == 0)
                return 0;
            if (frees[d->ids[k]] < least)
                least = frees[d->ids[k]];
        }
        return least;
    }
    for (int k = 0; k < d->count; k++) {     /* the count largest: selection, small n */
        int best = -1;
        for (int i = 0; i < ngpu; i++)
            if (frees[i] != UINT64_MAX && (best < 0 || frees[i] > frees[best]))
                best = i;
        if (best < 0 || frees[best] == 0)
            return 0;
        if (frees[best] < least)
            least = frees[best];
        frees[best] = UINT64_MAX;            /* taken */
    }
    return least;
}

int memfit_check(const jobcfg *c, net_shape in, int classes, const char *meminfo_path,
                 int64_t *max_batch, char *err, size_t errlen)
{
    *max_batch = 0;
    bool gpu = c->devices.kind == BACKEND_CUDA;
    uint64_t available = gpu ? gpu_free(&c->devices) : memfit_mem_available(meminfo_path);
    if (available == 0)
        return 0;                            /* not known: net_create checks what it can */
    int devices = c->devices.count > 0 ? c->devices.count : 1;
    int share = (c->batch_size + devices - 1) / devices;     /* each device's part of a batch */
    /* CPU replicas (a testing seam) share the one memory; each GPU has its own. */
    int64_t usable = memfit_usable(available) / (gpu ? 1 : devices);

    net_spec s;
    if (spec_parse(c->network, in, classes, &s, err, errlen) != 0)
        return -1;
    int states = summary_opt_states(c->solver.type, c->solver.momentum > 0);
    summary_mem m;
    int ret = -1;
    if (summary_memory(&s, states, c->precision, &m, err, errlen) != 0)
        goto out;
    ret = 0;
    if (summary_train_bytes(&m, share) <= usable)
        goto out;
    char where[160];
    char avail_mib[32];
    grouped(avail_mib, sizeof avail_mib, available >> 20);
    snprintf(where, sizeof where, "%s (%s MiB %s less a %d%% margin for what the estimate leaves "
             "out):", gpu ? "the GPU memory free now" : "the memory available now", avail_mib,
             gpu ? "free" : "MemAvailable", MEMFIT_MARGIN_PERCENT);
    char msg[512];
    summary_check_memory(&s, states, c->precision, share, devices, usable, where, msg, sizeof msg);
    set_err(err, errlen, "%s (the estimate is a lower bound: workspaces and the runtime's own "
            "memory come on top)", msg);
    int64_t most = summary_max_batch(&m, usable);
    *max_batch = most * devices;
    ret = 1;
out:
    spec_free(&s);
    return ret;
}
