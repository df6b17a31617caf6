/* jobs/bench_cli.c: `kiln bench`, the engine's throughput on synthetic data.
 *
 * Builds a network (a built-in name or a spec file) for one batch size on the
 * CPU backend (or the one --backend names: cuda:0, cuda:0,1), fills a batch
 * of fixed-seed synthetic images and labels of the network's natural input
 * shape, runs warm-up steps (plans, page faults, OpenMP's thread pool),
 * then times each of the measured steps. A training
 * step is net_train_step (forward, loss, backward, SGD with momentum);
 * inference is net_eval (forward and loss, no dropout). Figures: images per
 * second over all timed steps, the per-step times (median, min, max) and the
 * achieved GFLOP/s, counting 2 x the multiply-adds of convolutions and dense
 * layers per image (engine/summary.h) forward, three times that for training
 * (forward, backward-data, backward-weights). Nothing here is a test: it
 * prints figures for a person or, with --json, one object for scripts
 * (bench/pytorch_compare).
 *
 * --augment measures what the data path costs a training step: the steps
 * are fed three ways in alternating rounds, each round timing --steps steps
 * of each: the one fixed batch (no loader), batches from the loader
 * (engine/dataset.h) over a split of synthetic images of the input shape in
 * a temporary folder, and the same loader with CIFAR's augmentation (pad 4,
 * a random crop back to the input size, mirror). The loader's threads run
 * beside the step's OpenMP threads, as they do in a job. Figures: the median
 * images per second of each feed over the rounds, its spread ((max - min) /
 * median), and augmentation's cost, 1 - (augmented / plain loader) of the
 * median of the per-round ratios.
 */
#include "jobs/bench.h"

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/err.h"         /* set_err */
#include "engine/dataset.h"   /* ds_writer_open, loader_open: --augment */
#include "engine/net.h"       /* net_create, net_train_step, net_eval */
#include "engine/rng.h"       /* rng_splitmix64: the synthetic data */
#include "engine/summary.h"   /* summary_build: forward FLOPs per image */
#include "jobs/cli_args.h"    /* cli_int, cli_shape, cli_spec */

#define BENCH_STEPS_MAX 1000000
#define BENCH_ROUNDS_MAX 100
#define BENCH_IMAGES_MAX (1 << 22)
#define BENCH_CIFAR_PAD 4         /* --augment: CIFAR's padding */

typedef struct bench_opts {
    const char *network;
    precision_mode prec;
    const char *backend;        /* as given, for the report */
    net_devices devices;
    bool train;
    int batch, steps, warmup, threads, classes;
    net_shape in;
    bool json;
    bool augment;               /* fixed batch, loader, loader with augmentation */
    int rounds, images, loader_threads;
} bench_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln bench NETWORK|SPEC.json [OPTIONS]\n"
            "\n"
            "Measures the engine's throughput on synthetic data of the network's natural\n"
            "input (lenet 1x28x28, 10 classes; cifar10-cnn, alexnet, resnet20 3x32x32, 10;\n"
            "resnet18, resnet50 3x224x224, 1000): warm-up steps, then timed ones.\n"
            "\n"
            "  --batch N             images per step (64)\n"
            "  --mode train|infer    a training step (SGD, momentum 0.9) or a forward pass (train)\n"
            "  --precision P         fp32, amp-bf16 or amp-fp16 (fp32); amp-fp16 on the CPU\n"
            "                        emulates FP16 storage in FP32 arithmetic: no faster\n"
            "  --backend B           cpu, cuda:0 or cuda:0,1 (data parallel, the batch split\n"
            "                        across the GPUs) (cpu)\n"
            "  --steps N             timed steps (50)\n"
            "  --warmup N            untimed steps first (5)\n"
            "  --threads N           OpenMP threads (default: OMP_NUM_THREADS, else every core)\n"
            "  --input C,H,W         the input shape (required for a spec without \"input\")\n"
            "  --classes N           the class count for a spec file (10)\n"
            "  --augment             time the steps fed three ways in alternating rounds: the\n"
            "                        fixed batch, the data loader over a temporary split of\n"
            "                        synthetic images, and the loader with CIFAR's\n"
            "                        augmentation (pad 4, random crop, mirror); prints each\n"
            "                        and what augmentation costs (train mode only)\n"
            "  --rounds N            --augment: rounds, each timing --steps steps of each (3)\n"
            "  --images N            --augment: images in the split (4096)\n"
            "  --loader-threads N    --augment: the loader's threads (0: automatic, as a job)\n"
            "  --json                print one JSON object instead of the table\n"
            "  --help                this text\n"
            "\n"
            "GFLOP/s counts 2 x the multiply-adds of convolutions and dense layers per\n"
            "image forward (kiln summary), three times that for a training step.\n");
}

