/* server/hardware.c: the hardware sampler (contract in hardware.h). */
#include "server/hardware.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"        /* set_err */
#include "base/nvml_lib.h"   /* nvml_library: which NVML, and the tests' seam */

/* ---- NVML: the few declarations used (nvml.h is not in the toolkit), as
 * NVIDIA documents their ABI. NVML_SUCCESS is 0. --------------------------- */

typedef struct nvml_device *nvml_device;
typedef struct { unsigned int gpu, memory; } nvml_utilization;
typedef struct { unsigned long long total, free, used; } nvml_memory;
#define NVML_TEMPERATURE_GPU 0

typedef struct nvml_api {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned int *n);
    int (*by_index)(unsigned int i, nvml_device *d);
    int (*name)(nvml_device d, char *name, unsigned int len);
    int (*utilization)(nvml_device d, nvml_utilization *u);
    int (*memory)(nvml_device d, nvml_memory *m);
    int (*temperature)(nvml_device d, int sensor, unsigned int *t);
    int (*power)(nvml_device d, unsigned int *milliwatts);
} nvml_api;

/* The symbols a sampler needs, by name, into api's function pointers. */
static const struct {
    const char *symbol;
    size_t offset;
} nvml_symbols[] = {
    { "nvmlInit_v2", offsetof(nvml_api, init) },
    { "nvmlShutdown", offsetof(nvml_api, shutdown) },
    { "nvmlDeviceGetCount_v2", offsetof(nvml_api, count) },
    { "nvmlDeviceGetHandleByIndex_v2", offsetof(nvml_api, by_index) },
    { "nvmlDeviceGetName", offsetof(nvml_api, name) },
    { "nvmlDeviceGetUtilizationRates", offsetof(nvml_api, utilization) },
    { "nvmlDeviceGetMemoryInfo", offsetof(nvml_api, memory) },
    { "nvmlDeviceGetTemperature", offsetof(nvml_api, temperature) },
    { "nvmlDeviceGetPowerUsage", offsetof(nvml_api, power) },
};

/* Opens and initialises NVML into *api. Returns 0, or -1 with err saying why
 * (no driver is the usual reason; then api is zeroed). */
static int nvml_open(nvml_api *api, char *err, size_t errlen)
{
    memset(api, 0, sizeof *api);
    const char *name = nvml_library();
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        set_err(err, errlen, "%s cannot be opened (no NVIDIA driver?)", name);
        return -1;
    }
    for (size_t i = 0; i < sizeof nvml_symbols / sizeof nvml_symbols[0]; i++) {
        void *f = dlsym(lib, nvml_symbols[i].symbol);
        if (!f) {
            set_err(err, errlen, "%s has no %s", name, nvml_symbols[i].symbol);
            dlclose(lib);
            return -1;
        }
        memcpy((char *)api + nvml_symbols[i].offset, &f, sizeof f);
    }
    int rc = api->init();
    if (rc != 0) {
        set_err(err, errlen, "nvmlInit_v2 failed (NVML error %d)", rc);
        dlclose(lib);
        memset(api, 0, sizeof *api);
        return -1;
    }
    api->lib = lib;
    return 0;
}

static void nvml_close(nvml_api *api)
{
    if (!api->lib)
        return;
    api->shutdown();
    dlclose(api->lib);
    memset(api, 0, sizeof *api);
}

/* ---- the sampler ------------------------------------------------------------ */

struct hw_sampler {
    unsigned interval_s;
    sched *sched;
    nvml_api nvml;
    char nvml_err[256];            /* why NVML is not available ("" when it is) */
    int ncores;

    pthread_t thread;
    pthread_mutex_t mu;            /* everything below */
    pthread_cond_t cond;
    bool stopping;
    hw_sample *ring;               /* cap entries; the newest at (head + n - 1) % cap */
    size_t cap, head, n;
    char names[HW_MAX_GPUS][HW_GPU_NAME_MAX];

