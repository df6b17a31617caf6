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
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

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
    static const char *const tags[] = { "train/loss", "train/accuracy", "lr" };
    for (long long i = 0; i < count; i++) {
        store_metric m;
        memset(&m, 0, sizeof m);
        m.step = step0 + i / 3;
        m.epoch = (double)m.step / 1000.0;
        snprintf(m.tag, sizeof m.tag, "%s", tags[i % 3]);
        m.value = 1.0 / (double)(m.step + 1);
        m.wall_time = 1.7e9 + (double)i * 0.01;
        if (store_metric_insert(st, job, &m) != 0) {
            fprintf(stderr, "kiln_fill_metrics: inserting metric %lld failed\n", i + 1);
            store_close(st);
            return 1;
        }
    }
    store_close(st);
    printf("job %lld: %lld metrics\n", (long long)job, count);
    return 0;
}