/* Returns 0 (parsed), 1 (--help printed) or 2 (usage error, message printed). */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){ .prec = PREC_FP32, .backend = "cpu", .devices = net_devices_cpu(), .train = true, .batch = 64,
                       .steps = 50, .warmup = 5, .rounds = 3, .images = 4096 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--augment")) {
            o->augment = true;
            continue;
        }
        if (a[0] != '-' || a[1] != '-') {
            if (o->network) {
                fprintf(stderr, "kiln bench: one network only (got %s and %s)\n",
                        o->network, a);
                return 2;
            }
            o->network = a;
            continue;
        }
        if (!strcmp(a, "--batch"))
            ok = cli_int(v, 1, 65536, &o->batch);
        else if (!strcmp(a, "--steps"))
            ok = cli_int(v, 1, BENCH_STEPS_MAX, &o->steps);
        else if (!strcmp(a, "--warmup"))
            ok = cli_int(v, 0, BENCH_STEPS_MAX, &o->warmup);
        else if (!strcmp(a, "--threads"))
            ok = cli_int(v, 1, 4096, &o->threads);
        else if (!strcmp(a, "--classes"))
            ok = cli_int(v, 1, 1000000, &o->classes);
        else if (!strcmp(a, "--rounds"))
            ok = cli_int(v, 1, BENCH_ROUNDS_MAX, &o->rounds);
        else if (!strcmp(a, "--images"))
            ok = cli_int(v, 1, BENCH_IMAGES_MAX, &o->images);
        else if (!strcmp(a, "--loader-threads"))
            ok = cli_int(v, 0, LOADER_THREADS_MAX, &o->loader_threads);
        else if (!strcmp(a, "--input"))
            ok = cli_shape(v, &o->in);
        else if (!strcmp(a, "--precision"))
            ok = v && precision_parse(v, &o->prec) == 0;
        else if (!strcmp(a, "--backend")) {
            char err[160];
            if (v && net_devices_parse(v, &o->devices, err, sizeof err) != 0) {
                fprintf(stderr, "kiln bench: %s\n", err);
                return 2;
            }
            ok = v && (o->backend = v);
        }
        else if (!strcmp(a, "--mode")) {
            ok = v && (!strcmp(v, "train") || !strcmp(v, "infer"));
            o->train = ok && !strcmp(v, "train");
        } else {
            fprintf(stderr, "kiln bench: unknown option %s\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "kiln bench: %s needs %s\n", a,
                    !strcmp(a, "--input") ? "C,H,W (positive integers)" :
                    !strcmp(a, "--mode") ? "train or infer" :
                    !strcmp(a, "--precision") ? "fp32, amp-bf16 or amp-fp16" :
                    !strcmp(a, "--backend") ? "a value" : "a positive integer in range");
            return 2;
        }
        i++;
    }
    if (!o->network) {
        fprintf(stderr, "kiln bench: which network? (a built-in name or a spec file)\n");
        return 2;
    }
    if (o->augment && !o->train) {
        fprintf(stderr, "kiln bench: --augment times training steps; leave out --mode infer\n");
        return 2;
    }
    return 0;
}