    /* The sampler thread's own: /proc/stat's counters at the last sample. */
    unsigned long long cpu_busy, cpu_total;
};

/* The aggregate "cpu" line of /proc/stat as busy and total jiffies. */
static bool cpu_times(unsigned long long *busy, unsigned long long *total)
{
    unsigned long long v[10] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (got < 4)
        return false;
    /* user nice system idle iowait irq softirq steal; guest and guest_nice
     * are already counted in user and nice */
    unsigned long long idle = v[3] + v[4], all = 0;
    for (int i = 0; i < 8; i++)
        all += v[i];
    *total = all;
    *busy = all - idle;
    return true;
}

static void sample_cpu(hw_sampler *hw, hw_sample *s)
{
    unsigned long long busy, total;
    s->cpu_utilization = -1;
    if (!cpu_times(&busy, &total))
        return;
    unsigned long long db = busy - hw->cpu_busy, dt = total - hw->cpu_total;
    if (total > hw->cpu_total && busy >= hw->cpu_busy)
        s->cpu_utilization = 100.0 * (double)db / (double)dt;
    hw->cpu_busy = busy;
    hw->cpu_total = total;
}

static void sample_memory(hw_sample *s)
{
    char line[256];
    unsigned long long total = 0, avail = 0, v;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
            total = v;
        else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
            avail = v;
    }
    fclose(f);
    s->memory_total = (double)total * 1024.0;
    s->memory_used = total >= avail ? (double)(total - avail) * 1024.0 : 0;
}

static void sample_load(hw_sample *s)
{
    double l[3];
    if (getloadavg(l, 3) == 3)
        memcpy(s->load, l, sizeof l);
}

/* One GPU's figures; unknown ones stay -1. */
static void sample_gpu(hw_sampler *hw, nvml_device d, hw_gpu *g)
{
    nvml_utilization u;
    nvml_memory m;
    unsigned int t, mw;
    g->utilization = g->memory_used = g->memory_total = g->temperature_c = g->power_w = -1;
    if (hw->nvml.utilization(d, &u) == 0)
        g->utilization = u.gpu;
    if (hw->nvml.memory(d, &m) == 0) {
        g->memory_used = (double)m.used;
        g->memory_total = (double)m.total;
    }
    if (hw->nvml.temperature(d, NVML_TEMPERATURE_GPU, &t) == 0)
        g->temperature_c = t;
    if (hw->nvml.power(d, &mw) == 0)
        g->power_w = mw / 1000.0;
}

static void sample_gpus(hw_sampler *hw, hw_sample *s)
{
    unsigned int n = 0;
    if (!hw->nvml.lib || hw->nvml.count(&n) != 0)
        return;
    store_work kinds[HW_MAX_GPUS] = { 0 };
    int64_t ids[HW_MAX_GPUS] = { 0 };
    if (hw->sched)
        sched_gpu_work(hw->sched, kinds, ids, HW_MAX_GPUS);
    for (unsigned int i = 0; i < n && i < HW_MAX_GPUS; i++) {
        nvml_device d;
        if (hw->nvml.by_index(i, &d) != 0)
            continue;
        hw_gpu *g = &s->gpus[s->ngpus++];
        g->index = (int)i;
        sample_gpu(hw, d, g);
        g->work_kind = kinds[i];
        g->work_id = ids[i];
        char name[HW_GPU_NAME_MAX] = "";
        if (hw->nvml.name(d, name, sizeof name) == 0) {
            name[sizeof name - 1] = '\0';
            pthread_mutex_lock(&hw->mu);
            snprintf(hw->names[i], sizeof hw->names[i], "%s", name);
            pthread_mutex_unlock(&hw->mu);
        }
    }
}

