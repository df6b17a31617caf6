/* jobs/runner.c: `kiln worker --job-dir DIR`, one training job (contract in runner.h).
 *
 * Reads DIR/job.json (written by jobs/jobspec.c), trains with the engine and
 * reports JSON lines on stdout; human-readable lines go to stderr (the job's
 * log). Every metric also goes to the TensorBoard file, with the same tag and
 * step. Steps count globally from 1; a train report's epoch is fractional
 * (1.5 = half-way through the second epoch), a validation report's epoch is
 * the number of epochs completed.
 *
 * Checkpoints (engine/checkpoint.h) hold the weights, the optimizer state
 * and where the run was: checkpoints/epoch-<n>.safetensors after each
 * snapshot_interval-th epoch, checkpoints/step-<S>.safetensors on a cancel.
 * When the job folder already has one (a job requeued after a restart), the
 * worker resumes from the one with the most steps: it restores it, skips the
 * batches of the interrupted epoch that were already trained (the loader's
 * order is a function of the seed and the epoch) and goes on bit for bit as
 * the uninterrupted run would have.
 *
 * The learning rate of each step comes from job.json's "lr_policy"
 * (engine/lr.h) and is reported with every train report.
 *
 * Train reports (report_due): every `interval` = steps_per_epoch /
 * REPORTS_PER_EPOCH steps of an epoch (at least 1), the epoch's last
 * report absorbing the remainder, so that no report covers fewer than
 * `interval` steps unless the epoch itself is shorter. train/loss and
 * train/accuracy are the image-weighted means over the steps since the
 * previous report (each step's images counted once); at the epoch's last
 * step train/epoch_loss and train/epoch_accuracy are the epoch's
 * image-weighted means (epochs.json and the log line give the same
 * figures). A cancel saves these sums beside its checkpoint
 * (checkpoints/step-<S>.means.json), so that a run resumed part-way
 * through an epoch reports the same means as the uninterrupted run (a
 * checkpoint without the file, from an older kiln: the epoch's means cover
 * the steps from the resume on, and the log says so). Each tag is recorded
 * once a step.
 *
 * TensorBoard (jobs/tbevents.h): each run writes its own event file. A
 * resumed run's file begins with a SessionLog START at the first step it
 * records (the checkpoint's step + 1), so that TensorBoard drops what an
 * interrupted run recorded after the checkpoint and shows every step once.
 * Every file carries the job's hyper-parameters (jobs/hparams.h) for the
 * HParams dashboard ("_hparams_/experiment" and
 * "_hparams_/session_start_info", at the file's first step); the run that
 * ends the job writes "_hparams_/session_end_info" (success, or failure). A
 * cancel writes none: the job may be resumed, and TensorBoard keeps the first
 * session_end_info it reads.
 *
 * Data (engine/dataset.h): the training loader shuffles every epoch, applies
 * job.json's "augmentation" (the network is built for the crop's size) and
 * drops an epoch's last short batch, so that no step sees a batch of one
 * image (a training split smaller than one batch trains on its one short
 * batch); jobcfg_steps counts the same steps for the scheduler. Validation
 * sees every image, centre-cropped and never mirrored. The loader's threads
 * ("loader_threads") change how fast batches come, never what is in them.
 *
 * `kiln train` (jobs/train_cli.c) runs the same loop through runner_run with
 * human-readable progress instead of JSON lines.
 *
 * For tests, the environment variable KILN_STOP_AFTER_STEP=S acts as a
 * SIGTERM that arrives during step S (deterministic cancel and resume).
 *
 * Signals (jobs/report.h): SIGTERM (or SIGINT) sets a flag; the worker stops
 * after the current step (or validation batch), writes
 * checkpoints/step-<S>.safetensors, reports {"t":"status","status":"cancelled"}
 * and exits 0. A second signal kills at once. (No handler runs: a thread of
 * report.c's takes the signals with sigwait.) SIGPIPE keeps its default action: when the server is gone,
 * the next report kills the worker (a rank of a multi-process job ignores it:
 * its reports go to a file, and a dead peer's socket must fail a send, not
 * kill the rank).
 *
 * The job folder's lock (jobs/joblock.h): before reading job.json or writing
 * anything, the worker holds jobs/<id>/lock until it exits: the one the
 * scheduler gives it (--lock-fd), or one it takes itself, waiting up to
 * --lock-wait seconds for another holder to go (then it fails, naming the
 * holder's pid, having written nothing).
 *
 * Memory (jobs/memfit.h): before building the network the worker checks the
 * training-memory estimate against the memory available now (MemAvailable on
 * the CPU, the GPUs' free memory), less the margin, and fails with the
 * largest batch that fits instead of swapping or being killed.
 *
 * Several processes (jobs/ranks.h, jobs/jobcfg.h jobcfg_ranks): a job of
 * nodes > 1 or tasks_per_node > 1 runs as that many `kiln worker`s, each
 * told its rank by its environment (srun's SLURM_PROCID..., or KILN_RANK,
 * KILN_WORLD_SIZE, KILN_LOCAL_RANK). Every rank reads job.json and the same
 * data in the same order (the seed), resumes from the same checkpoint, and
 * runs the same loop; the engine (engine/net.h, net_world) trains each on
 * its rows of every batch and keeps them in step. Rank 0 alone holds the
 * lock and writes: reports, log lines, the TensorBoard file, checkpoints,
 * epochs.json, snapshots.json, preprocess.json and the model. The other
 * ranks write nothing but their errors (stderr, "rank R: error: ..."). A
 * stop (a signal to any rank) is agreed on after every step (net_any), so
 * all ranks stop after the same one and rank 0's checkpoint is theirs. A
 * rank that fails makes the others fail within the collectives' timeout.
 * A GPU job on one node runs as one process with in-process replicas, or
 * as one rank per GPU (rank on GPU KILN_LOCAL_RANK/SLURM_LOCALID) when
 * started as several.
 *
 * A rank starts itself again with OMP_WAIT_POLICY=PASSIVE unless it is set
 * (exec_with_passive_waits: spinning OpenMP threads of ranks sharing cores
 * slow them down several times).
 *
 * --report-file PATH: reports are appended to PATH (flushed line by line)
 * instead of written on stdout (a dispatcher that tails a file).
 *
 * Exit status: 0 after {"t":"done"} or a cancel, 1 after {"t":"error"}, 2 on a
 * bad command line.
 */
#include "jobs/worker_prio.h"   /* worker_prio_lower: the worker yields the CPU to the server */
#include "jobs/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/layout.h"     /* the job folder's and the dataset's files */
#include "engine/amp.h"          /* AMP_GROWTH_INTERVAL */
#include "engine/checkpoint.h"   /* ckpt_save, ckpt_load, ckpt_latest */
#include "engine/dataset.h"   /* ds_info_load, ds_split_open, loader_open, loader_next */
#include "engine/fileio.h"    /* fio_read_file, fio_mkdir_p */
#include "engine/lr.h"        /* lr_from_json, lr_at */
#include "engine/net.h"       /* net_create, net_train_step, net_eval, net_save */
#include "jobs/jobcfg.h"      /* jobcfg_load, jobcfg_net_devices, jobcfg_net_solver */
#include "jobs/joblock.h"     /* joblock_take, joblock_adopt: the job folder's lock */
#include "jobs/memfit.h"      /* memfit_check: the memory available now */
#include "jobs/snap_keep.h"   /* epochs.json, snap_keep_plan, es_update */
#include "jobs/snapshots.h"   /* snap_list_load, snap_list_save */
#include "jobs/model_bundle.h" /* model_prep_from_job: the job's preprocess.json */
#include "jobs/report.h"      /* report_start, report_emit, report_log, report_stopping */
#include "jobs/tbevents.h"    /* tb_open, tb_scalar, tb_session_start, tb_hparams_*, tb_close */
#include "jobs/hparams.h"     /* hparams_from_config: the job's hyper-parameters */
#include "jobs/ranks.h"       /* ranks_from_env: this worker's rank of a multi-process job */

#define REPORTS_PER_EPOCH 20

/* The metrics TensorBoard's HParams dashboard shows beside the
 * hyper-parameters (each job's last value of the tag). */
static const tb_metric_info hparams_metrics[] = {
    { "val/accuracy", true },
    { "val/loss", true },
    { "train/epoch_loss", false },
    { "train/epoch_accuracy", false },
};

static int64_t stop_after;    /* > 0: act as if SIGTERM came during this step (tests) */