/* The spec object and its input shape and classes (the natural ones of a
 * built-in, else the spec's "input", overridden by --input / --classes).
 * Returns the spec (the caller's), or NULL after a message. */
static cJSON *load_spec(bench_opts *o)
{
    net_shape natural = { 0, 0, 0 };
    int classes = 10;
    cJSON *spec = cli_spec("bench", o->network);
    if (!spec)
        return NULL;
    if (net_builtin(o->network))
        summary_builtin_defaults(o->network, &natural, &classes);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(spec, "input");
    if (natural.c == 0 && cJSON_IsArray(in) && cJSON_GetArraySize(in) == 3) {
        int d[3];
        for (int k = 0; k < 3; k++) {
            const cJSON *e = cJSON_GetArrayItem(in, k);
            d[k] = cJSON_IsNumber(e) ? e->valueint : 0;
        }
        natural = (net_shape){ d[0], d[1], d[2] };
    }
    if (o->in.c == 0)
        o->in = natural;
    if (o->classes == 0)
        o->classes = classes;
    if (o->in.c < 1 || o->in.h < 1 || o->in.w < 1) {
        fprintf(stderr, "kiln bench: %s has no \"input\"; give --input C,H,W\n", o->network);
        cJSON_Delete(spec);
        return NULL;
    }
    return spec;
}

/* A fixed batch: pixels uniform in [-1, 1) and labels, the same every run. */
static void random_batch(float *x, int32_t *labels, size_t in_size, int batch, int classes) {
    uint64_t state = 20260101;
    for (size_t i = 0; i < in_size * (size_t)batch; i++)
        x[i] = (float)((double)(rng_splitmix64(&state) >> 11) * 0x1p-52 - 1.0);
    for (int i = 0; i < batch; i++) labels[i] = (int32_t)rng_splitmix64_below(&state, (uint64_t)classes);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One step of the chosen mode on the synthetic batch. */
static int run_step(net *n, const bench_opts *o, const float *x, const int32_t *labels,
                    char *err, size_t errlen)
{
    net_stats st;
    return o->train ? net_train_step(n, x, labels, o->batch, 0.01f, &st, err, errlen)
                    : net_eval(n, x, labels, o->batch, &st, err, errlen);
}

typedef struct bench_result {
    double setup_s, first_step_s, total_s;
    double median_ms, min_ms, max_ms;
    double images_per_sec, fwd_flops, gflops;
    int64_t params;
} bench_result;

static void print_text(const bench_opts *o, const bench_result *r)
{
    printf("kiln bench: %s, %s, %s, batch %d, %s, %d threads, input %dx%dx%d, %d classes\n",
           o->network, o->train ? "train" : "infer", precision_name(o->prec), o->batch, o->backend,
           omp_get_max_threads(), o->in.c, o->in.h, o->in.w, o->classes);
    printf("  setup        %.1f ms (net_create), first step %.1f ms; %d warm-up, %d timed steps\n",
           r->setup_s * 1e3, r->first_step_s * 1e3, o->warmup, o->steps);
    printf("  images/s     %.1f\n", r->images_per_sec);
    printf("  ms/step      %.2f mean, %.2f median, %.2f min, %.2f max\n",
           r->total_s * 1e3 / o->steps, r->median_ms, r->min_ms, r->max_ms);
    printf("  GFLOP/s      %.1f (%.4f GFLOP per image forward%s)\n", r->gflops,
           r->fwd_flops * 1e-9, o->train ? ", x3 for training" : "");
}

static int print_json(const bench_opts *o, const bench_result *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *in = cJSON_CreateIntArray((const int[]){ o->in.c, o->in.h, o->in.w }, 3);
    char *text = NULL;
    if (!j || !in) {
        cJSON_Delete(j);
        cJSON_Delete(in);
        return -1;
    }
    cJSON_AddStringToObject(j, "network", o->network);
    cJSON_AddStringToObject(j, "mode", o->train ? "train" : "infer");
    cJSON_AddStringToObject(j, "precision", precision_name(o->prec));
    cJSON_AddStringToObject(j, "backend", o->backend);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddNumberToObject(j, "threads", omp_get_max_threads());
    cJSON_AddItemToObject(j, "input", in);
    cJSON_AddNumberToObject(j, "classes", o->classes);
    cJSON_AddNumberToObject(j, "params", (double)r->params);
    cJSON_AddNumberToObject(j, "images_per_sec", r->images_per_sec);
    cJSON_AddNumberToObject(j, "ms_per_step", r->total_s * 1e3 / o->steps);
    cJSON_AddNumberToObject(j, "ms_per_step_median", r->median_ms);
    cJSON_AddNumberToObject(j, "ms_per_step_min", r->min_ms);
    cJSON_AddNumberToObject(j, "ms_per_step_max", r->max_ms);
    cJSON_AddNumberToObject(j, "forward_flops_per_image", r->fwd_flops);
    cJSON_AddNumberToObject(j, "gflops_per_sec", r->gflops);
    cJSON_AddNumberToObject(j, "setup_ms", r->setup_s * 1e3);
    cJSON_AddNumberToObject(j, "first_step_ms", r->first_step_s * 1e3);
    text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text)
        return -1;
    printf("%s\n", text);
    cJSON_free(text);
    return 0;
}

