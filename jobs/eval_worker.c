/* jobs/eval_worker.c: `kiln evaluate --eval-dir DIR`, one evaluation in its
 * own process (contract in evaluation.h).
 *
 * Reads DIR/eval.json, opens the job's model with the pinned weights
 * (model_bundle_from_job), checks the dataset's header against it (the same
 * eval_check_classes and eval_check_shape as the request), and runs the
 * split once through the loader in validation mode: the file's order, the
 * centre crop the model takes, no mirror, x = (pixel - mean) * scale with
 * the model's mean and scale (its training dataset's, not this dataset's),
 * in batches of the job's batch size, so that the job's own validation split
 * gives the job's val/accuracy. Everything is counted in that one pass
 * (jobs/eval_metrics.h); result.json is written atomically, then
 * {"t":"done"}.
 *
 * Signals (jobs/report.h): SIGTERM (or SIGINT) stops after the current batch with
 * {"t":"status","status":"cancelled"}, exit 0; a second one kills. A write
 * error on stdout (the server is gone) ends the worker.
 */
#include "jobs/worker_prio.h"   /* worker_prio_lower */
#include "jobs/evaluation.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/layout.h"        /* LAYOUT_EVAL_RESULT */
#include "engine/dataset.h"     /* ds_info_load, ds_split_open, loader_open, loader_next_view */
#include "engine/fileio.h"      /* fio_write_atomic */
#include "engine/net.h"         /* net_create, net_load, net_predict */
#include "jobs/eval_metrics.h"  /* eval_acc */
#include "jobs/report.h"        /* report_start, report_emit, report_log, report_stopping */

#define PROGRESS_REPORTS 50      /* progress lines over a whole split, about */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(int64_t done, int64_t total)
{
    char line[128];
    snprintf(line, sizeof line, "{\"t\":\"progress\",\"done\":%lld,\"total\":%lld}", (long long)done,
             (long long)total);
    report_emit(line);
}

/* ---- one evaluation -------------------------------------------------------------- */

typedef struct evaluation {
    eval_spec spec;
    model_bundle model;
    bool have_model;
    ds_info info;
    bool have_info;
    ds_split *split;
    loader *ld;
    net *net;
    float *probs;
    eval_acc acc;
    char err[1024];
} evaluation;

static void close_evaluation(evaluation *v)
{
    eval_acc_free(&v->acc);
    free(v->probs);
    net_free(v->net);
    loader_close(v->ld);
    ds_split_close(v->split);
    if (v->have_info)
        ds_info_free(&v->info);
    if (v->have_model)
        model_bundle_free(&v->model);
}

/* The net on the device the scheduler gave (gpus: "--gpus N", else the CPU). */
static net *open_net(evaluation *v, const char *gpus)
{
    char e[512];
    if (!gpus) {
        net *n = model_bundle_net(&v->model, v->spec.batch_size, e, sizeof e);
        if (!n)
            snprintf(v->err, sizeof v->err, "network: %s", e);
        return n;
    }
    char spec[64];
    net_devices d;
    snprintf(spec, sizeof spec, "cuda:%s", gpus);
    if (net_devices_parse(spec, &d, e, sizeof e) != 0) {
        snprintf(v->err, sizeof v->err, "--gpus %s: %s", gpus, e);
        return NULL;
    }
    net *n = net_create(v->model.spec, v->model.input, v->model.nclasses, v->spec.batch_size, &d, NULL, 0,
                        e, sizeof e);
    if (n && net_load(n, v->model.weights, e, sizeof e) != 0) {
        net_free(n);
        n = NULL;
    }
    if (!n)
        snprintf(v->err, sizeof v->err, "network: %s", e);
    return n;
}