/* Takes one sample and appends it to the ring. */
static void sample_once(hw_sampler *hw)
{
    hw_sample s;
    memset(&s, 0, sizeof s);
    /* Whole milliseconds: cJSON prints a double in 15 significant digits
     * whenever that reads back within its relative epsilon (0.4 us at
     * today's Unix time), so a finer time could print a hair below itself
     * and a client's ?since=<printed time> would get that sample again. A
     * time of 13 digits prints and reads back exactly. */
    s.time = (double)time(NULL);
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        s.time = (double)((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000) / 1000.0;
    sample_cpu(hw, &s);
    sample_memory(&s);
    sample_load(&s);
    sample_gpus(hw, &s);
    pthread_mutex_lock(&hw->mu);
    if (hw->n < hw->cap) {
        hw->ring[(hw->head + hw->n) % hw->cap] = s;
        hw->n++;
    } else {
        hw->ring[hw->head] = s;
        hw->head = (hw->head + 1) % hw->cap;
    }
    pthread_mutex_unlock(&hw->mu);
}

static void *sampler_main(void *arg)
{
    hw_sampler *hw = arg;
    pthread_mutex_lock(&hw->mu);
    while (!hw->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += hw->interval_s;
        while (!hw->stopping && pthread_cond_timedwait(&hw->cond, &hw->mu, &until) != ETIMEDOUT)
            ;
        if (hw->stopping)
            break;
        pthread_mutex_unlock(&hw->mu);
        sample_once(hw);
        pthread_mutex_lock(&hw->mu);
    }
    pthread_mutex_unlock(&hw->mu);
    return NULL;
}

hw_sampler *hw_start(unsigned interval_s, sched *s, char *err, size_t errlen)
{
    hw_sampler *hw = calloc(1, sizeof *hw);
    if (!hw || interval_s == 0) {
        set_err(err, errlen, hw ? "the hardware interval must be at least 1 s" : "out of memory");
        free(hw);
        return NULL;
    }
    hw->interval_s = interval_s;
    hw->sched = s;
    hw->cap = HW_HISTORY_SECONDS / interval_s;
    hw->ring = calloc(hw->cap, sizeof *hw->ring);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    hw->ncores = cores > 0 ? (int)cores : 1;
    if (!hw->ring) {
        set_err(err, errlen, "out of memory");
        free(hw);
        return NULL;
    }
    if (nvml_open(&hw->nvml, hw->nvml_err, sizeof hw->nvml_err) != 0)
        hw->nvml.lib = NULL;
    pthread_mutex_init(&hw->mu, NULL);
    pthread_cond_init(&hw->cond, NULL);
    cpu_times(&hw->cpu_busy, &hw->cpu_total);   /* the first sample: since boot if this fails */
    usleep(100 * 1000);                          /* a short first delta, so it is not since boot */
    sample_once(hw);
    int rc = pthread_create(&hw->thread, NULL, sampler_main, hw);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the hardware sampler: %s", strerror(rc));
        nvml_close(&hw->nvml);
        free(hw->ring);
        free(hw);
        return NULL;
    }
    return hw;
}

void hw_stop(hw_sampler *hw)
{
    if (!hw)
        return;
    pthread_mutex_lock(&hw->mu);
    hw->stopping = true;
    pthread_cond_broadcast(&hw->cond);
    pthread_mutex_unlock(&hw->mu);
    pthread_join(hw->thread, NULL);
    nvml_close(&hw->nvml);
    pthread_mutex_destroy(&hw->mu);
    pthread_cond_destroy(&hw->cond);
    free(hw->ring);
    free(hw);
}

bool hw_latest(hw_sampler *hw, hw_sample *out)
{
    pthread_mutex_lock(&hw->mu);
    bool any = hw->n > 0;
    if (any)
        *out = hw->ring[(hw->head + hw->n - 1) % hw->cap];
    pthread_mutex_unlock(&hw->mu);
    return any;
}

void hw_gpu_name(hw_sampler *hw, int index, char *out, size_t len)
{
    pthread_mutex_lock(&hw->mu);
    snprintf(out, len, "%s", index >= 0 && index < HW_MAX_GPUS ? hw->names[index] : "");
    pthread_mutex_unlock(&hw->mu);
}