/* Builds the net and runs the steps; fills r. Returns 0, or 1 after a message. */
static int measure(const bench_opts *o, const cJSON *spec, bench_result *r)
{
    char err[1024];
    int status = 1;
    size_t in_size = (size_t)o->in.c * (size_t)o->in.h * (size_t)o->in.w;
    float *x = NULL;
    int32_t *labels = NULL;
    double *times = NULL;
    net *n = NULL;
    summary sum;
    net_solver solver = { .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.9f, .precision = o->prec };

    if (summary_build(spec, o->in, o->classes, o->batch, SOLVER_SGD, true, o->prec, &sum, err,
                      sizeof err) < 0) {
        fprintf(stderr, "kiln bench: %s: %s\n", o->network, err);
        return 1;
    }
    r->fwd_flops = 2.0 * (double)sum.macs;
    r->params = sum.params;
    summary_free(&sum);
    if (in_size > SIZE_MAX / sizeof *x / (size_t)o->batch ||
        !(x = malloc(in_size * (size_t)o->batch * sizeof *x)) ||
        !(labels = malloc((size_t)o->batch * sizeof *labels)) ||
        !(times = malloc((size_t)o->steps * sizeof *times))) {
        fprintf(stderr, "kiln bench: out of memory for a batch of %d\n", o->batch);
        goto out;
    }
    random_batch(x, labels, in_size, o->batch, o->classes);

    double t0 = now_s();
    if (!(n = net_create(spec, o->in, o->classes, o->batch, &o->devices, &solver, 1, err,
                         sizeof err))) {
        fprintf(stderr, "kiln bench: %s: %s\n", o->network, err);
        goto out;
    }
    r->setup_s = now_s() - t0;
    for (int i = 0; i < o->warmup; i++) {
        double s = now_s();
        if (run_step(n, o, x, labels, err, sizeof err) < 0)
            goto step_failed;
        if (i == 0)
            r->first_step_s = now_s() - s;
    }
    t0 = now_s();
    for (int i = 0; i < o->steps; i++) {
        double s = now_s();
        if (run_step(n, o, x, labels, err, sizeof err) < 0)
            goto step_failed;
        times[i] = now_s() - s;
    }
    r->total_s = now_s() - t0;
    qsort(times, (size_t)o->steps, sizeof *times, cmp_double);
    r->median_ms = 1e3 * (o->steps % 2 ? times[o->steps / 2]
                          : 0.5 * (times[o->steps / 2 - 1] + times[o->steps / 2]));
    r->min_ms = 1e3 * times[0];
    r->max_ms = 1e3 * times[o->steps - 1];
    r->images_per_sec = (double)o->batch * o->steps / r->total_s;
    r->gflops = r->images_per_sec * r->fwd_flops * (o->train ? 3.0 : 1.0) * 1e-9;
    status = 0;
    goto out;
step_failed:
    fprintf(stderr, "kiln bench: %s: %s\n", o->network, err);
out:
    net_free(n);
    free(x);
    free(labels);
    free(times);
    return status;
}

