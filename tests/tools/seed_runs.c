/* tests/tools/seed_runs.c: kiln_seed_runs DB RUNS STEPS [STEPS_PER_EPOCH]
 *
 * Fills the store at DB (through db/store.h, as the scheduler stores a
 * worker's reports) with a ready dataset and RUNS finished ("done") lenet
 * jobs that differ in solver.lr, each with STEPS steps of train/loss,
 * train/accuracy and lr, and at every epoch's end (every STEPS_PER_EPOCH
 * steps, default STEPS / 10) train/epoch_loss, train/epoch_accuracy,
 * val/loss and val/accuracy. Values are a noisy decay from a fixed-seed
 * generator (with a few loss spikes), wall times one step per 20 ms from a
 * start that differs per run. For bench/compare_page.mjs: the comparison
 * page with 20 runs of 10,000 points without training them. Prints the
 * job ids ("jobs 2 3 ..."); exits 1 on an error. Not a test.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(void)                 /* [0, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int put(store *st, int64_t job, const char *tag, int64_t step, double epoch, double value, double wall)
{
    store_metric m;
    memset(&m, 0, sizeof m);
    snprintf(m.tag, sizeof m.tag, "%s", tag);
    m.step = step;
    m.epoch = epoch;
    m.value = value;
    m.wall_time = wall;
    return store_metric_insert(st, job, &m);
}

/* One run's metrics: a loss falling at a pace set by lr, accuracy rising. */
static int fill_run(store *st, int64_t job, int run, double lr, long steps, long per_epoch)
{
    double t0 = 1.7e9 + run * 3600.0, rate = lr * 40.0;
    for (long s = 1; s <= steps; s++) {
        double epoch = (double)s / (double)per_epoch, wall = t0 + s * 0.02;
        double base = 0.05 + 2.3 * exp(-rate * epoch);
        double loss = base * (0.8 + 0.4 * uniform());
        if (uniform() < 0.001)
            loss *= 4.0;                          /* the spikes downsampling must keep */
        double acc = fmin(1.0, (1.0 - base / 2.4) * (0.95 + 0.1 * uniform()));
        if (put(st, job, "train/loss", s, epoch, loss, wall) || put(st, job, "train/accuracy", s, epoch, acc, wall) ||
            put(st, job, "lr", s, epoch, lr * (1.0 - 0.5 * (double)s / (double)steps), wall))
            return -1;
        if (s % per_epoch == 0 &&
            (put(st, job, "train/epoch_loss", s, epoch, base, wall) ||
             put(st, job, "train/epoch_accuracy", s, epoch, 1.0 - base / 2.4, wall) ||
             put(st, job, "val/loss", s, epoch, base * 1.1, wall) ||
             put(st, job, "val/accuracy", s, epoch, 0.98 - base / 2.6, wall)))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: kiln_seed_runs DB RUNS STEPS [STEPS_PER_EPOCH]\n");
        return 2;
    }
    long runs = strtol(argv[2], NULL, 10), steps = strtol(argv[3], NULL, 10);
    long per_epoch = argc > 4 ? strtol(argv[4], NULL, 10) : steps / 10;
    if (runs < 1 || steps < 1 || per_epoch < 1) {
        fprintf(stderr, "kiln_seed_runs: RUNS, STEPS and STEPS_PER_EPOCH must be positive\n");
        return 2;
    }
    char err[512];
    store *st = store_open(argv[1], err, sizeof err);
    if (!st) {
        fprintf(stderr, "kiln_seed_runs: %s\n", err);
        return 1;
    }
    int64_t ds = 0;
    int rc = store_dataset_insert(st, "seed-runs", &ds, err, sizeof err) != 0 ||
             store_dataset_finish(st, ds, "ready", "{}", NULL) != 0;
    printf("jobs");
    for (long r = 0; !rc && r < runs; r++) {
        double lr = 0.001 * pow(10.0, 2.0 * (double)r / (double)(runs > 1 ? runs - 1 : 1));
        char cfg[512];
        int64_t job = 0;
        long epochs = (steps + per_epoch - 1) / per_epoch;
        snprintf(cfg, sizeof cfg,
                 "{\"name\":\"seed-%ld\",\"network\":\"lenet\",\"dataset_id\":%lld,\"epochs\":%ld,"
                 "\"batch_size\":64,\"precision\":\"fp32\",\"seed\":1,"
                 "\"solver\":{\"type\":\"sgd\",\"lr\":%.6g,\"momentum\":0.9,\"weight_decay\":0.0005}}",
                 r + 1, (long long)ds, epochs, lr);
        rc = store_job_insert(st, ds, "lenet", cfg, (int)epochs, &job, err, sizeof err) != 0 ||
             store_job_set_progress(st, job, (int)epochs, steps, steps, 3200.0, 0) != 0 ||
             fill_run(st, job, (int)r, lr, steps, per_epoch) != 0 ||
             store_job_set_status(st, job, "done", NULL) != 0;
        if (!rc)
            printf(" %lld", (long long)job);
    }
    printf("\n");
    store_close(st);
    if (rc)
        fprintf(stderr, "kiln_seed_runs: %s\n", err[0] ? err : "a store call failed");
    return rc ? 1 : 0;
}