/* ---- JSON ------------------------------------------------------------------------ */

/* v, or null when it is unknown (< 0). */
static bool add_known(cJSON *o, const char *key, double v)
{
    return v < 0 ? cJSON_AddNullToObject(o, key) != NULL : cJSON_AddNumberToObject(o, key, v) != NULL;
}

static cJSON *gpu_json(const hw_gpu *g, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "index", g->index) && cJSON_AddStringToObject(o, "name", name) &&
              add_known(o, "utilization", g->utilization) &&
              add_known(o, "memory_used_bytes", g->memory_used) &&
              add_known(o, "memory_total_bytes", g->memory_total) &&
              add_known(o, "temperature_c", g->temperature_c) && add_known(o, "power_w", g->power_w);
    if (ok && g->work_id && g->work_kind == STORE_WORK_JOB)
        ok = cJSON_AddNumberToObject(o, "job_id", (double)g->work_id) && cJSON_AddNullToObject(o, "evaluation_id");
    else if (ok && g->work_id)
        ok = cJSON_AddNullToObject(o, "job_id") && cJSON_AddNumberToObject(o, "evaluation_id", (double)g->work_id);
    else if (ok)
        ok = cJSON_AddNullToObject(o, "job_id") && cJSON_AddNullToObject(o, "evaluation_id");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *sample_json(const hw_sample *s, char names[][HW_GPU_NAME_MAX])
{
    cJSON *o = cJSON_CreateObject(), *gpus = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "time", s->time) &&
              add_known(o, "cpu_utilization", s->cpu_utilization) &&
              cJSON_AddNumberToObject(o, "memory_used_bytes", s->memory_used) &&
              cJSON_AddNumberToObject(o, "memory_total_bytes", s->memory_total) &&
              cJSON_AddItemToObject(o, "load", cJSON_CreateDoubleArray(s->load, 3)) &&
              (gpus = cJSON_AddArrayToObject(o, "gpus"));
    for (int i = 0; ok && i < s->ngpus; i++) {
        const hw_gpu *g = &s->gpus[i];
        cJSON *gj = gpu_json(g, g->index < HW_MAX_GPUS ? names[g->index] : "");
        ok = gj && cJSON_AddItemToArray(gpus, gj);
        if (!ok)
            cJSON_Delete(gj);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *hw_json(hw_sampler *hw, double since)
{
    cJSON *o = cJSON_CreateObject(), *nv = NULL, *hist = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "interval_seconds", hw->interval_s) &&
              cJSON_AddNumberToObject(o, "history_seconds", HW_HISTORY_SECONDS) &&
              cJSON_AddNumberToObject(o, "cores", hw->ncores) && (nv = cJSON_AddObjectToObject(o, "nvml")) &&
              cJSON_AddBoolToObject(nv, "available", hw->nvml.lib != NULL) &&
              (hw->nvml.lib ? cJSON_AddNullToObject(nv, "error") != NULL
                            : cJSON_AddStringToObject(nv, "error", hw->nvml_err) != NULL);
    pthread_mutex_lock(&hw->mu);
    cJSON *cur = ok && hw->n ? sample_json(&hw->ring[(hw->head + hw->n - 1) % hw->cap], hw->names) : NULL;
    ok = ok && (hw->n ? cur && cJSON_AddItemToObject(o, "current", cur) : cJSON_AddNullToObject(o, "current") != NULL);
    if (!ok)
        cJSON_Delete(cur);
    ok = ok && (hist = cJSON_AddArrayToObject(o, "history"));
    for (size_t i = 0; ok && i < hw->n; i++) {
        if (hw->ring[(hw->head + i) % hw->cap].time <= since)
            continue;
        cJSON *sj = sample_json(&hw->ring[(hw->head + i) % hw->cap], hw->names);
        ok = sj && cJSON_AddItemToArray(hist, sj);
        if (!ok)
            cJSON_Delete(sj);
    }
    pthread_mutex_unlock(&hw->mu);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