/* ---- --augment: the data path's cost ------------------------------------------- */

typedef enum feed_kind { FEED_FIXED, FEED_LOADER, FEED_AUGMENT, FEED_COUNT } feed_kind;

static const char *const feed_names[FEED_COUNT] = {
    [FEED_FIXED] = "fixed batch", [FEED_LOADER] = "loader", [FEED_AUGMENT] = "loader + augmentation",
};
static const char *const feed_keys[FEED_COUNT] = {
    [FEED_FIXED] = "fixed", [FEED_LOADER] = "loader", [FEED_AUGMENT] = "augmented",
};

typedef struct feed_result {
    double ips[BENCH_ROUNDS_MAX];         /* images per second, per round */
    double median, spread;
} feed_result;

typedef struct augment_result {
    feed_result feed[FEED_COUNT];
    double alone[FEED_COUNT];             /* the loader alone on one thread, images/s (no steps) */
    double cost;                          /* 1 - the median per-round ratio augmented / loader */
    double ratio_min, ratio_max;
    int loader_threads;
} augment_result;

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A split of o->images synthetic images of the input shape at path. */
static int write_synthetic_split(const bench_opts *o, const char *path, char *err, size_t errlen)
{
    size_t sz = (size_t)o->in.c * (size_t)o->in.h * (size_t)o->in.w;
    uint8_t *img = malloc(sz);
    if (!img)
        return set_err(err, errlen, "out of memory");
    ds_writer *wr = ds_writer_open(path, o->in.c, o->in.h, o->in.w, err, errlen);
    int rc = wr ? 0 : -1;
    uint64_t state = 20260102;
    for (int i = 0; rc == 0 && i < o->images; i++) {
        for (size_t p = 0; p < sz; p++)
            img[p] = (uint8_t)(rng_splitmix64(&state) >> 56);
        rc = ds_writer_add(wr, img, (int)rng_splitmix64_below(&state, (uint64_t)o->classes), err, errlen);
    }
    if (rc == 0)
        rc = ds_writer_commit(wr, err, errlen);
    else
        ds_writer_abort(wr);
    free(img);
    return rc;
}

/* The next batch of a loader, a new epoch when one ends. */
static int next_batch(loader *l, int *epoch, float *x, int32_t *labels, char *err, size_t errlen)
{
    int n = loader_next(l, x, labels);
    if (n == 0) {
        loader_start_epoch(l, ++*epoch);
        n = loader_next(l, x, labels);
    }
    if (n <= 0)
        return set_err(err, errlen, "the loader gave no batch: %s", n < 0 ? loader_error(l) : "empty");
    return n;
}

/* Rounds of o->steps timed steps of each feed, the order turned around every
 * round so that a drift of the machine's speed falls on each alike. */
