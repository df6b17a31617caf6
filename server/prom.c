/* server/prom.c: GET /metrics (contract in prom.h). */
#include "server/prom.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/hardware.h"   /* hw_latest, hw_gpu_name */
#include "server/http.h"
#include "server/sse.h"        /* sse_client_count */

/* ---- HTTP request counters ------------------------------------------------------- */

#define PROM_MAX_SERIES 1024      /* (method, route, code) triples; more are not counted */
#define PROM_MAX_HISTOS 256       /* (method, route) pairs */

/* The latency histogram's upper bounds, seconds (+Inf is implied). */
static const double latency_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10 };
#define NBUCKETS (sizeof latency_buckets / sizeof latency_buckets[0])

typedef struct {
    char method[8];
    const char *route;
    unsigned code;
    uint64_t count;
} req_series;

typedef struct {
    char method[8];
    const char *route;
    uint64_t buckets[NBUCKETS];   /* not cumulative: bucket i counts bounds[i-1] < t <= bounds[i] */
    uint64_t count;
    double sum;
} req_histo;

static struct {
    pthread_mutex_t mu;
    req_series series[PROM_MAX_SERIES];
    size_t nseries;
    req_histo histos[PROM_MAX_HISTOS];
    size_t nhistos;
} reqs = { .mu = PTHREAD_MUTEX_INITIALIZER };

static bool same_key(const char *m1, const char *r1, const char *m2, const char *r2)
{
    return !strcmp(m1, m2) && (r1 == r2 || !strcmp(r1, r2));
}

void prom_http_observe(const char *method, const char *pattern, unsigned status, double seconds)
{
    char m[8];
    /* A method is a label only when HTTP defines it: anyone can send made-up
     * ones, and each would take a series until the table is full. */
    static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
                                         "CONNECT" };
    const char *label = "other";
    for (size_t k = 0; method && k < sizeof known / sizeof known[0]; k++)
        if (!strcmp(method, known[k]))
            label = known[k];
    snprintf(m, sizeof m, "%s", label);
    pthread_mutex_lock(&reqs.mu);
    size_t i = 0;
    while (i < reqs.nseries && !(reqs.series[i].code == status &&
                                 same_key(reqs.series[i].method, reqs.series[i].route, m, pattern)))
        i++;
    if (i == reqs.nseries && i < PROM_MAX_SERIES) {
        req_series *s = &reqs.series[reqs.nseries++];
        memcpy(s->method, m, sizeof m);
        s->route = pattern;
        s->code = status;
    }
    if (i < reqs.nseries)
        reqs.series[i].count++;
    size_t h = 0;
    while (h < reqs.nhistos && !same_key(reqs.histos[h].method, reqs.histos[h].route, m, pattern))
        h++;
    if (h == reqs.nhistos && h < PROM_MAX_HISTOS) {
        req_histo *x = &reqs.histos[reqs.nhistos++];
        memcpy(x->method, m, sizeof m);
        x->route = pattern;
    }
    if (h < reqs.nhistos) {
        req_histo *x = &reqs.histos[h];
        size_t b = 0;
        while (b < NBUCKETS && seconds > latency_buckets[b])
            b++;
        if (b < NBUCKETS)
            x->buckets[b]++;
        x->count++;
        x->sum += seconds;
    }
    pthread_mutex_unlock(&reqs.mu);
}

/* ---- the text ----------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    bool failed;                  /* out of memory: the answer is a 500 */
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->p && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 16384;
        while (cap < t->len + (size_t)n + 1)
            cap *= 2;
        char *np = realloc(t->p, cap);
        if (!np) {
            t->failed = true;
            return;
        }
        t->p = np;
        t->cap = cap;
    }
}

/* A label value, escaped: \ as \\, " as \", newline as \n. */
static void put_label(text *t, const char *v)
{
    for (; v && *v; v++) {
        if (*v == '\\')
            put(t, "\\\\");
        else if (*v == '"')
            put(t, "\\\"");
        else if (*v == '\n')
            put(t, "\\n");
        else
            put(t, "%c", *v);
    }
}

