/* tests/tools/fill_metrics.c: kiln_fill_metrics DB JOB|new COUNT [STEP0]
 *
 * Appends COUNT metrics to job JOB of the store at DB through the store's own
 * insert (db/store.h), as a worker's reports would be stored: tags cycling
 * through train/loss, train/accuracy and lr, steps from STEP0 (default 1)
 * counting up, values a function of the step. For the integration tests and
 * benchmarks that need a job with many stored metrics (the SSE replay,
 * tests/integration/jobsafe.test.mjs) without training for hours. Prints
 * the job's id and the count inserted; exits 1 on an error. With JOB "new"
 * it first adds a ready dataset row and a finished ("done") job row of its
 * own, with no folders (for benchmarks of the replay alone: the job has
 * nothing but its row and its metrics).
 *
 * Each metric is also appended to the job's stored event stream
 * (db/event_store.h) as the hub would store it, and a finished job's status
 * is moved to the end of its stream (its earlier status events go, and it is
 * appended again), so that the stream reads as if the job had reported these
 * metrics before it ended.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "db/event_store.h"   /* store_event_append, store_event_trim */

#include <cjson/cJSON.h>

/* A metric event's JSON, as jobs/scheduler.c's on_metric makes it; NULL
 * when out of memory. cJSON_free it. */
static char *metric_json(const store_metric *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "step", (double)m->step);
    cJSON_AddNumberToObject(o, "epoch", m->epoch);
    cJSON_AddStringToObject(o, "tag", m->tag);
    cJSON_AddNumberToObject(o, "value", m->value);
    cJSON_AddNumberToObject(o, "wall_time", m->wall_time);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Appends a finished job's status as its stream's last event. 0 or -1. */
static int append_status(store *st, int64_t job)
{
    store_job j;
    if (store_job_get(st, job, &j) != 0)
        return -1;
    int rc = 0;
    if (!strcmp(j.status, "done") || !strcmp(j.status, "failed") || !strcmp(j.status, "cancelled")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", j.status);
        if (j.error)
            cJSON_AddStringToObject(o, "error", j.error);
        else
            cJSON_AddNullToObject(o, "error");
        char *text = cJSON_PrintUnformatted(o);
        uint64_t id = 0;
        rc = text && store_event_append(st, job, "status", -1, text, &id) == 0 ? 0 : -1;
        cJSON_free(text);
        cJSON_Delete(o);
    }
    store_job_clear(&j);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: kiln_fill_metrics DB JOB COUNT [STEP0]\n");
        return 2;
    }
    int64_t job = strtoll(argv[2], NULL, 10);
    bool make_job = !strcmp(argv[2], "new");
    long long count = strtoll(argv[3], NULL, 10);
    long long step0 = argc > 4 ? strtoll(argv[4], NULL, 10) : 1;
    char err[512];
    store *st = store_open(argv[1], err, sizeof err);
    if (!st) {
        fprintf(stderr, "kiln_fill_metrics: %s\n", err);
        return 1;
    }
    if (make_job) {
        int64_t ds = 0;
        if (store_dataset_insert(st, "fill-metrics", &ds, err, sizeof err) != 0 ||
            store_dataset_finish(st, ds, "ready", "{}", NULL) != 0 ||
            store_job_insert(st, ds, "lenet", "{}", 1, &job, err, sizeof err) != 0 ||
            store_job_set_status(st, job, "done", NULL) != 0) {
            fprintf(stderr, "kiln_fill_metrics: making a job failed: %s\n", err);
            store_close(st);
            return 1;
        }
    }
    if (store_event_trim(st, job, INT64_MAX) != 0) {       /* its statuses only */
        fprintf(stderr, "kiln_fill_metrics: trimming the job's stored statuses failed\n");
        store_close(st);
        return 1;
    }
    static const char *const tags[] = { "train/loss", "train/accuracy", "lr" };
    for (long long i = 0; i < count; i++) {
        store_metric m;
        memset(&m, 0, sizeof m);
        m.step = step0 + i / 3;
        m.epoch = (double)m.step / 1000.0;
        snprintf(m.tag, sizeof m.tag, "%s", tags[i % 3]);
        m.value = 1.0 / (double)(m.step + 1);
        m.wall_time = 1.7e9 + (double)i * 0.01;
        char *json = metric_json(&m);       /* as the scheduler writes it (cJSON) */
        uint64_t id = 0;
        int bad = !json || store_metric_insert(st, job, &m) != 0 ||
                  store_event_append(st, job, "metric", m.step, json, &id) != 0;
        cJSON_free(json);
        if (bad) {
            fprintf(stderr, "kiln_fill_metrics: inserting metric %lld failed\n", i + 1);
            store_close(st);
            return 1;
        }
    }
    if (append_status(st, job) != 0) {
        fprintf(stderr, "kiln_fill_metrics: appending the job's status failed\n");
        store_close(st);
        return 1;
    }
    store_close(st);
    printf("job %lld: %lld metrics\n", (long long)job, count);
    return 0;
}