static int time_feeds(const bench_opts *o, net *n, loader *const *lds, const float *x,
                      const int32_t *labels, float *lx, int32_t *llabels, augment_result *r,
                      char *err, size_t errlen)
{
    int epoch[FEED_COUNT] = { 0 };
    net_stats st;
    for (int i = 0; i < o->warmup; i++)
        for (int f = FEED_LOADER; f < FEED_COUNT; f++) {
            int b = next_batch(lds[f], &epoch[f], lx, llabels, err, errlen);
            if (b < 0 || net_train_step(n, lx, llabels, b, 0.01f, &st, err, errlen) < 0)
                return -1;
        }
    for (int round = 0; round < o->rounds; round++) {
        for (int k = 0; k < FEED_COUNT; k++) {
            int f = round % 2 ? FEED_COUNT - 1 - k : k;
            double t0 = now_s();
            long images = 0;
            for (int i = 0; i < o->steps; i++) {
                const float *bx = x;
                const int32_t *bl = labels;
                int b = o->batch;
                if (f != FEED_FIXED) {
                    if ((b = next_batch(lds[f], &epoch[f], lx, llabels, err, errlen)) < 0)
                        return -1;
                    bx = lx;
                    bl = llabels;
                }
                if (net_train_step(n, bx, bl, b, 0.01f, &st, err, errlen) < 0)
                    return -1;
                images += b;
            }
            r->feed[f].ips[round] = (double)images / (now_s() - t0);
        }
    }
    double ratio[BENCH_ROUNDS_MAX];
    for (int round = 0; round < o->rounds; round++)
        ratio[round] = r->feed[FEED_AUGMENT].ips[round] / r->feed[FEED_LOADER].ips[round];
    r->cost = 1.0 - median_of(ratio, o->rounds);
    r->ratio_min = ratio[0];
    r->ratio_max = ratio[o->rounds - 1];
    for (int f = 0; f < FEED_COUNT; f++) {
        double v[BENCH_ROUNDS_MAX];
        memcpy(v, r->feed[f].ips, sizeof(double) * (size_t)o->rounds);
        r->feed[f].median = median_of(v, o->rounds);
        r->feed[f].spread = (v[o->rounds - 1] - v[0]) / r->feed[f].median;
    }
    return 0;
}

/* The loader by itself on its one thread: images per second over 5 x the
 * steps of batches (at least 20 batches), the consumer only copying them
 * out. What one image's loading and augmenting costs a core, without a
 * training step's noise. Returns images/s, or -1 with err. */
static double loader_alone(const bench_opts *o, loader *l, float *x, int32_t *labels, char *err,
                           size_t errlen)
{
    int epoch = 0, batches = 5 * o->steps < 20 ? 20 : 5 * o->steps;
    long images = 0;
    if (next_batch(l, &epoch, x, labels, err, errlen) < 0)     /* the threads are running */
        return -1;
    double t0 = now_s();
    for (int i = 0; i < batches; i++) {
        int n = next_batch(l, &epoch, x, labels, err, errlen);
        if (n < 0)
            return -1;
        images += n;
    }
    return (double)images / (now_s() - t0);
}

/* --augment: the net, a temporary split, two loaders; fills r. Returns 0,
 * or 1 after a message. */