/* ---- small helpers -------------------------------------------------------- */


static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The GPUs the scheduler gave this worker (kiln worker --gpus 0,1); count 0: none given. */
static net_devices worker_gpus;
/* The job folder's lock the scheduler gave (--lock-fd N; -1: take it), and how
 * long to wait for it otherwise (--lock-wait S). */
static int lock_fd_given = -1;
static int lock_wait_s = JOBLOCK_WAIT_DEFAULT_S;
/* kiln worker --report-file PATH; NULL: reports on stdout. */
static const char *report_path;
/* This worker's rank (jobs/ranks.h); rank 0 of 1 when alone. */
static worker_rank me = { .rank = 0, .size = 1 };

/* The folder under a job's where its ranks meet (engine/settings.h net_world). */
#define RENDEZVOUS_DIR "rendezvous"


/* A double for JSON: finite values as %.9g, others as null. */
static void fmt_num(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.9g", v);
    else
        snprintf(buf, n, "null");
}

/* ---- the job -------------------------------------------------------------- */

/* ---- a training run ------------------------------------------------------- */

/* Image-weighted sums of the training steps' losses and correct answers,
 * since the last train report (int_) and over the epoch (ep_); a step
 * skipped for overflow does not count. A cancel saves them beside its
 * checkpoint (save_sums) so that a run resumed part-way through an epoch
 * reports the means the uninterrupted run would have. */
typedef struct train_sums {
    double int_loss, ep_loss;
    long int_correct, int_count, ep_correct, ep_count;
} train_sums;

typedef struct run {
    const char *dir;
    bool writer;                 /* rank 0 (or alone): writes the job folder's files */
    jobcfg cfg;
    ds_info info;
    bool have_info;
    ds_split *train, *val;
    loader *train_ld, *val_ld;
    net *net;
    tb_writer *tb;
    float *x;
    int32_t *labels;
    int64_t steps_per_epoch, total_steps, step;
    lr_policy lr;
    int start_epoch;             /* resuming: the epoch to go on with... */
    int64_t skip;                /* ...and its batches already trained */
    int epoch;                   /* the epoch in progress (0-based) */
    int64_t epoch_step;          /* its steps done */
    train_sums sums;             /* of the epoch in progress */
    bool sums_restored;          /* resumed part-way: sums hold the interrupted run's */
    double last_loss, last_acc, last_lr;   /* for human progress lines */
    double last_val_secs;        /* < 0 until the first validation */
    cJSON *record;               /* epochs.json's items (jobs/snap_keep.h) */
    es_state es;                 /* early stopping, fed every validated epoch */
    bool stopped_early;          /* es said stop: the run ends as done */
    char stop_msg[256];
    char err[1024];
} run;

/* Whether the train report falls after epoch_step (1-based) of an epoch of
 * steps_per_epoch steps: every interval steps, the last report of an epoch
 * taking the remainder (an epoch of 41 steps, interval 2: after 2, 4, ...,
 * 38 and 41). */
static bool report_due(int64_t epoch_step, int64_t steps_per_epoch, int64_t interval)
{
    if (epoch_step == steps_per_epoch)
        return true;
    return epoch_step % interval == 0 && steps_per_epoch - epoch_step >= interval;
}

/* Reports one metric on stdout and to TensorBoard. Returns 0 or -1 (r->err). */
static int metric(run *r, const char *tag, double value, int64_t step, double epoch)
{
    char v[32], e[32], w[32];
    double wall = wall_now();
    fmt_num(v, sizeof v, value);
    fmt_num(e, sizeof e, epoch);
    snprintf(w, sizeof w, "%.3f", wall);
    char line[256];
    snprintf(line, sizeof line,
             "{\"t\":\"metric\",\"step\":%lld,\"epoch\":%s,\"tag\":\"%s\",\"value\":%s,\"wall_time\":%s}",
             (long long)step, e, tag, v, w);
    report_emit(line);
    if (!strcmp(tag, "train/loss"))
        r->last_loss = value;
    else if (!strcmp(tag, "train/accuracy"))
        r->last_acc = value;
    else if (!strcmp(tag, "lr"))
        r->last_lr = value;
    char terr[256];
    if (r->tb && tb_scalar(r->tb, tag, step, (float)value, wall, terr, sizeof terr) != 0) {
        snprintf(r->err, sizeof r->err, "writing the TensorBoard file: %s", terr);
        return -1;
    }
    return 0;
}

/* Mixed precision: the loss scale in use and the steps skipped so far
 * (engine/amp.h), with the other training metrics; nothing in fp32. */
static int amp_metrics(run *r, int64_t step, double epoch)
{
    if (r->cfg.precision == PREC_FP32)
        return 0;
    net_amp_state a;
    net_amp_get(r->net, &a);
    return metric(r, "amp/loss_scale", a.scale, step, epoch) ||
           metric(r, "amp/skipped_steps", (double)a.skipped, step, epoch) ? -1 : 0;
}

static void progress(run *r, int epochs_done, double ips, double eta)
{
    char a[32], b[32], line[256];
    fmt_num(a, sizeof a, ips);
    fmt_num(b, sizeof b, eta);
    snprintf(line, sizeof line,
             "{\"t\":\"progress\",\"epoch\":%d,\"epochs\":%d,\"step\":%lld,\"steps\":%lld,"
             "\"images_per_sec\":%s,\"eta\":%s}",
             epochs_done, r->cfg.epochs, (long long)r->step, (long long)r->total_steps, a, b);
    report_emit(line);
    if (report_human() && epochs_done == r->epoch)
        printf("epoch %d/%d  step %lld/%lld  loss %.4f  accuracy %.4f  lr %.6g  %.0f images/s"
               "  eta %.0f s\n", r->epoch + 1, r->cfg.epochs, (long long)r->step,
               (long long)r->total_steps, r->last_loss, r->last_acc, r->last_lr, ips,
               isfinite(eta) ? eta : 0);
}

/* The final weights (net_save) when final, else a checkpoint of where the
 * run is (r->epoch, r->epoch_step). */
static int save_checkpoint(run *r, const char *name, bool final)
{
    char path[PATH_MAX + 64], nerr[512];
    if (!r->writer)
        return 0;                   /* rank 0 writes the one the ranks share */
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    ckpt_info ci = { .step = r->step, .epoch = r->epoch, .epoch_step = r->epoch_step,
                     .seed = r->cfg.seed };
    int rc = final ? net_save(r->net, path, nerr, sizeof nerr)
                   : ckpt_save(r->net, path, &ci, nerr, sizeof nerr);
    if (rc != 0) {
        snprintf(r->err, sizeof r->err, "saving %s: %s", name, nerr);
        return -1;
    }
    return 0;
}

/* checkpoints/step-S.means.json beside a cancel's step-S checkpoint: r->sums. */
#define SUMS_SUFFIX ".means.json"

static void sums_path(char *buf, size_t n, const char *ckpt_path)
{
    size_t len = strlen(ckpt_path), ext = strlen(".safetensors");
    if (len >= ext && !strcmp(ckpt_path + len - ext, ".safetensors"))
        len -= ext;
    snprintf(buf, n, "%.*s%s", (int)len, ckpt_path, SUMS_SUFFIX);
}

/* Adds {"loss_sum","correct","images"} to o as key; false when out of memory. */
static bool add_part(cJSON *o, const char *key, double loss_sum, long correct, long images)
{
    cJSON *p = cJSON_AddObjectToObject(o, key);
    return p && cJSON_AddNumberToObject(p, "loss_sum", loss_sum) &&
           cJSON_AddNumberToObject(p, "correct", (double)correct) &&
           cJSON_AddNumberToObject(p, "images", (double)images);
}

/* Writes r->sums for the checkpoint of r->step (atomically; cJSON prints a
 * double so that it reads back the same). 0 or -1 (r->err). */
static int save_sums(run *r)
{
    char ck[PATH_MAX + 64], path[PATH_MAX + 80], e[512];
    if (!r->writer)
        return 0;
    snprintf(ck, sizeof ck, "%s/checkpoints/step-%lld.safetensors", r->dir, (long long)r->step);
    sums_path(path, sizeof path, ck);
    const train_sums *t = &r->sums;
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "step", (double)r->step) &&
              add_part(o, "since_report", t->int_loss, t->int_correct, t->int_count) &&
              add_part(o, "epoch", t->ep_loss, t->ep_correct, t->ep_count);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int rc = -1;
    if (!text)
        snprintf(r->err, sizeof r->err, "out of memory saving the train means");
    else if ((rc = fio_write_atomic(path, text, strlen(text), e, sizeof e)) != 0)
        snprintf(r->err, sizeof r->err, "saving the train means: %s", e);
    cJSON_free(text);
    return rc;
}