static int open_evaluation(evaluation *v, const char *dir, const char *gpus)
{
    api_error ae;
    char e[512], path[PATH_MAX + 32];
    if (eval_spec_load(dir, &v->spec, &ae) != 0 ||
        model_bundle_from_job(v->spec.job_dir, v->spec.weights, &v->model, &ae) != 0) {
        snprintf(v->err, sizeof v->err, "%s", ae.message);
        return -1;
    }
    v->have_model = true;
    if (ds_info_load(v->spec.dataset_dir, &v->info, e, sizeof e) != 0) {
        snprintf(v->err, sizeof v->err, "dataset: %s", e);
        return -1;
    }
    v->have_info = true;
    if (eval_check_classes((const char *const *)v->model.labels, v->model.nclasses,
                           (const char *const *)v->info.classes, v->info.nclasses, &ae) != 0 ||
        eval_check_shape(&v->model.prep, v->info.c, v->info.h, v->info.w, &ae) != 0) {
        snprintf(v->err, sizeof v->err, "%s", ae.message);
        return -1;
    }
    layout_file(path, sizeof path, v->spec.dataset_dir, eval_split_file(v->spec.split));
    if (!(v->split = ds_split_open(path, e, sizeof e))) {
        snprintf(v->err, sizeof v->err, "dataset: %s", e);
        return -1;
    }
    /* Validation mode with the model's preprocessing: its mean, its scale, its crop. */
    const model_prep *p = &v->model.prep;
    loader_opts lo = { .batch = v->spec.batch_size, .train = false, .drop_last = false, .seed = 0,
                       .mean = p->mean, .scale = p->scale,
                       .aug = { .crop_h = p->crop_h, .crop_w = p->crop_w } };
    if (!(v->ld = loader_open(v->split, &lo, e, sizeof e))) {
        snprintf(v->err, sizeof v->err, "data loader: %s", e);
        return -1;
    }
    int c, h, w;
    loader_shape(v->ld, &c, &h, &w);
    if (c != v->model.input.c || h != v->model.input.h || w != v->model.input.w) {
        snprintf(v->err, sizeof v->err, "the loader gives %dx%dx%d images but the network takes %dx%dx%d",
                 c, h, w, v->model.input.c, v->model.input.h, v->model.input.w);
        return -1;
    }
    if (!(v->net = open_net(v, gpus)))
        return -1;
    v->probs = malloc((size_t)v->spec.batch_size * (size_t)v->model.nclasses * sizeof *v->probs);
    if (!v->probs) {
        snprintf(v->err, sizeof v->err, "out of memory for a batch of %d", v->spec.batch_size);
        return -1;
    }
    if (eval_acc_init(&v->acc, v->model.nclasses, e, sizeof e) != 0) {
        snprintf(v->err, sizeof v->err, "%s", e);
        return -1;
    }
    return 0;
}

/* The split, once. Returns 0 (*cancelled says whether it stopped early) or -1. */
static int run_split(evaluation *v, bool *cancelled)
{
    int64_t total = (int64_t)ds_split_count(v->split), done = 0;
    int64_t batches = (int64_t)loader_batches(v->ld), every = batches / PROGRESS_REPORTS, b = 0;
    if (every < 1)
        every = 1;
    char e[512];
    const float *x;
    const int32_t *labels;
    int n;
    *cancelled = false;
    progress(0, total);
    loader_start_epoch(v->ld, 0);
    while ((n = loader_next_view(v->ld, &x, &labels)) != 0) {
        if (n < 0) {
            snprintf(v->err, sizeof v->err, "data: %s", loader_error(v->ld));
            return -1;
        }
        int rc = net_predict(v->net, x, n, v->probs, e, sizeof e);
        if (rc == 0)
            rc = eval_acc_add(&v->acc, v->probs, labels, n, done, e, sizeof e);
        loader_release(v->ld);
        if (rc != 0) {
            snprintf(v->err, sizeof v->err, "images %lld..%lld: %s", (long long)done,
                     (long long)(done + n - 1), e);
            return -1;
        }
        done += n;
        if (++b % every == 0 || done == total)
            progress(done, total);
        if (report_stopping()) {
            *cancelled = done < total;
            if (*cancelled)
                return 0;
        }
    }
    return 0;
}