static int measure_augment(const bench_opts *o, const cJSON *spec, augment_result *r)
{
    char err[1024], dir[PATH_MAX], path[PATH_MAX + 32];
    int status = 1;
    size_t in_size = (size_t)o->in.c * (size_t)o->in.h * (size_t)o->in.w;
    float *x = NULL, *lx = NULL;
    int32_t *labels = NULL, *llabels = NULL;
    ds_split *split = NULL;
    loader *lds[FEED_COUNT] = { NULL };
    net *n = NULL;
    net_solver solver = { .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.9f, .precision = o->prec };
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, sizeof dir, "%s/kiln-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "kiln bench: cannot make a temporary folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/train.kds", dir);
    if (write_synthetic_split(o, path, err, sizeof err) != 0 ||
        !(split = ds_split_open(path, err, sizeof err))) {
        fprintf(stderr, "kiln bench: the synthetic split: %s\n", err);
        goto out;
    }
    unlink(path);                          /* mapped: gone once closed */
    const float mean[4] = { 127.5f, 127.5f, 127.5f, 127.5f };
    loader_opts lo = { .batch = o->batch, .train = true, .drop_last = true, .seed = 1, .mean = mean,
                       .scale = 1.0f / 255.0f, .threads = o->loader_threads };
    lds[FEED_LOADER] = loader_open(split, &lo, err, sizeof err);
    lo.aug = (ds_augment){ .pad = BENCH_CIFAR_PAD, .mirror = true };
    if (lds[FEED_LOADER])
        lds[FEED_AUGMENT] = loader_open(split, &lo, err, sizeof err);
    if (!lds[FEED_LOADER] || !lds[FEED_AUGMENT]) {
        fprintf(stderr, "kiln bench: the loader: %s\n", err);
        goto out;
    }
    r->loader_threads = loader_threads(lds[FEED_LOADER]);
    if (!(x = malloc(in_size * (size_t)o->batch * sizeof *x)) ||
        !(lx = malloc(in_size * (size_t)o->batch * sizeof *lx)) ||
        !(labels = malloc((size_t)o->batch * sizeof *labels)) ||
        !(llabels = malloc((size_t)o->batch * sizeof *llabels))) {
        fprintf(stderr, "kiln bench: out of memory for a batch of %d\n", o->batch);
        goto out;
    }
    random_batch(x, labels, in_size, o->batch, o->classes);
    if (!(n = net_create(spec, o->in, o->classes, o->batch, &o->devices, &solver, 1, err, sizeof err)) ||
        time_feeds(o, n, lds, x, labels, lx, llabels, r, err, sizeof err) != 0) {
        fprintf(stderr, "kiln bench: %s: %s\n", o->network, err);
        goto out;
    }
    net_free(n);
    n = NULL;
    for (int f = FEED_LOADER; f < FEED_COUNT; f++) {
        loader_close(lds[f]);
        lds[f] = NULL;
    }
    lo.threads = 1;
    for (int f = FEED_LOADER; f < FEED_COUNT; f++) {
        lo.aug = f == FEED_AUGMENT ? (ds_augment){ .pad = BENCH_CIFAR_PAD, .mirror = true } : (ds_augment){ 0 };
        if (!(lds[f] = loader_open(split, &lo, err, sizeof err)) ||
            (r->alone[f] = loader_alone(o, lds[f], lx, llabels, err, sizeof err)) < 0) {
            fprintf(stderr, "kiln bench: the loader: %s\n", err);
            goto out;
        }
    }
    status = 0;
out:
    net_free(n);
    for (int f = 0; f < FEED_COUNT; f++)
        loader_close(lds[f]);
    ds_split_close(split);
    unlink(path);
    rmdir(dir);
    free(x);
    free(lx);
    free(labels);
    free(llabels);
    return status;
}

static void print_augment_text(const bench_opts *o, const augment_result *r)
{
    printf("kiln bench: %s, train, %s, batch %d, %s, %d threads and %d loader thread%s, input %dx%dx%d, "
           "%d classes\n", o->network, precision_name(o->prec), o->batch, o->backend, omp_get_max_threads(),
           r->loader_threads, r->loader_threads == 1 ? "" : "s", o->in.c, o->in.h, o->in.w, o->classes);
    printf("  %d rounds of %d steps per feed (after %d warm-up), a split of %d synthetic images;\n"
           "  augmentation: pad %d, random %dx%d crop, mirror\n", o->rounds, o->steps, o->warmup,
           o->images, BENCH_CIFAR_PAD, o->in.h, o->in.w);
    for (int f = 0; f < FEED_COUNT; f++)
        printf("  %-22s %8.1f images/s (median; spread %.1f%%)\n", feed_names[f], r->feed[f].median,
               100.0 * r->feed[f].spread);
    printf("  augmentation costs %.1f%% of the loader's throughput (per-round ratios %.3f to %.3f);\n"
           "  the loader costs %.1f%% of the fixed batch's\n", 100.0 * r->cost, r->ratio_min, r->ratio_max,
           100.0 * (1.0 - r->feed[FEED_LOADER].median / r->feed[FEED_FIXED].median));
    double plain_us = 1e6 / r->alone[FEED_LOADER], aug_us = 1e6 / r->alone[FEED_AUGMENT];
    double step_us = 1e6 / r->feed[FEED_FIXED].median;
    printf("  the loader alone on one thread: %.0f images/s plain (%.2f us an image), %.0f augmented\n"
           "  (%.2f us): augmenting adds %.2f us of a core an image, %.3f%% of a training step's %.0f us\n",
           r->alone[FEED_LOADER], plain_us, r->alone[FEED_AUGMENT], aug_us, aug_us - plain_us,
           100.0 * (aug_us - plain_us) / step_us, step_us);
}

