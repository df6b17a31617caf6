/* jobs/train_cli.c: `kiln train`, a training run from the command line.
 *
 * The options become a job request (the body POST /api/v1/jobs takes), which
 * jobspec_resolve_local checks exactly as the service does and resolves
 * against the dataset folder; the result is written to OUT/job.json and run by
 * the worker's own loop (runner_run) with progress for a person on stdout. So
 * OUT ends up with what a job's folder holds: job.json, the TensorBoard file,
 * checkpoints/, snapshots.json, epochs.json and model.safetensors. A folder that already holds a run is
 * refused unless --resume asks to go on from its latest checkpoint.
 */
#include "jobs/runner.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/layout.h"     /* layout_file, LAYOUT_JOB_JSON */
#include "engine/fileio.h"   /* fio_read_file, fio_write_atomic, fio_mkdir_p */
#include "engine/net.h"      /* net_builtin */
#include "jobs/jobspec.h"    /* jobspec_resolve_local */

#define SPEC_FILE_MAX (16u << 20)

/* Options that go into the request as numbers: flag, object ("" top level or
 * "solver"), key, whether it must be an integer. */
static const struct num_opt {
    const char *flag, *obj, *key;
    bool integer;
} num_opts[] = {
    { "--epochs", "", "epochs", true },
    { "--batch", "", "batch_size", true },
    { "--seed", "", "seed", true },
    { "--snapshot-interval", "", "snapshot_interval", true },
    { "--lr", "solver", "lr", false },
    { "--momentum", "solver", "momentum", false },
    { "--weight-decay", "solver", "weight_decay", false },
    { "--beta1", "solver", "beta1", false },
    { "--beta2", "solver", "beta2", false },
    { "--eps", "solver", "eps", false },
    { "--clip-norm", "solver", "clip_norm", false },
    { "--label-smoothing", "solver", "label_smoothing", false },
    { "--keep-checkpoints", "", "keep_checkpoints", true },
    { "--early-stopping-patience", "early_stopping", "patience", true },
    { "--early-stopping-min-delta", "early_stopping", "min_delta", false },
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln train --dataset DIR --network NAME|SPEC.json [OPTIONS]\n"
            "\n"
            "Trains a network on a prepared dataset without the server, printing progress,\n"
            "and writes what a job writes into --out: job.json, the TensorBoard file,\n"
            "checkpoints/epoch-N.safetensors and model.safetensors. The options are checked\n"
            "as a job request (POST /api/v1/jobs) is.\n"
            "\n"
            "  --dataset DIR            a prepared dataset (header.json, train.kds, val.kds),\n"
            "                           e.g. <data>/datasets/1\n"
            "  --network NAME|FILE      a built-in network (lenet, ...) or a spec file\n"
            "  --out DIR                where the outputs go (default ./kiln-train)\n"
            "  --resume                 go on from the latest checkpoint in --out\n"
            "  --epochs N               (10)       --batch N            (64)\n"
            "  --seed N                 (1)        --snapshot-interval N (1)\n"
            "  --precision P            fp32, amp-bf16 or amp-fp16 (fp32): mixed precision\n"
            "  --devices N|LIST         0 the CPU, N the first N GPUs, 0,1 those GPUs\n"
            "                           (default: a GPU when there is one); several GPUs\n"
            "                           train data parallel, the batch split across them\n"
            "  --loss-scaling dynamic|off  (dynamic for amp-fp16, else off)\n"
            "  --solver sgd|adam|adamw  (sgd)\n"
            "  --lr X                   (0.01)     --momentum X         (0.9, sgd)\n"
            "  --nesterov                          Nesterov momentum (sgd)\n"
            "  --beta1 X --beta2 X --eps X         adam, adamw (0.9, 0.999, 1e-8)\n"
            "  --weight-decay X         (0)        --decay-bias         decay biases and\n"
            "                                                           batch-norm parameters too\n"
            "  --clip-norm X            clip gradients to this global L2 norm (0: off)\n"
            "  --label-smoothing X      targets (1 - X) one-hot + X / classes, X in [0, 1) (0)\n"
            "  --larc clip|scale        LARC (sgd)  --larc-eta X        (0.001)\n"
            "  --lr-policy JSON         e.g. '{\"type\": \"cosine\", \"warmup_epochs\": 1}'\n"
            "                           (types fixed, step, multistep, exponential,\n"
            "                           polynomial, cosine; see the README)\n"
            "  --checkpoint-metric M    the metric of the best snapshot: val/accuracy\n"
            "                           (default) or val/loss\n"
            "  --keep-checkpoints N     keep the last N snapshots plus the best (default: all)\n"
            "  --early-stopping         stop (as done) once the metric has not improved for\n"
            "                           `patience` epochs; each option below implies it:\n"
            "  --early-stopping-metric M      (val/loss)\n"
            "  --early-stopping-patience N    (5)\n"
            "  --early-stopping-min-delta X   an improvement is more than X (0)\n"
            "  --name TEXT              a label\n"
            "  --help                   this text\n");
}