static bool read_part(const cJSON *o, double *loss_sum, long *correct, long *images)
{
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss_sum");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "correct");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "images");
    if (!cJSON_IsNumber(l) || !cJSON_IsNumber(c) || !cJSON_IsNumber(n) || c->valuedouble < 0 ||
        n->valuedouble < c->valuedouble)
        return false;
    *loss_sum = l->valuedouble;
    *correct = (long)c->valuedouble;
    *images = (long)n->valuedouble;
    return true;
}

/* Restores r->sums from the file beside the checkpoint at ckpt_path (of
 * step), when there is one that reads; otherwise logs that the epoch's
 * means start at the resume. */
static void restore_sums(run *r, const char *ckpt_path, int64_t step)
{
    char path[PATH_MAX + 80], e[512];
    sums_path(path, sizeof path, ckpt_path);
    size_t len;
    char *text = fio_read_file(path, 1 << 16, &len, e, sizeof e);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    train_sums t;
    memset(&t, 0, sizeof t);
    r->sums_restored = cJSON_IsNumber(s) && (int64_t)s->valuedouble == step &&
        read_part(cJSON_GetObjectItemCaseSensitive(o, "since_report"), &t.int_loss, &t.int_correct,
                  &t.int_count) &&
        read_part(cJSON_GetObjectItemCaseSensitive(o, "epoch"), &t.ep_loss, &t.ep_correct, &t.ep_count);
    cJSON_Delete(o);
    if (r->sums_restored)
        r->sums = t;
    else
        report_log("no train means saved with this checkpoint (%s): this epoch's train/loss until the "
                   "next report and its train/epoch_* cover the steps from the resume on", path);
}

/* Stops for a cancel: a checkpoint of where it got to, then the report. */
static int stop_cancelled(run *r)
{
    if (r->net && r->step > 0) {
        char name[64];
        snprintf(name, sizeof name, "checkpoints/step-%lld.safetensors", (long long)r->step);
        if (save_checkpoint(r, name, false) == 0 && save_sums(r) == 0)
            report_log("cancelled at step %lld; saved %s", (long long)r->step, name);
        else
            report_log("cancelled at step %lld; %s", (long long)r->step, r->err);
    } else {
        report_log("cancelled before training started");
    }
    report_emit("{\"t\":\"status\",\"status\":\"cancelled\"}");
    return 0;
}

/* Restores the latest checkpoint of ckdir, if there is one, and sets where
 * training goes on. Returns 0 (also when there is nothing to resume) or -1. */
static int resume(run *r, const char *ckdir, char *err, size_t errlen)
{
    char path[PATH_MAX + 64], e[512];
    ckpt_info ci;
    int found = ckpt_latest(ckdir, path, sizeof path, &ci, e, sizeof e);
    if (found < 0) {
        set_err(err, errlen, "checkpoints: %s", e);
        return -1;
    }
    if (found == 0)
        return 0;
    if (ci.seed != r->cfg.seed || ci.epoch > r->cfg.epochs || ci.epoch_step > r->steps_per_epoch ||
        ci.step != (int64_t)ci.epoch * r->steps_per_epoch + ci.epoch_step) {
        set_err(err, errlen, "cannot resume from %s: it was written by a run with another seed, "
                "dataset or batch size, or by a kiln that counted an epoch's steps otherwise "
                "(step %lld, epoch %d + %lld steps; this run has %lld steps an epoch)", path,
                (long long)ci.step, ci.epoch, (long long)ci.epoch_step, (long long)r->steps_per_epoch);
        return -1;
    }
    if (ckpt_load(r->net, path, NULL, e, sizeof e) != 0) {
        set_err(err, errlen, "cannot resume: %s", e);
        return -1;
    }
    r->step = ci.step;
    r->start_epoch = r->epoch = ci.epoch;
    r->skip = r->epoch_step = ci.epoch_step;
    if (ci.epoch_step > 0)
        restore_sums(r, path, ci.step);
    report_log("resuming from %s: step %lld, epoch %d%s", path, (long long)ci.step, ci.epoch + 1,
          ci.epoch_step ? " (part-way)" : "");
    return 0;
}


/* ---- snapshots, the record of the epochs, early stopping ------------------- */

static bool add_finite(cJSON *o, snap_metric m, double v)
{
    return !isfinite(v) || cJSON_AddNumberToObject(o, snap_metric_name(m), v) != NULL;
}

/* epochs.json's item of an epoch: {"epoch","step","metrics"}; NULL when out of memory. */
static cJSON *epoch_item(int epoch, int64_t step, double val_loss, double val_acc, double train_loss,
                         double train_acc)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = o ? cJSON_AddObjectToObject(o, "metrics") : NULL;
    bool ok = m && cJSON_AddNumberToObject(o, "epoch", epoch) &&
              cJSON_AddNumberToObject(o, "step", (double)step) &&
              add_finite(m, SNAP_VAL_LOSS, val_loss) && add_finite(m, SNAP_VAL_ACCURACY, val_acc) &&
              add_finite(m, SNAP_TRAIN_LOSS, train_loss) && add_finite(m, SNAP_TRAIN_ACCURACY, train_acc);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* item as epochs.json gives it back: cJSON writes a number with 15
 * significant digits where they read back within its epsilon, so the run
 * decides on the values a resumed worker will read. NULL when out of memory. */
static cJSON *through_text(cJSON *item)
{
    char *text = item ? cJSON_PrintUnformatted(item) : NULL;
    cJSON *back = text ? cJSON_Parse(text) : NULL;
    cJSON_free(text);
    cJSON_Delete(item);
    return back;
}

/* Appends item (taken) to the record and writes epochs.json. 0 or -1 (r->err). */
static int record_epoch(run *r, cJSON **itemp)
{
    char e[512];
    cJSON *item = *itemp = through_text(*itemp);
    if (!item || !cJSON_AddItemToArray(r->record, item)) {
        cJSON_Delete(item);
        snprintf(r->err, sizeof r->err, "out of memory recording the epoch");
        return -1;
    }
    if (r->writer && snap_epochs_save(r->dir, r->record, e, sizeof e) != 0) {
        snprintf(r->err, sizeof r->err, "writing %s: %s", SNAP_EPOCHS_JSON, e);
        return -1;
    }
    return 0;
}

/* The record's item of an epoch, or NULL. */
static const cJSON *record_item(const run *r, int epoch)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, r->record) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(it, "epoch");
        if (cJSON_IsNumber(ep) && (int)ep->valuedouble == epoch)
            return it;
    }
    return NULL;
}

/* Puts epoch's snapshot into l (in epoch order), or refreshes its metrics.
 * 0, or -1 when out of memory. */
static int list_put(snap_list *l, int epoch, int64_t step, const char *file, const cJSON *metrics)
{
    cJSON *m = metrics ? cJSON_Duplicate(metrics, 1) : cJSON_CreateObject();
    if (!m)
        return -1;
    snap_item *have = (snap_item *)snap_list_find(l, epoch);
    if (have) {                /* listed already (from the checkpoint files, without a step) */
        cJSON_Delete(have->metrics);
        have->metrics = m;
        have->step = step;
        snprintf(have->file, sizeof have->file, "%s", file);
        return 0;
    }
    snap_item *grown = realloc(l->items, (size_t)(l->n + 1) * sizeof *grown);
    if (!grown) {
        cJSON_Delete(m);
        return -1;
    }
    l->items = grown;
    int at = l->n;
    while (at > 0 && l->items[at - 1].epoch > epoch)
        at--;
    memmove(&l->items[at + 1], &l->items[at], (size_t)(l->n - at) * sizeof *grown);
    snap_item *it = &l->items[at];
    memset(it, 0, sizeof *it);
    it->epoch = epoch;
    it->step = step;
    snprintf(it->file, sizeof it->file, "%s", file);
    it->metrics = m;
    l->n++;
    return 0;
}

/* With keep_checkpoints, a cancel's checkpoints/step-S files older than the
 * snapshot at `step` are no longer what a resume needs: removed. */
