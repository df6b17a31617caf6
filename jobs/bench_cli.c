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
 */
#include "jobs/bench.h"

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "engine/net.h"       /* net_create, net_train_step, net_eval */
#include "engine/rng.h"       /* rng_splitmix64: the synthetic data */
#include "engine/summary.h"   /* summary_build: forward FLOPs per image */
#include "jobs/cli_args.h"    /* cli_int, cli_shape, cli_spec */

#define BENCH_STEPS_MAX 1000000

typedef struct bench_opts {
    const char *network;
    precision_mode prec;
    const char *backend;        /* as given, for the report */
    net_devices devices;
    bool train;
    int batch, steps, warmup, threads, classes;
    net_shape in;
    bool json;
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
                       .steps = 50, .warmup = 5 };
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
    uint64_t state = 20260101;
    for (size_t i = 0; i < in_size * (size_t)o->batch; i++)      /* uniform in [-1, 1) */
        x[i] = (float)((double)(rng_splitmix64(&state) >> 11) * 0x1p-52 - 1.0);
    for (int i = 0; i < o->batch; i++)
        labels[i] = (int32_t)rng_splitmix64_below(&state, (uint64_t)o->classes);

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