/* The object key lives in ("" the request itself), made on first use. */
static cJSON *object_for(cJSON *req, const char *obj)
{
    if (!obj[0])
        return req;
    cJSON *o = cJSON_GetObjectItemCaseSensitive(req, obj);
    return o ? o : cJSON_AddObjectToObject(req, obj);
}

static bool parse_number(const char *s, bool integer, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return false;
    if (integer && (v != (double)(long long)v))
        return false;
    *out = v;
    return true;
}

/* The network: a built-in name as a string, else a spec file's object. */
static cJSON *network_of(const char *arg)
{
    if (net_builtin(arg))
        return cJSON_CreateString(arg);
    char err[512];
    size_t len = 0;
    char *text = fio_read_file(arg, SPEC_FILE_MAX, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "kiln train: --network %s is neither a built-in network nor a "
                "readable spec file (%s)\n", arg, err);
        return NULL;
    }
    cJSON *spec = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(spec)) {
        fprintf(stderr, "kiln train: %s is not a JSON object (a network spec)\n", arg);
        cJSON_Delete(spec);
        return NULL;
    }
    return spec;
}

/* --devices 2 is "devices": 2, a count; --devices 0,1 (or 1,) a list of GPU
 * numbers. The request's checks say what is wrong with the numbers. */
static int add_devices(cJSON *req, const char *v)
{
    cJSON *d = NULL;
    double x;
    if (v && !strchr(v, ',') && parse_number(v, true, &x)) {
        d = cJSON_CreateNumber(x);
    } else if (v && strchr(v, ',')) {
        d = cJSON_CreateArray();
        for (const char *p = v; d && *p;) {
            char *end;
            errno = 0;
            long g = strtol(p, &end, 10);
            if (errno || end == p || (*end && *end != ',')) {
                cJSON_Delete(d);
                d = NULL;
                break;
            }
            cJSON_AddItemToArray(d, cJSON_CreateNumber((double)g));
            p = *end ? end + 1 : end;
        }
    }
    if (!d) {
        fprintf(stderr, "kiln train: --devices needs a GPU count (0: the CPU) or a list of GPU "
                "numbers, such as 0,1\n");
        return -1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(req, "devices");
    cJSON_AddItemToObject(req, "devices", d);
    return 2;
}

/* Adds one option (with its value, when it takes one) to the request;
 * returns the number of arguments used, or -1 after an error message. */
static int add_option(cJSON *req, int argc, char **argv, int i)
{
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--devices"))
        return add_devices(req, v);
    for (size_t k = 0; k < sizeof num_opts / sizeof num_opts[0]; k++) {
        if (strcmp(a, num_opts[k].flag) != 0)
            continue;
        double x;
        if (!v || !parse_number(v, num_opts[k].integer, &x)) {
            fprintf(stderr, "kiln train: %s needs %s\n", a,
                    num_opts[k].integer ? "an integer" : "a number");
            return -1;
        }
        cJSON *o = object_for(req, num_opts[k].obj);
        cJSON_DeleteItemFromObjectCaseSensitive(o, num_opts[k].key);
        return o && cJSON_AddNumberToObject(o, num_opts[k].key, x) ? 2 : -1;
    }
    if (!strcmp(a, "--early-stopping"))
        return object_for(req, "early_stopping") ? 1 : -1;
    if (!strcmp(a, "--nesterov") || !strcmp(a, "--decay-bias")) {
        cJSON *o = object_for(req, "solver");
        const char *key = a[2] == 'n' ? "nesterov" : "decay_bias";
        cJSON_DeleteItemFromObjectCaseSensitive(o, key);
        return o && cJSON_AddTrueToObject(o, key) ? 1 : -1;
    }
    if (!v) {
        fprintf(stderr, "kiln train: %s needs a value\n", a);
        return -1;
    }
    if (!strcmp(a, "--solver")) {
        cJSON *o = object_for(req, "solver");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "type");
        return o && cJSON_AddStringToObject(o, "type", v) ? 2 : -1;
    }
    if (!strcmp(a, "--larc") || !strcmp(a, "--larc-eta")) {
        cJSON *o = object_for(req, "solver");
        cJSON *l = o ? object_for(o, "larc") : NULL;
        if (!l)
            return -1;
        if (a[6] == '\0') {
            cJSON_DeleteItemFromObjectCaseSensitive(l, "policy");
            return cJSON_AddStringToObject(l, "policy", v) ? 2 : -1;
        }
        double x;
        if (!parse_number(v, false, &x)) {
            fprintf(stderr, "kiln train: --larc-eta needs a number\n");
            return -1;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(l, "eta");
        return cJSON_AddNumberToObject(l, "eta", x) ? 2 : -1;
    }
    if (!strcmp(a, "--lr-policy")) {
        cJSON *p = cJSON_Parse(v);
        if (!cJSON_IsObject(p)) {
            fprintf(stderr, "kiln train: --lr-policy needs a JSON object, such as "
                    "'{\"type\": \"step\", \"step_size\": 1000, \"gamma\": 0.1}'\n");
            cJSON_Delete(p);
            return -1;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(req, "lr_policy");
        cJSON_AddItemToObject(req, "lr_policy", p);
        return 2;
    }
    if (!strcmp(a, "--checkpoint-metric") || !strcmp(a, "--early-stopping-metric")) {
        cJSON *o = a[2] == 'c' ? req : object_for(req, "early_stopping");
        const char *key = a[2] == 'c' ? "checkpoint_metric" : "metric";
        cJSON_DeleteItemFromObjectCaseSensitive(o, key);
        return o && cJSON_AddStringToObject(o, key, v) ? 2 : -1;
    }
    if (!strcmp(a, "--name") || !strcmp(a, "--precision") || !strcmp(a, "--loss-scaling")) {
        const char *key = a[2] == 'n' ? "name" : a[2] == 'p' ? "precision" : "loss_scaling";
        cJSON_DeleteItemFromObjectCaseSensitive(req, key);
        return cJSON_AddStringToObject(req, key, v) ? 2 : -1;
    }
    fprintf(stderr, "kiln train: unknown option %s\n", a);
    return -1;
}

/* Whether dir already holds a run (job.json or checkpoints). */
static bool holds_run(const char *dir)
{
    char p[PATH_MAX + 32];
    struct stat sb;
    return layout_file(p, sizeof p, dir, LAYOUT_JOB_JSON) == 0 && stat(p, &sb) == 0;
}

int train_main(int argc, char **argv)
{
    const char *dataset = NULL, *network = NULL, *out = "kiln-train";
    bool resume = false;
    int status = 2;
    cJSON *req = cJSON_CreateObject(), *cfg = NULL;
    char *text = NULL;
    if (!req) {
        fprintf(stderr, "kiln train: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            status = 0;
            goto out;
        }
        if (!strcmp(a, "--resume")) {
            resume = true;
            i++;
            continue;
        }
        if (!strcmp(a, "--dataset") || !strcmp(a, "--network") || !strcmp(a, "--out")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kiln train: %s needs a value\n", a);
                goto usage;
            }
            *(a[2] == 'd' ? &dataset : a[2] == 'n' ? &network : &out) = argv[i + 1];
            i += 2;
            continue;
        }
        int used = add_option(req, argc, argv, i);
        if (used < 0)
            goto usage;
        i += used;
    }
    if (!dataset || !network) {
        fprintf(stderr, "kiln train: --dataset and --network are required\n");
        goto usage;
    }
    cJSON *spec = network_of(network);
    if (!spec) {
        status = 1;
        goto out;
    }
    cJSON_AddItemToObject(req, "network", spec);

    api_error e;
    jobcfg c;
    if (jobspec_resolve_local(req, dataset, &c, &e) != 0) {
        fprintf(stderr, "kiln train: %s (%s)\n", e.message, e.code);
        status = e.status >= 500 ? 1 : 2;
        goto out;
    }
    cfg = jobcfg_to_json(&c);
    jobcfg_free(&c);
    status = 1;
    if (holds_run(out) && !resume) {
        fprintf(stderr, "kiln train: %s already holds a run; pass --resume to go on from its "
                "latest checkpoint, or choose another --out\n", out);
        goto out;
    }
    char err[512], path[PATH_MAX + 16];
    if (fio_mkdir_p(out) != 0) {
        fprintf(stderr, "kiln train: cannot create %s: %s\n", out, strerror(errno));
        goto out;
    }
    if (layout_file(path, sizeof path, out, LAYOUT_JOB_JSON) != 0) {
        fprintf(stderr, "kiln train: the path %s is too long\n", out);
        goto out;
    }
    if (!cfg || !(text = cJSON_Print(cfg)) ||
        fio_write_atomic(path, text, strlen(text), err, sizeof err) != 0) {
        fprintf(stderr, "kiln train: writing job.json: %s\n", text ? err : "out of memory");
        goto out;
    }
    status = runner_run(out, true);
    goto out;
usage:
    fprintf(stderr, "(kiln train --help lists the options)\n");
    status = 2;
out:
    cJSON_free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(req);
    return status;
}