static int print_augment_json(const bench_opts *o, const augment_result *r)
{
    cJSON *j = cJSON_CreateObject(), *feeds = cJSON_CreateObject();
    bool ok = j && feeds;
    ok = ok && cJSON_AddStringToObject(j, "network", o->network) &&
         cJSON_AddStringToObject(j, "mode", "train") &&
         cJSON_AddStringToObject(j, "precision", precision_name(o->prec)) &&
         cJSON_AddStringToObject(j, "backend", o->backend) &&
         cJSON_AddNumberToObject(j, "batch", o->batch) && cJSON_AddNumberToObject(j, "steps", o->steps) &&
         cJSON_AddNumberToObject(j, "rounds", o->rounds) &&
         cJSON_AddNumberToObject(j, "threads", omp_get_max_threads()) &&
         cJSON_AddNumberToObject(j, "loader_threads", r->loader_threads) &&
         cJSON_AddNumberToObject(j, "images", o->images);
    for (int f = 0; ok && f < FEED_COUNT; f++) {
        cJSON *e = cJSON_AddObjectToObject(feeds, feed_keys[f]);
        ok = e && cJSON_AddNumberToObject(e, "images_per_sec", r->feed[f].median) &&
             cJSON_AddNumberToObject(e, "spread", r->feed[f].spread) &&
             cJSON_AddItemToObject(e, "rounds", cJSON_CreateDoubleArray(r->feed[f].ips, o->rounds));
    }
    if (ok && cJSON_AddItemToObject(j, "feeds", feeds))
        feeds = NULL;
    else
        ok = false;
    ok = ok && cJSON_AddNumberToObject(j, "augmentation_cost", r->cost);
    cJSON *alone = ok ? cJSON_AddObjectToObject(j, "loader_alone_one_thread") : NULL;
    ok = alone && cJSON_AddNumberToObject(alone, "loader", r->alone[FEED_LOADER]) &&
         cJSON_AddNumberToObject(alone, "augmented", r->alone[FEED_AUGMENT]);
    char *text = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    cJSON_Delete(feeds);
    if (!text)
        return -1;
    printf("%s\n", text);
    cJSON_free(text);
    return 0;
}

int bench_main(int argc, char **argv)
{
    bench_opts o;
    bench_result r = { 0 };
    int rc = parse_args(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc == 2) {
        fprintf(stderr, "(kiln bench --help lists the options)\n");
        return 2;
    }
    if (o.threads > 0)
        omp_set_num_threads(o.threads);
    cJSON *spec = load_spec(&o);
    if (!spec)
        return 1;
    if (o.augment) {
        augment_result ar;
        memset(&ar, 0, sizeof ar);
        rc = measure_augment(&o, spec, &ar);
        cJSON_Delete(spec);
        if (rc != 0)
            return rc;
        if (o.json ? print_augment_json(&o, &ar) < 0 : (print_augment_text(&o, &ar), 0)) {
            fprintf(stderr, "kiln bench: out of memory\n");
            return 1;
        }
        return fflush(stdout) == 0 ? 0 : 1;
    }
    rc = measure(&o, spec, &r);
    cJSON_Delete(spec);
    if (rc != 0)
        return rc;
    if (o.json ? print_json(&o, &r) < 0 : (print_text(&o, &r), 0)) {
        fprintf(stderr, "kiln bench: out of memory\n");
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