static void drop_old_step_checkpoints(run *r, int64_t step)
{
    char dir[PATH_MAX];
    if (layout_file(dir, sizeof dir, r->dir, LAYOUT_CHECKPOINTS) != 0)
        return;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long long s;
        char tail[32], path[PATH_MAX + 300];
        if (sscanf(de->d_name, "step-%lld.%31s", &s, tail) == 2 &&
            (!strcmp(tail, "safetensors") || !strcmp(tail, &SUMS_SUFFIX[1])) && s < step) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            if (unlink(path) == 0)
                report_log("removed %s/%s: a later snapshot replaces it (keep_checkpoints)",
                      LAYOUT_CHECKPOINTS, de->d_name);
        }
    }
    if (d)
        closedir(d);
}

/* After epoch's snapshot file is written: lists it in snapshots.json with
 * its metrics (the record's), picks the best by checkpoint_metric, and with
 * keep_checkpoints removes the snapshots that go (the list is written first:
 * a kill in between leaves a file too many, never a listed file missing).
 * 0 or -1 (r->err). */
static int update_snapshots(run *r, int epoch, int64_t step, const char *file)
{
    snap_list l;
    char e[512];
    if (!r->writer)
        return 0;
    if (snap_list_load(r->dir, &l, e, sizeof e) != 0) {
        snprintf(r->err, sizeof r->err, "reading %s: %s", LAYOUT_SNAPSHOTS, e);
        return -1;
    }
    const cJSON *item = record_item(r, epoch);
    int rc = -1;
    bool *keep = NULL;
    l.metric = r->cfg.checkpoint_metric;
    if (list_put(&l, epoch, step, file, cJSON_GetObjectItemCaseSensitive(item, "metrics")) != 0 ||
        !(keep = calloc((size_t)l.n + 1, sizeof *keep))) {
        snprintf(r->err, sizeof r->err, "out of memory listing the snapshot");
        goto out;
    }
    snap_list_pick_best(&l);
    int gone = snap_keep_plan(&l, r->cfg.keep_checkpoints, epoch, keep);
    snap_item *removed = gone ? calloc((size_t)gone, sizeof *removed) : NULL;
    if (gone && !removed) {
        snprintf(r->err, sizeof r->err, "out of memory pruning the snapshots");
        goto out;
    }
    int n = 0, k = 0;
    for (int i = 0; i < l.n; i++) {
        if (keep[i])
            l.items[n++] = l.items[i];
        else
            removed[k++] = l.items[i];
    }
    l.n = n;
    if (snap_list_save(r->dir, &l, e, sizeof e) != 0) {
        snprintf(r->err, sizeof r->err, "writing %s: %s", LAYOUT_SNAPSHOTS, e);
        for (int i = 0; i < k; i++)
            cJSON_Delete(removed[i].metrics);
        free(removed);
        goto out;
    }
    for (int i = 0; i < k; i++) {
        char path[PATH_MAX + 128];
        snprintf(path, sizeof path, "%s/%s", r->dir, removed[i].file);
        if (unlink(path) == 0 || errno == ENOENT)
            report_log("removed %s (keep_checkpoints %d: the last %d and the best, epoch %d)",
                  removed[i].file, r->cfg.keep_checkpoints, r->cfg.keep_checkpoints, l.best);
        else
            report_log("could not remove %s: %s", removed[i].file, strerror(errno));
        cJSON_Delete(removed[i].metrics);
    }
    free(removed);
    if (r->cfg.keep_checkpoints > 0)
        drop_old_step_checkpoints(r, step);
    rc = 0;
out:
    free(keep);
    snap_list_free(&l);
    return rc;
}

/* snapshots.json's final_epoch: the epochs model.safetensors was trained
 * for (an early stop ends before job.json's "epochs"). 0 or -1 (r->err). */
static int mark_final(run *r, int epochs)
{
    snap_list l;
    char e[512];
    if (!r->writer)
        return 0;
    if (snap_list_load(r->dir, &l, e, sizeof e) != 0) {
        snprintf(r->err, sizeof r->err, "reading %s: %s", LAYOUT_SNAPSHOTS, e);
        return -1;
    }
    l.metric = r->cfg.checkpoint_metric;
    snap_list_pick_best(&l);
    l.final_epoch = epochs;
    int rc = snap_list_save(r->dir, &l, e, sizeof e);
    if (rc != 0)
        snprintf(r->err, sizeof r->err, "writing %s: %s", LAYOUT_SNAPSHOTS, e);
    snap_list_free(&l);
    return rc;
}

/* Feeds an epoch's record item to early stopping; sets r->stopped_early. */
static void early_stop_feed(run *r, const cJSON *item)
{
    const jobcfg_early_stop *es = &r->cfg.early_stop;
    const cJSON *ep = cJSON_GetObjectItemCaseSensitive(item, "epoch");
    if (!es->enabled || r->es.stop || !cJSON_IsNumber(ep))
        return;
    if (es_update(&r->es, es, (int)ep->valuedouble, snap_epochs_value(item, es->metric))) {
        r->stopped_early = true;
        es_message(&r->es, es, r->stop_msg, sizeof r->stop_msg);
    }
}

/* The record as far as the checkpoint training goes on from (start_epoch
 * epochs complete): later items dropped, early stopping replayed over the
 * rest, and the resumed snapshot listed when a kill came between its file
 * and snapshots.json. 0, or -1 with err set. */