/* dir/result.json: the counts' result with what was evaluated. */
static int write_result(evaluation *v, const char *dir, double seconds)
{
    const eval_spec *sp = &v->spec;
    cJSON *r = eval_acc_to_json(&v->acc, (const char *const *)v->model.labels, sp->dataset_id,
                                eval_split_name(sp->split));
    bool ok = r && cJSON_AddNumberToObject(r, "evaluation_id", (double)sp->id) &&
              cJSON_AddNumberToObject(r, "job_id", (double)sp->job_id) &&
              cJSON_AddNumberToObject(r, "dataset_id", (double)sp->dataset_id) &&
              cJSON_AddStringToObject(r, "split", eval_split_name(sp->split)) &&
              cJSON_AddStringToObject(r, "selection", sp->selection) &&
              cJSON_AddNumberToObject(r, "epoch", v->model.epoch) &&
              cJSON_AddBoolToObject(r, "final", v->model.final) &&
              cJSON_AddNumberToObject(r, "seconds", seconds) &&
              cJSON_AddNumberToObject(r, "images_per_sec", seconds > 0 ? (double)v->acc.count / seconds : 0);
    char *text = ok ? cJSON_PrintUnformatted(r) : NULL;
    cJSON_Delete(r);
    if (!text) {
        snprintf(v->err, sizeof v->err, "out of memory writing the result");
        return -1;
    }
    char path[PATH_MAX + 32], e[512];
    int rc = layout_file(path, sizeof path, dir, LAYOUT_EVAL_RESULT);
    if (rc != 0)
        snprintf(v->err, sizeof v->err, "the path of %s in %.900s is too long", LAYOUT_EVAL_RESULT, dir);
    else if ((rc = fio_write_atomic(path, text, strlen(text), e, sizeof e)) != 0)
        snprintf(v->err, sizeof v->err, "writing %.400s: %.500s", path, e);
    cJSON_free(text);
    return rc;
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln evaluate --eval-dir DIR [--gpus N]\n"
            "\n"
            "Runs one evaluation: reads DIR/eval.json (written by POST\n"
            "/api/v1/jobs/{id}/evaluations), runs the job's model over the dataset split,\n"
            "and writes DIR/result.json (loss, top-1/top-5 accuracy, per-class precision,\n"
            "recall and F1, the confusion matrix, misclassified images). Reports progress\n"
            "as JSON lines on stdout and log lines on stderr. SIGTERM cancels. Normally\n"
            "started by `kiln serve`'s scheduler, not by hand.\n"
            "\n"
            "  --eval-dir DIR  the evaluation's folder (<data>/evaluations/<id>)\n"
            "  --gpus N        the GPU to run on, given by the scheduler (default: the CPU)\n"
            "  --help          this text\n");
}

static int evaluate(const char *dir, const char *gpus)
{
    evaluation v;
    memset(&v, 0, sizeof v);
    int status = 1;
    double t0 = mono_now();
    if (open_evaluation(&v, dir, gpus) != 0) {
        report_error(v.err);
        goto out;
    }
    report_emit("{\"t\":\"status\",\"status\":\"running\"}");
    report_log("evaluation %lld: job %lld's %s (epoch %d%s, %s) on the %s split of dataset %lld: %zu images "
          "of %dx%dx%d, %d classes, batches of %d on %s", (long long)v.spec.id, (long long)v.spec.job_id,
          v.model.network_name[0] ? v.model.network_name : "network", v.model.epoch,
          v.model.final ? ", final" : "", v.spec.selection, eval_split_name(v.spec.split),
          (long long)v.spec.dataset_id, ds_split_count(v.split), v.info.c, v.info.h, v.info.w,
          v.model.nclasses, v.spec.batch_size, gpus ? "a GPU" : "the CPU");
    bool cancelled = false;
    double t1 = mono_now();
    if (run_split(&v, &cancelled) != 0) {
        report_error(v.err);
        goto out;
    }
    if (cancelled) {
        report_log("cancelled after %lld images", (long long)v.acc.count);
        report_emit("{\"t\":\"status\",\"status\":\"cancelled\"}");
        status = 0;
        goto out;
    }
    double secs = mono_now() - t1;
    if (write_result(&v, dir, secs) != 0) {
        report_error(v.err);
        goto out;
    }
    report_log("done: %lld images in %.1f s (%.0f images/s; %.1f s in all): top-1 %.4f, top-%d %.4f, loss %.4f",
          (long long)v.acc.count, secs, secs > 0 ? v.acc.count / secs : 0, mono_now() - t0,
          v.acc.count ? (double)v.acc.top1 / v.acc.count : NAN, v.acc.topk,
          v.acc.count ? (double)v.acc.topk_hits / v.acc.count : NAN,
          v.acc.count ? v.acc.loss_sum / v.acc.count : NAN);
    report_emit("{\"t\":\"done\"}");
    status = 0;
out:
    close_evaluation(&v);
    return status;
}

int eval_main(int argc, char **argv)
{
    const char *dir = NULL, *gpus = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--eval-dir") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strncmp(argv[i], "--eval-dir=", 11)) {
            dir = argv[i] + 11;
        } else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) {
            gpus = argv[++i];
        } else {
            fprintf(stderr, "kiln evaluate: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    worker_prio_lower("evaluate");
    report_start(NULL);
    return evaluate(dir, gpus);
}