static void family(text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the families --------------------------------------------------------------------- */

static const char *const job_statuses[] = { "queued", "running", "done", "failed", "cancelled" };

/* Jobs by status, running jobs' speed, the queue: 0, or -1 on a store failure. */
static int put_jobs(text *t, store *st)
{
    int64_t *running = NULL;
    size_t nrunning = 0;
    family(t, "kiln_jobs", "gauge", "Jobs in the store by status.");
    for (size_t i = 0; i < sizeof job_statuses / sizeof job_statuses[0]; i++) {
        int64_t *ids = NULL;
        size_t n = 0;
        if (store_job_ids_with_status(st, job_statuses[i], &ids, &n) != 0) {
            free(running);
            return -1;
        }
        put(t, "kiln_jobs{status=\"%s\"} %zu\n", job_statuses[i], n);
        if (!strcmp(job_statuses[i], "running")) {
            running = ids;
            nrunning = n;
        } else {
            free(ids);
        }
    }
    family(t, "kiln_job_images_per_second", "gauge", "Images per second of each running job, from its last report.");
    for (size_t k = 0; k < nrunning; k++) {
        store_job j;
        if (store_job_get(st, running[k], &j) != 0)
            continue;                               /* ended and deleted meanwhile */
        put(t, "kiln_job_images_per_second{job=\"%lld\"} %.17g\n", (long long)running[k], j.images_per_sec);
        store_job_clear(&j);
    }
    free(running);
    store_queued *q = NULL;
    size_t nq = 0;
    if (store_queue_list(st, &q, &nq) != 0)
        return -1;
    free(q);
    family(t, "kiln_queue_length", "gauge", "Jobs and evaluations waiting to start.");
    put(t, "kiln_queue_length %zu\n", nq);
    return 0;
}

static int put_datasets(text *t, store *st)
{
    static const char *const splits[] = { "train", "val", "test" };
    double sum[3] = { 0 };
    store_dataset *ds = NULL;
    size_t n = 0;
    if (store_dataset_list(st, &ds, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        cJSON *info = ds[i].info_json ? cJSON_Parse(ds[i].info_json) : NULL;
        const cJSON *counts = cJSON_GetObjectItemCaseSensitive(info, "counts");
        for (int s = 0; s < 3; s++) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(counts, splits[s]);
            if (cJSON_IsNumber(c))
                sum[s] += c->valuedouble;
        }
        cJSON_Delete(info);
    }
    store_dataset_list_free(ds, n);
    family(t, "kiln_dataset_images", "gauge", "Images in the imported (ready) datasets, by split.");
    for (int s = 0; s < 3; s++)
        put(t, "kiln_dataset_images{split=\"%s\"} %.17g\n", splits[s], sum[s]);
    return 0;
}

static void put_host(text *t, const hw_sample *s)
{
    family(t, "kiln_cpu_utilization_ratio", "gauge", "Busy share of all CPU cores over the last sample interval.");
    if (s->cpu_utilization >= 0)
        put(t, "kiln_cpu_utilization_ratio %.17g\n", s->cpu_utilization / 100.0);
    family(t, "kiln_memory_used_bytes", "gauge", "Host memory in use (MemTotal - MemAvailable).");
    put(t, "kiln_memory_used_bytes %.17g\n", s->memory_used);
    family(t, "kiln_memory_total_bytes", "gauge", "Host memory in all (MemTotal).");
    put(t, "kiln_memory_total_bytes %.17g\n", s->memory_total);
    family(t, "kiln_load_average", "gauge", "Load averages of the host.");
    static const char *const periods[] = { "1m", "5m", "15m" };
    for (int i = 0; i < 3; i++)
        put(t, "kiln_load_average{period=\"%s\"} %.17g\n", periods[i], s->load[i]);
}

/* One GPU family: every GPU's value at offset (a double in hw_gpu), scaled;
 * unknown values (< 0) are left out. */
static void put_gpu_family(text *t, hw_sampler *hw, const hw_sample *s, const char *name, const char *help,
                           size_t offset, double scale)
{
    family(t, name, "gauge", help);
    for (int i = 0; i < s->ngpus; i++) {
        double v;
        memcpy(&v, (const char *)&s->gpus[i] + offset, sizeof v);
        if (v < 0)
            continue;
        char gname[HW_GPU_NAME_MAX];
        hw_gpu_name(hw, s->gpus[i].index, gname, sizeof gname);
        put(t, "%s{gpu=\"%d\",name=\"", name, s->gpus[i].index);
        put_label(t, gname);
        put(t, "\"} %.17g\n", v * scale);
    }
}

static void put_gpus(text *t, hw_sampler *hw, const hw_sample *s)
{
    put_gpu_family(t, hw, s, "kiln_gpu_utilization_ratio", "Busy share of each GPU (NVML).",
                   offsetof(hw_gpu, utilization), 0.01);
    put_gpu_family(t, hw, s, "kiln_gpu_memory_used_bytes", "Memory in use on each GPU (NVML).",
                   offsetof(hw_gpu, memory_used), 1);
    put_gpu_family(t, hw, s, "kiln_gpu_memory_total_bytes", "Memory of each GPU (NVML).",
                   offsetof(hw_gpu, memory_total), 1);
    put_gpu_family(t, hw, s, "kiln_gpu_temperature_celsius", "Temperature of each GPU (NVML).",
                   offsetof(hw_gpu, temperature_c), 1);
    put_gpu_family(t, hw, s, "kiln_gpu_power_watts", "Power draw of each GPU (NVML).", offsetof(hw_gpu, power_w), 1);
}

static void put_requests(text *t)
{
    pthread_mutex_lock(&reqs.mu);
    family(t, "kiln_http_requests_total", "counter", "HTTP requests answered, by method, route pattern and status.");
    for (size_t i = 0; i < reqs.nseries; i++) {
        const req_series *s = &reqs.series[i];
        put(t, "kiln_http_requests_total{method=\"");
        put_label(t, s->method);
        put(t, "\",route=\"");
        put_label(t, s->route);
        put(t, "\",code=\"%u\"} %llu\n", s->code, (unsigned long long)s->count);
    }
    family(t, "kiln_http_request_duration_seconds", "histogram",
           "Time from a request's first byte to its answer being queued, by method and route pattern.");
    for (size_t i = 0; i < reqs.nhistos; i++) {
        const req_histo *x = &reqs.histos[i];
        uint64_t cum = 0;
        for (size_t b = 0; b <= NBUCKETS; b++) {
            cum += b < NBUCKETS ? x->buckets[b] : 0;
            put(t, "kiln_http_request_duration_seconds_bucket{method=\"");
            put_label(t, x->method);
            put(t, "\",route=\"");
            put_label(t, x->route);
            if (b < NBUCKETS)
                put(t, "\",le=\"%g\"} %llu\n", latency_buckets[b], (unsigned long long)cum);
            else
                put(t, "\",le=\"+Inf\"} %llu\n", (unsigned long long)x->count);
        }
        for (int k = 0; k < 2; k++) {
            put(t, "kiln_http_request_duration_seconds_%s{method=\"", k ? "count" : "sum");
            put_label(t, x->method);
            put(t, "\",route=\"");
            put_label(t, x->route);
            if (k)
                put(t, "\"} %llu\n", (unsigned long long)x->count);
            else
                put(t, "\"} %.17g\n", x->sum);
        }
    }
    pthread_mutex_unlock(&reqs.mu);
}

/* VmRSS and Threads of /proc/self/status. */
static void put_process(text *t)
{
    char line[256];
    unsigned long long rss_kib = 0, threads = 0, v;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &v) == 1)
            rss_kib = v;
        else if (sscanf(line, "Threads: %llu", &v) == 1)
            threads = v;
    }
    fclose(f);
    family(t, "process_resident_memory_bytes", "gauge", "Resident memory of the kiln serve process.");
    put(t, "process_resident_memory_bytes %llu\n", rss_kib * 1024);
    family(t, "process_threads", "gauge", "Threads of the kiln serve process.");
    put(t, "process_threads %llu\n", threads);
}

int prom_handle(request *r)
{
    text t = { 0 };
    server *srv = r->srv;
    if (put_jobs(&t, srv->st) != 0 || put_datasets(&t, srv->st) != 0) {
        free(t.p);
        return http_store_error(r, "reading the jobs and datasets for /metrics");
    }
    hw_sample s;
    if (srv->hw && hw_latest(srv->hw, &s)) {
        put_host(&t, &s);
        put_gpus(&t, srv->hw, &s);
    }
    family(&t, "kiln_sse_clients", "gauge", "Server-Sent Events clients connected.");
    put(&t, "kiln_sse_clients %zu\n", sse_client_count(srv));
    put_requests(&t);
    put_process(&t);
    if (t.failed || !t.p) {
        free(t.p);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory", "out of memory writing /metrics");
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(t.len, t.p, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(t.p);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return http_queue(r, MHD_HTTP_OK, resp);
}