static int restore_record(run *r, char *err, size_t errlen)
{
    char e[512];
    if (!(r->record = snap_epochs_load(r->dir, e, sizeof e)))
        return set_err(err, errlen, "%s", e);
    if (snap_epochs_truncate(r->record, r->start_epoch) > 0 && r->writer &&
        snap_epochs_save(r->dir, r->record, e, sizeof e) != 0)
        return set_err(err, errlen, "writing %s: %s", SNAP_EPOCHS_JSON, e);
    es_init(&r->es);
    const cJSON *it;
    cJSON_ArrayForEach(it, r->record)
        early_stop_feed(r, it);
    if (r->start_epoch == 0 || r->skip != 0 || r->start_epoch % r->cfg.snapshot_interval != 0)
        return 0;
    char file[64], path[PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/epoch-%d.safetensors", LAYOUT_CHECKPOINTS, r->start_epoch);
    snprintf(path, sizeof path, "%s/%s", r->dir, file);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (update_snapshots(r, r->start_epoch, r->step, file) != 0)
        return set_err(err, errlen, "%s", r->err);
    return 0;
}

/* The job folder's preprocess.json (jobs/model_bundle.h): what the dataset
 * did to an image, kept with the job so that its model can be used after the
 * dataset is gone. */
static int write_preprocess(run *r, char *err, size_t errlen)
{
    model_prep p;
    char path[PATH_MAX + 32];
    if (model_prep_from_job(&r->cfg, &p, err, errlen) != 0)
        return -1;
    cJSON *o = model_prep_to_json(&p);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return set_err(err, errlen, "out of memory");
    layout_file(path, sizeof path, r->dir, MODEL_PREPROCESS_JSON);
    int rc = fio_write_atomic(path, text, strlen(text), err, errlen);
    cJSON_free(text);
    return rc;
}

/* The event file's first records: a resumed run's SessionLog START at the
 * first step it records, then the HParams experiment and session start at
 * that step (0 for a fresh run). 0, or -1 with err set. */
static int tb_begin(run *r, char *err, size_t errlen)
{
    double now = wall_now();
    int64_t first = r->step > 0 ? r->step + 1 : 0;
    if (r->step > 0 && tb_session_start(r->tb, first, now, err, errlen) != 0)
        return -1;
    cJSON *cfg = jobcfg_to_json(&r->cfg);
    cJSON *hp = cfg ? hparams_from_config(cfg) : NULL;
    cJSON_Delete(cfg);
    if (!hp)
        return set_err(err, errlen, "out of memory");
    int rc = tb_hparams_experiment(r->tb, first, hp, hparams_metrics,
                                   sizeof hparams_metrics / sizeof hparams_metrics[0], now, err, errlen);
    if (rc == 0)
        rc = tb_hparams_start(r->tb, first, hp, NULL, now, now, err, errlen);
    cJSON_Delete(hp);
    return rc;
}

/* ---- several processes (jobs/ranks.h) ------------------------------------ */

/* This rank's device and its world (engine/settings.h net_world) in *d, for
 * a job started as several processes; a job that needs several, started
 * alone, and a launch of another size than the job's ranks are errors.
 * Returns 0, or -1 with err set. */
static int world_devices(run *r, net_devices *d, char *err, size_t errlen)
{
    const jobcfg *c = &r->cfg;
    if (me.size == 1) {
        if (jobcfg_multi_process(c))
            return set_err(err, errlen, "the job runs as %d ranks (nodes %d, tasks_per_node %d) "
                           "but this worker was started alone: start them with srun (SLURM_*) "
                           "or with KILN_RANK and KILN_WORLD_SIZE", jobcfg_ranks(c), c->nodes,
                           c->tasks_per_node);
        return 0;
    }
    if (me.size != jobcfg_ranks(c))
        return set_err(err, errlen, "this worker is rank %d of %d (%s), but the job runs as %d "
                       "ranks (nodes %d x %d %s)", me.rank, me.size, me.source, jobcfg_ranks(c),
                       c->nodes, jobcfg_ranks(c) / c->nodes,
                       d->kind == BACKEND_CPU ? "tasks_per_node" : "GPUs");
    if (d->kind == BACKEND_CUDA && me.local_rank >= d->count)
        return set_err(err, errlen, "rank %d is task %d of its node, which has the job's %d GPUs "
                       "(one rank per GPU)", me.rank, me.local_rank, d->count);
    int id = d->kind == BACKEND_CUDA ? d->ids[me.local_rank] : 0;
    net_devices one = { .kind = d->kind, .count = 1, .ids = { id } };
    net_world *w = &one.world;
    w->rank = me.rank;
    w->size = me.size;
    char parent[PATH_MAX];
    int n = snprintf(parent, sizeof parent, "%s/%s", r->dir, RENDEZVOUS_DIR);
    if (n < 0 || (size_t)n >= sizeof parent ||
        snprintf(w->dir, sizeof w->dir, "%s/%s", parent, me.run_id) >= (int)sizeof w->dir)
        return set_err(err, errlen, "the job folder's path is too long");
    if (fio_mkdir_p(parent) != 0)
        return set_err(err, errlen, "cannot create %s: %s", parent, strerror(errno));
    /* one node: loopback; several: the name the other nodes know this one by */
    if (me.host[0])
        snprintf(w->host, sizeof w->host, "%s", me.host);
    else if (c->nodes == 1)
        snprintf(w->host, sizeof w->host, "127.0.0.1");
    else if (gethostname(w->host, sizeof w->host) != 0)
        return set_err(err, errlen, "cannot read this node's host name: %s", strerror(errno));
    *d = one;
    return 0;
}

/* Whether to stop now: a stop asked for here (a signal, KILN_STOP_AFTER_STEP)
 * or, in a multi-process job, on any rank, so that all ranks stop after the
 * same step (net_any). 1 or 0; -1 (r->err) when the ranks could not agree. */
static int stopping(run *r)
{
    bool any;
    char e[512];
    if (!r->net)
        return report_stopping();
    if (net_any(r->net, report_stopping(), &any, e, sizeof e) != 0) {
        snprintf(r->err, sizeof r->err, "agreeing on a stop with the other ranks: %s", e);
        return -1;
    }
    return any;
}

static int open_run(run *r, char *err, size_t errlen)
{
    char e[512], path[PATH_MAX + 32];
    jobcfg *c = &r->cfg;

    if (ds_info_load(c->dataset_dir, &r->info, e, sizeof e) != 0) {
        set_err(err, errlen, "dataset: %s", e);
        return -1;
    }
    r->have_info = true;
    int64_t fit_batch = 0;          /* what is available now, less the margin (jobs/memfit.h) */
    int fit = memfit_check(c, jobcfg_net_input(c), r->info.nclasses, NULL, &fit_batch, e, sizeof e);
    if (fit != 0) {
        set_err(err, errlen, "%s%s", fit > 0 ? "not enough memory to start: " : "network: ", e);
        return -1;
    }
    if (r->writer && write_preprocess(r, err, errlen) != 0)
        return -1;
    layout_file(path, sizeof path, c->dataset_dir, LAYOUT_TRAIN_SPLIT);
    if (!(r->train = ds_split_open(path, e, sizeof e))) {
        set_err(err, errlen, "dataset: %s", e);
        return -1;
    }
    layout_file(path, sizeof path, c->dataset_dir, LAYOUT_VAL_SPLIT);
    if (!(r->val = ds_split_open(path, e, sizeof e))) {
        set_err(err, errlen, "dataset: %s", e);
        return -1;
    }
    if (ds_split_count(r->train) == 0) {
        set_err(err, errlen, "dataset: the train split has no images");
        return -1;
    }
    int sc, sh, sw;
    ds_split_shape(r->train, &sc, &sh, &sw);
    if (sc != r->info.c || sh != r->info.h || sw != r->info.w) {
        set_err(err, errlen, "dataset: train.kds holds %dx%dx%d images but header.json says %dx%dx%d",
                 sc, sh, sw, r->info.c, r->info.h, r->info.w);
        return -1;
    }
    /* Training drops an epoch's last short batch (jobcfg_steps counts the
     * same); validation sees every image, centre-cropped, never mirrored. */
    loader_opts lo = { .batch = c->batch_size, .train = true, .drop_last = true, .seed = c->seed,
                       .mean = r->info.mean, .scale = 1.0f / 255.0f, .aug = jobcfg_ds_augment(c),
                       .threads = c->loader_threads };
    r->train_ld = loader_open(r->train, &lo, e, sizeof e);
    lo.train = lo.drop_last = false;
    if (r->train_ld)
        r->val_ld = loader_open(r->val, &lo, e, sizeof e);
    if (!r->train_ld || !r->val_ld) {
        set_err(err, errlen, "data loader: %s", e);
        return -1;
    }
    net_shape in;
    loader_shape(r->train_ld, &in.c, &in.h, &in.w);      /* the crop: jobcfg_net_input */
    size_t per_image = (size_t)in.c * (size_t)in.h * (size_t)in.w;
    r->x = malloc((size_t)c->batch_size * per_image * sizeof *r->x);
    r->labels = malloc((size_t)c->batch_size * sizeof *r->labels);
    if (!r->x || !r->labels) {
        set_err(err, errlen, "out of memory for a batch of %d images", c->batch_size);
        return -1;
    }

    net_devices devices = jobcfg_net_devices(c);
    if (world_devices(r, &devices, err, errlen) != 0)
        return -1;
    net_solver solver = jobcfg_net_solver(c);
    r->net = net_create(c->network, in, r->info.nclasses, c->batch_size, &devices, &solver, c->seed,
                        e, sizeof e);
    if (!r->net) {
        set_err(err, errlen, "network: %s", e);
        return -1;
    }
    layout_file(path, sizeof path, r->dir, LAYOUT_CHECKPOINTS);
    if (fio_mkdir_p(path) != 0) {
        set_err(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    r->steps_per_epoch = (int64_t)loader_batches(r->train_ld);
    r->total_steps = r->steps_per_epoch * c->epochs;
    r->last_val_secs = -1;
    if (lr_from_json(c->lr_policy, solver.lr, r->total_steps, r->steps_per_epoch, &r->lr,
                     NULL, e, sizeof e) != 0) {
        set_err(err, errlen, "job.json: %s", e);
        return -1;
    }
    if (resume(r, path, err, errlen) != 0 || restore_record(r, err, errlen) != 0)
        return -1;
    if (!r->writer)
        return 0;                   /* rank 0 writes the event file */
    /* A resumed run writes a new event file beside the old one; in the same
     * second as the old one it takes the next free second's name. */
    for (int k = 0; k < 5 && !r->tb; k++)
        r->tb = tb_open(r->dir, wall_now() + k, e, sizeof e);
    if (!r->tb) {
        set_err(err, errlen, "TensorBoard file: %s", e);
        return -1;
    }
    if (tb_begin(r, e, sizeof e) != 0) {
        set_err(err, errlen, "TensorBoard file: %s", e);
        return -1;
    }
    return 0;
}

static void close_run(run *r)
{
    tb_close(r->tb);
    net_free(r->net);
    loader_close(r->train_ld);
    loader_close(r->val_ld);
    ds_split_close(r->train);
    ds_split_close(r->val);
    if (r->have_info)
        ds_info_free(&r->info);
    free(r->x);
    free(r->labels);
    cJSON_Delete(r->record);
    jobcfg_free(&r->cfg);
}

/* Seconds left: the rest of the training steps at the recent rate, plus the
 * validations still to run (estimated before the first one). */
static double eta_of(run *r, double secs_per_step, int epoch_index, bool val_done_this_epoch, double ips)
{
    double steps_left = (double)(r->total_steps - r->step);
    double val_secs = r->last_val_secs;
    if (val_secs < 0)
        val_secs = ips > 0 ? (double)ds_split_count(r->val) / (ips * 3) : 0;
    int vals_left = r->cfg.epochs - epoch_index - (val_done_this_epoch ? 1 : 0);
    return steps_left * secs_per_step + vals_left * val_secs;
}

typedef struct eval_result {
    double loss, accuracy;
    bool interrupted;
} eval_result;

static int validate(run *r, eval_result *out)
{
    double loss_sum = 0;
    long correct = 0, count = 0;
    int n;
    char e[512];
    out->interrupted = false;
    loader_start_epoch(r->val_ld, 0);
    const float *bx;
    const int32_t *bl;
    /* the loader's own batch (no copy), handed back right after the step */
    while ((n = loader_next_view(r->val_ld, &bx, &bl)) != 0) {
        if (n < 0) {
            snprintf(r->err, sizeof r->err, "validation data: %s", loader_error(r->val_ld));
            return -1;
        }
        net_stats st;
        int rc = net_eval(r->net, bx, bl, n, &st, e, sizeof e);
        loader_release(r->val_ld);
        if (rc != 0) {
            snprintf(r->err, sizeof r->err, "validation: %s", e);
            return -1;
        }
        loss_sum += st.loss * st.count;
        correct += st.correct;
        count += st.count;
        int stop = stopping(r);
        if (stop < 0)
            return -1;
        if (stop) {
            out->interrupted = true;
            return 0;
        }
    }
    out->loss = count ? loss_sum / count : NAN;
    out->accuracy = count ? (double)correct / count : NAN;
    return 0;
}

/* Trains every epoch. Returns 0 (done or cancelled: *cancelled says) or -1. */
static int train(run *r, bool *cancelled)
{
    jobcfg *c = &r->cfg;
    float lr = (float)lr_at(&r->lr, r->step);
    int64_t interval = r->steps_per_epoch / REPORTS_PER_EPOCH;
    if (interval < 1)
        interval = 1;
    char e[512];
    *cancelled = false;
    if (r->stopped_early && r->skip == 0)
        return 0;     /* resumed after the epoch that stopped it, before model.safetensors */

    for (int epoch = r->start_epoch; epoch < c->epochs; epoch++) {
        double t_epoch = mono_now(), t_int = t_epoch;
        train_sums *t = &r->sums;
        if (!(epoch == r->start_epoch && r->sums_restored))
            memset(t, 0, sizeof *t);
        long int_images = 0, ep_images = 0;     /* trained by this process: throughput */
        int64_t int_steps = 0, i = 0;
        double ips = 0, secs_per_step = 0;
        int n = 0;

        loader_start_epoch(r->train_ld, epoch);
        r->epoch = epoch;
        r->epoch_step = 0;
        if (epoch == r->start_epoch) {
            /* resuming part-way: the batches trained before come again, unused */
            for (; i < r->skip && (n = loader_next(r->train_ld, r->x, r->labels)) > 0; i++)
                ;
            if (i < r->skip && n < 0)
                goto bad_data;
            r->epoch_step = i;
        }
        const float *bx;
        const int32_t *bl;
        while ((n = loader_next_view(r->train_ld, &bx, &bl)) != 0) {
            net_stats st;
            if (n < 0)
                goto bad_data;
            lr = (float)lr_at(&r->lr, r->step);
            int rc = net_train_step(r->net, bx, bl, n, lr, &st, e, sizeof e);
            loader_release(r->train_ld);
            if (rc != 0) {
                snprintf(r->err, sizeof r->err, "step %lld: %s", (long long)(r->step + 1), e);
                return -1;
            }
            r->step++;
            i++;
            r->epoch_step = i;
            if (stop_after > 0 && r->step == stop_after)
                report_request_stop();
            int_steps++;
            /* A step skipped for overflow (mixed precision's loss scaler) may
             * have a non-finite loss; it does not count in the means. */
            if (!st.skipped || isfinite(st.loss)) {
                t->int_loss += st.loss * st.count;
                t->int_correct += st.correct;
                t->int_count += st.count;
                t->ep_loss += st.loss * st.count;
                t->ep_correct += st.correct;
                t->ep_count += st.count;
            }
            int_images += st.count;
            ep_images += st.count;

            if (report_due(i, r->steps_per_epoch, interval)) {
                double now = mono_now(), dt = now - t_int;
                double loss = t->int_count ? t->int_loss / t->int_count : NAN;
                if (!isfinite(loss) && t->int_count) {
                    snprintf(r->err, sizeof r->err, "training diverged at step %lld: the loss is %g; "
                             "try a lower learning rate", (long long)r->step, loss);
                    return -1;
                }
                ips = dt > 0 ? int_images / dt : 0;
                secs_per_step = int_steps ? dt / int_steps : 0;
                double ep = epoch + (double)i / r->steps_per_epoch;
                if ((t->int_count && (metric(r, "train/loss", loss, r->step, ep) ||
                                      metric(r, "train/accuracy", (double)t->int_correct / t->int_count,
                                          r->step, ep))) ||
                    metric(r, "lr", lr, r->step, ep) ||
                    metric(r, "perf/images_per_sec", ips, r->step, ep) ||
                    amp_metrics(r, r->step, ep) != 0)
                    return -1;
                if (i == r->steps_per_epoch && t->ep_count &&
                    (metric(r, "train/epoch_loss", t->ep_loss / t->ep_count, r->step, ep) ||
                     metric(r, "train/epoch_accuracy", (double)t->ep_correct / t->ep_count, r->step, ep)))
                    return -1;
                progress(r, epoch, ips, eta_of(r, secs_per_step, epoch, false, ips));
                t->int_loss = 0;
                t->int_correct = t->int_count = 0;
                int_images = 0;
                int_steps = 0;
                t_int = now;
            }
            int stop = stopping(r);
            if (stop < 0)
                return -1;
            if (stop) {
                *cancelled = true;
                return stop_cancelled(r);
            }
        }
        double train_secs = mono_now() - t_epoch;

        double t_val = mono_now();
        eval_result v;
        if (validate(r, &v) != 0)
            return -1;
        if (v.interrupted) {
            *cancelled = true;
            return stop_cancelled(r);
        }
        r->last_val_secs = mono_now() - t_val;
        /* lr is not recorded again here: the training report of the epoch's
         * last step (always made, i == steps_per_epoch) recorded it at this
         * step, and a tag is recorded once a step. */
        if (metric(r, "val/loss", v.loss, r->step, epoch + 1) ||
            metric(r, "val/accuracy", v.accuracy, r->step, epoch + 1))
            return -1;
        cJSON *item = epoch_item(epoch + 1, r->step, v.loss, v.accuracy,
                                 t->ep_count ? t->ep_loss / t->ep_count : NAN,
                                 t->ep_count ? (double)t->ep_correct / t->ep_count : NAN);
        if (record_epoch(r, &item) != 0)
            return -1;

        if (c->snapshot_interval > 0 && (epoch + 1) % c->snapshot_interval == 0) {
            char name[64], line[160];
            snprintf(name, sizeof name, "checkpoints/epoch-%d.safetensors", epoch + 1);
            r->epoch = epoch + 1;
            r->epoch_step = 0;
            if (save_checkpoint(r, name, false) != 0)
                return -1;
            r->epoch = epoch;
            snprintf(line, sizeof line, "{\"t\":\"snapshot\",\"epoch\":%d,\"path\":\"%s\"}", epoch + 1, name);
            report_emit(line);
            if (update_snapshots(r, epoch + 1, r->step, name) != 0)
                return -1;
        }
        double epoch_ips = train_secs > 0 ? ep_images / train_secs : 0;
        progress(r, epoch + 1, epoch_ips, eta_of(r, secs_per_step, epoch, true, epoch_ips));
        report_log("epoch %d/%d: train loss %.4f accuracy %.4f | val loss %.4f accuracy %.4f | %.1f s "
              "(train %.1f s at %.0f images/s, validation %.1f s)",
              epoch + 1, c->epochs, t->ep_count ? t->ep_loss / t->ep_count : NAN,
              t->ep_count ? (double)t->ep_correct / t->ep_count : NAN, v.loss, v.accuracy,
              mono_now() - t_epoch, train_secs, epoch_ips, r->last_val_secs);
        early_stop_feed(r, item);
        if (r->stopped_early) {
            r->epoch = epoch + 1;
            return 0;
        }
        int stop = stopping(r);
        if (stop < 0)
            return -1;
        if (stop) {
            *cancelled = true;
            return stop_cancelled(r);
        }
    }
    return 0;
bad_data:
    snprintf(r->err, sizeof r->err, "training data, step %lld: %s", (long long)(r->step + 1),
             loader_error(r->train_ld));
    return -1;
}

/* The data path for the log: the loader's threads, the augmentation, and
 * the images an epoch leaves out (its last short batch). */
static void log_data(const run *r)
{
    const jobcfg_augment *a = &r->cfg.augment;
    int h, w;
    loader_shape(r->train_ld, NULL, &h, &w);
    char aug[200] = "no augmentation";
    size_t k = 0;
    if (a->crop || a->pad)
        k = (size_t)snprintf(aug, sizeof aug, "%dx%d crops%s%.0d%s, random in training, the centre at "
                             "validation", w, h, a->pad ? " of the image padded by " : "", a->pad,
                             a->pad ? " pixels" : "");
    if (a->mirror && k < sizeof aug)
        snprintf(aug + k, sizeof aug - k, "%straining images mirrored at random", k ? "; " : "");
    size_t n = ds_split_count(r->train), used = (size_t)r->steps_per_epoch * (size_t)r->cfg.batch_size;
    report_log("data: %d loader thread%s; %s; an epoch is %lld step%s of %d images%s",
          loader_threads(r->train_ld), loader_threads(r->train_ld) == 1 ? "" : "s", aug,
          (long long)r->steps_per_epoch, r->steps_per_epoch == 1 ? "" : "s", r->cfg.batch_size,
          n < used ? " (one short batch: the training split is smaller than a batch)" : "");
    if (n > used)
        report_log("data: the last %zu of the %zu training images in each epoch's order are left out (no "
              "short batch); the order, and so which ones, changes every epoch", n - used, n);
}

/* "sgd lr 0.01 (fixed) momentum 0.9 ..." for the log. */
static void solver_desc(const jobcfg_solver *s, const lr_policy *lp, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s lr %g (%s", solver_type_name(s->type), s->lr,
                                lr_kind_name(lp->kind));
    if (k < n && lp->warmup_steps)
        k += (size_t)snprintf(buf + k, n - k, ", %lld warm-up steps", (long long)lp->warmup_steps);
    if (k < n && s->type == SOLVER_SGD)
        k += (size_t)snprintf(buf + k, n - k, ") momentum %g%s", s->momentum,
                              s->nesterov ? " nesterov" : "");
    else if (k < n)
        k += (size_t)snprintf(buf + k, n - k, ") betas %g %g eps %g", s->beta1, s->beta2, s->eps);
    if (k < n)
        k += (size_t)snprintf(buf + k, n - k, " weight decay %g%s", s->weight_decay,
                              s->decay_bias ? " (biases too)" : "");
    if (k < n && s->clip_norm > 0)
        k += (size_t)snprintf(buf + k, n - k, " clip %g", s->clip_norm);
    if (k < n && s->larc != LARC_NONE)
        snprintf(buf + k, n - k, " larc %s eta %g", larc_policy_name(s->larc), s->larc_eta);
}

/* kiln worker --gpus 0,1: the GPUs the scheduler chose, read as the engine
 * reads a device list ("cuda:0,1"). */
static int parse_gpus(const char *v, char *err, size_t errlen)
{
    char spec[KILN_MAX_DEVICES * 6 + 8];
    if (snprintf(spec, sizeof spec, "cuda:%s", v) >= (int)sizeof spec)
        return set_err(err, errlen, "--gpus lists too many GPUs");
    return net_devices_parse(spec, &worker_gpus, err, errlen);
}

/* The job's GPUs are the ones the scheduler gave, when it gave them. */
static int apply_worker_gpus(jobcfg *c, char *err, size_t errlen)
{
    if (worker_gpus.count == 0)
        return 0;
    if (c->devices.kind != BACKEND_CUDA || c->devices.count != worker_gpus.count)
        return set_err(err, errlen, "--gpus names %d GPUs but the job asks for %d", worker_gpus.count,
                       c->devices.kind == BACKEND_CUDA ? c->devices.count : 0);
    memcpy(c->devices.ids, worker_gpus.ids, sizeof worker_gpus.ids);
    c->devices.listed = true;
    return 0;
}

/* {"t":"stopped_early","epoch":E,"best_epoch":B,"message":"..."} */
static void emit_stopped_early(const run *r)
{
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o && cJSON_AddStringToObject(o, "t", "stopped_early") &&
        cJSON_AddNumberToObject(o, "epoch", r->es.last_epoch) &&
        cJSON_AddNumberToObject(o, "best_epoch", r->es.best_epoch) &&
        cJSON_AddStringToObject(o, "message", r->stop_msg))
        text = cJSON_PrintUnformatted(o);
    if (text)
        report_emit(text);
    cJSON_free(text);
    cJSON_Delete(o);
}

/* ---- main ----------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln worker --job-dir DIR [--gpus N,...] [--report-file PATH]\n"
            "\n"
            "Runs one training job: reads DIR/job.json, trains, and writes the TensorBoard\n"
            "file, checkpoints/epoch-N.safetensors and model.safetensors into DIR.\n"
            "Reports progress as JSON lines on stdout (for kiln serve's scheduler) and\n"
            "human-readable lines on stderr. SIGTERM stops after the current step with a\n"
            "checkpoint. Normally started by `kiln serve`, not by hand.\n"
            "\n"
            "  --job-dir DIR   the job's folder (<data>/jobs/<id>)\n"
            "  --gpus N,...    the GPUs to train on, given by the scheduler (default: the\n"
            "                  ones job.json names, else the first ones)\n"
            "  --lock-wait S   seconds to wait while another process holds DIR/lock\n"
            "                  (default %d; then it fails without writing anything)\n"
            "  --lock-fd N     the locked DIR/lock, inherited from the scheduler\n"
            "  --report-file PATH  append the JSON-line reports to PATH (flushed line by\n"
            "                  line) instead of writing them on stdout\n"
            "\n"
            "A job of several ranks (nodes, tasks_per_node) runs as one worker per rank,\n"
            "each told its rank by srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or by\n"
            "KILN_RANK, KILN_WORLD_SIZE and KILN_LOCAL_RANK (which win; KILN_RUN_ID names\n"
            "the launch); rank 0 reports and writes, the others only their errors.\n"
            "  --help          this text\n", JOBLOCK_WAIT_DEFAULT_S);
}

/* A rank of a multi-process job on the CPU: OpenMP's idle threads must sleep,
 * not spin. libgomp spins by default, and the ranks' spinning threads on a
 * node's shared cores take them from the ranks that compute (measured here:
 * 2 ranks of a LeNet step 3.7 times slower). libgomp reads OMP_WAIT_POLICY
 * only as it loads, so the worker starts itself again with it set to
 * PASSIVE (unless the user set it): the same arguments, the same process id.
 * Waiting is not arithmetic: the results are the same bits. */
static void exec_with_passive_waits(int argc, char **argv)
{
    worker_rank w;
    char err[256];
    if (getenv("OMP_WAIT_POLICY") || ranks_from_env(&w, err, sizeof err) != 0 || w.size <= 1)
        return;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args || setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) {
        free(args);
        return;
    }
    args[0] = "kiln";
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    execv("/proc/self/exe", args);
    unsetenv("OMP_WAIT_POLICY");          /* no exec: go on as we are */
    free(args);
}

int runner_main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--job-dir") && i + 1 < argc)
            dir = argv[++i];
        else if ((!strcmp(argv[i], "--gpus") || !strcmp(argv[i], "--gpu")) && i + 1 < argc)
        {
            char why[160];
            if (parse_gpus(argv[++i], why, sizeof why) != 0) {
                fprintf(stderr, "kiln worker: --gpus needs GPU numbers, such as 0,1 (%s)\n", why);
                return 2;
            }
        }
        else if ((!strcmp(argv[i], "--lock-fd") || !strcmp(argv[i], "--lock-wait")) && i + 1 < argc) {
            bool fd = !strcmp(argv[i], "--lock-fd");
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 0 || v > (fd ? INT_MAX : 86400)) {
                fprintf(stderr, "kiln worker: %s needs %s, not \"%s\"\n", argv[i - 1],
                        fd ? "a descriptor number" : "seconds (0 to 86400)", argv[i]);
                return 2;
            }
            if (fd)
                lock_fd_given = (int)v;
            else
                lock_wait_s = (int)v;
        }
        else if (!strcmp(argv[i], "--report-file") && i + 1 < argc)
            report_path = argv[++i];
        else if (!strncmp(argv[i], "--job-dir=", 10))
            dir = argv[i] + 10;
        else if (i > 0 && argv[i][0] == '-') {
            fprintf(stderr, "kiln worker: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    worker_prio_lower("worker");          /* kept across the exec below */
    exec_with_passive_waits(argc, argv);
    return runner_run(dir, false);
}

/* Holds the job folder's lock for the rest of this process: the one given
 * (--lock-fd) or one taken here. Returns the descriptor, or -1 with err set. */
static int lock_job_dir(const char *dir, char *err, size_t errlen)
{
    if (lock_fd_given >= 0)
        return joblock_adopt(dir, lock_fd_given, err, errlen) == 0 ? lock_fd_given : -1;
    int fd = -1;
    pid_t holder = 0;
    int rc = joblock_take(dir, lock_wait_s * 1000, &fd, &holder, err, errlen);
    if (rc == JOBLOCK_BUSY) {
        char who[48] = "another process";
        if (holder > 0)
            snprintf(who, sizeof who, "another process (pid %ld)", (long)holder);
        set_err(err, errlen, "the job folder %s is in use: %s holds its lock (%s/%s) and still "
                "had it after %d s; two processes never write one job folder at once, so this one "
                "stops without writing anything", dir, who, dir, JOBLOCK_FILE, lock_wait_s);
    }
    return rc == 0 ? fd : -1;
}

int runner_run(const char *dir, bool human_output)
{
    report_start(human_output ? "kiln train" : NULL);
    const char *sa = getenv("KILN_STOP_AFTER_STEP");
    stop_after = sa ? strtoll(sa, NULL, 10) : 0;

    run r;
    memset(&r, 0, sizeof r);
    r.dir = dir;
    char err[1024];
    int status = 1;
    tb_status end = TB_STATUS_UNKNOWN;   /* what session_end_info says at out: (unknown: none) */

    if (ranks_from_env(&me, err, sizeof err) != 0) {
        report_error(err);
        return 1;
    }
    /* Ranks talk over sockets (Gloo): a peer that died must make a send fail
     * with EPIPE, which the communicator reports as "another rank failed or
     * is gone", not kill this rank with SIGPIPE before it can say so. */
    if (me.size > 1)
        signal(SIGPIPE, SIG_IGN);
    r.writer = me.rank == 0;
    if (!r.writer)
        report_quiet(me.rank);
    else if (report_path && !human_output && report_to_file(report_path, err, sizeof err) != 0) {
        report_error(err);
        return 1;
    }
    /* rank 0 holds the folder's lock for all the ranks */
    int lock_fd = r.writer ? lock_job_dir(dir, err, sizeof err) : -2;
    if (lock_fd == -1) {
        report_error(err);
        return 1;
    }
    api_error e;
    if (jobcfg_load(dir, &r.cfg, &e) != 0) {
        report_error(e.message);
        goto out;
    }
    if (apply_worker_gpus(&r.cfg, err, sizeof err) != 0) {
        report_error(err);
        goto out;
    }
    double t0 = mono_now();
    if (open_run(&r, err, sizeof err) != 0) {
        report_error(err);
        goto out;
    }
    report_emit("{\"t\":\"status\",\"status\":\"running\"}");
    char sdesc[256];
    solver_desc(&r.cfg.solver, &r.lr, sdesc, sizeof sdesc);
    char where[KILN_MAX_DEVICES * 6 + 16];
    net_devices devices = jobcfg_net_devices(&r.cfg);
    if (devices.kind == BACKEND_CPU && devices.count == 1)
        snprintf(where, sizeof where, "cpu");
    else
        net_devices_format(&devices, where, sizeof where);
    report_log("job %lld: %s (%zu parameters) on %s, %s: %zu train / %zu val images of %dx%dx%d, "
          "%d classes; %d epoch%s x %lld steps, batch %d, %s, seed %llu; ready in %.1f s",
          (long long)r.cfg.id, r.cfg.network_name, net_param_count(r.net), where,
          precision_name(r.cfg.precision), ds_split_count(r.train), ds_split_count(r.val), r.info.c, r.info.h, r.info.w,
          r.info.nclasses, r.cfg.epochs, r.cfg.epochs == 1 ? "" : "s", (long long)r.steps_per_epoch, r.cfg.batch_size, sdesc,
          (unsigned long long)r.cfg.seed, mono_now() - t0);
    log_data(&r);
    int ndev = net_device_count(r.net);
    if (me.size > 1)
        report_log("data parallel across %d processes (ranks from %s, run %s, on %d node%s): each "
              "trains on up to %d images of every batch, gradients summed across them; this is "
              "rank 0, which writes the job's files", me.size, me.source, me.run_id,
              r.cfg.nodes, r.cfg.nodes == 1 ? "" : "s", (r.cfg.batch_size + me.size - 1) / me.size);
    else if (ndev > 1)
        report_log("data parallel on %d devices: up to %d images of each batch on each, gradients "
              "summed across them, every replica making the same update", ndev,
              (r.cfg.batch_size + ndev - 1) / ndev);
    if (r.cfg.precision == PREC_AMP_FP16 && r.cfg.devices.kind == BACKEND_CPU)
        report_log("amp-fp16 on the CPU: this CPU has no FP16 arithmetic, so FP16 storage is emulated "
              "(every 16-bit tensor rounded through FP16, the arithmetic in FP32): FP16's numerics "
              "and loss scaling, not its speed");
    else if (r.cfg.precision == PREC_AMP_BF16 && r.cfg.devices.kind == BACKEND_CPU)
        report_log("amp-bf16 on the CPU: convolutions and dense layers run oneDNN's bfloat16 kernels "
              "with FP32 accumulation; weights and optimizer state stay FP32");
    if (r.cfg.precision != PREC_FP32) {
        net_amp_state a;
        net_amp_get(r.net, &a);
        if (a.dynamic)
            report_log("dynamic loss scaling: scale %g, halved on overflow (the step skipped), doubled "
                  "after %d clean steps", a.scale, AMP_GROWTH_INTERVAL);
        else
            report_log("no loss scaling (bfloat16 has FP32's range; ask for \"loss_scaling\": "
                  "\"dynamic\" to add it)");
    }
    int stop = stopping(&r);
    if (stop < 0) {
        report_error(r.err);
        goto out;
    }
    if (stop) {
        stop_cancelled(&r);
        status = 0;
        goto out;
    }

    end = TB_STATUS_FAILURE;        /* from here an error ends the job's session */
    bool cancelled = false;
    if (train(&r, &cancelled) != 0) {
        report_error(r.err);
        goto out;
    }
    if (cancelled) {
        end = TB_STATUS_UNKNOWN;
        status = 0;
        goto out;
    }
    if (save_checkpoint(&r, LAYOUT_MODEL, true) != 0) {
        report_error(r.err);
        goto out;
    }
    int trained = r.stopped_early ? r.es.last_epoch : r.cfg.epochs;
    if (mark_final(&r, trained) != 0) {
        report_error(r.err);
        goto out;
    }
    if (r.stopped_early) {
        report_log("%s", r.stop_msg);
        emit_stopped_early(&r);
    }
    report_log("done: %d epoch%s in %.1f s; saved model.safetensors", trained, trained == 1 ? "" : "s",
          mono_now() - t0);
    end = TB_STATUS_UNKNOWN;
    if (r.tb && tb_hparams_end(r.tb, r.step, TB_STATUS_SUCCESS, wall_now(), err, sizeof err) != 0) {
        report_error(err);
        goto out;
    }
    report_emit("{\"t\":\"done\"}");
    status = 0;
out:
    if (end != TB_STATUS_UNKNOWN && r.tb)
        tb_hparams_end(r.tb, r.step, end, wall_now(), err, sizeof err);   /* the error is reported */
    close_run(&r);
    if (lock_fd >= 0)
        close(lock_fd);        /* everything is written: the folder is free */
    return status;
}
