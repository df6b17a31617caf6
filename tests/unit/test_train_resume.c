/* Resuming a job (jobs/runner.c through runner_run, as `kiln worker` and
 * `kiln train` run it): a run cancelled part-way through an epoch, or
 * stopped after an epoch's checkpoint, and then run again in the same folder
 * ends with the same model, bit for bit, as a run never interrupted; with
 * Adam, clipping and a warm-up cosine policy, so that the optimizer state,
 * its step count and the policy's position all have to come back.
 *
 * And the metrics a run records (jobs/runner.c): the epoch means against
 * evaluation of the same weights, the report schedule, and TensorBoard's
 * view of a resumed run's event files (SessionLog START, HParams). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/dataset.h"
#include "engine/fileio.h"
#include "engine/rng.h"
#include "jobs/jobspec.h"
#include "jobs/runner.h"
#include "jobs/tbevents.h"      /* crc32c, tb_masked_crc */
#include "hparams.pb-c.h"       /* Tensorboard__Hparams__HParamsPluginData */
#include "struct.pb-c.h"        /* Google__Protobuf__Value */
#include "tensorboard.pb-c.h"   /* Tensorflow__Event */

static char root[64];

/* 4 classes of 1x8x8 images: a bright quadrant under noise. */
static void write_split(const char *path, int count, uint64_t seed)
{
    char err[256];
    rng r;
    rng_seed(&r, seed);
    ds_writer *wr = ds_writer_open(path, 1, 8, 8, err, sizeof err);
    assert_non_null(wr);
    for (int i = 0; i < count; i++) {
        uint8_t img[64];
        int c = i % 4;
        for (int k = 0; k < 64; k++) {
            int q = (k / 8 >= 4) * 2 + (k % 8 >= 4);
            double v = (q == c ? 160 : 60) + 40 * rng_normal(&r);
            img[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        assert_int_equal(ds_writer_add(wr, img, c, err, sizeof err), 0);
    }
    assert_int_equal(ds_writer_commit(wr, err, sizeof err), 0);
}

static int setup(void **state)
{
    char path[128], err[256];
    snprintf(root, sizeof root, "/tmp/kiln-resume-test-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/ds", root);
    if (fio_mkdir_p(path) != 0)
        return -1;
    char *names[] = { "a", "b", "c", "d" };
    ds_info info = { .c = 1, .h = 8, .w = 8, .nclasses = 4, .classes = names,
                     .train_count = 120, .val_count = 40, .mean = { 100 }, .resize = "squash" };
    if (ds_info_save(path, &info, "test", err, sizeof err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/ds/train.kds", root);
    write_split(path, 120, 1);
    snprintf(path, sizeof path, "%s/ds/val.kds", root);
    write_split(path, 40, 2);
    return 0;
}

static int teardown(void **state)
{
    return fio_rm_rf(root);
}

/* The second convolution (48 -> 48, 3x3) runs oneDNN's Winograd in all its
 * passes and the fourth (16 -> 16) kiln's own (engine/cpu/conv.c,
 * cpu_conv_winograd and cpu_conv_wino16), whose resumptions must be as exact
 * as the direct kernel's. */
static const char *REQUEST =
    "{\"network\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 48, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"},"
    "  {\"type\": \"conv2d\", \"filters\": 48, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"},"
    "  {\"type\": \"conv2d\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"},"
    "  {\"type\": \"conv2d\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"flatten\"},"
    "  {\"type\": \"dropout\", \"rate\": 0.2},"
    "  {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"epochs\": 3, \"batch_size\": 16, \"seed\": 3,"
    " \"solver\": {\"type\": \"adam\", \"lr\": 0.01, \"clip_norm\": 1, \"weight_decay\": 0.001},"
    " \"lr_policy\": {\"type\": \"cosine\", \"warmup_steps\": 5}}";

/* A job in dir for request on the dataset root/dsname; replicas > 1 trains
 * data parallel on replicas of the net on the one CPU (job.json's
 * "replicas"). */
static void make_job_req(const char *dir, const char *request, const char *dsname, int replicas)
{
    char ds[128], path[160], err[256];
    snprintf(ds, sizeof ds, "%s/%s", root, dsname);
    cJSON *req = cJSON_Parse(request);
    assert_non_null(req);
    api_error e;
    jobcfg c;
    if (jobspec_resolve_local(req, ds, &c, &e) != 0)
        fail_msg("%s: %s", e.code, e.message);
    c.devices.count = replicas;
    cJSON *cfg = jobcfg_to_json(&c);
    assert_non_null(cfg);
    jobcfg_free(&c);
    char *text = cJSON_Print(cfg);
    assert_int_equal(fio_mkdir_p(dir), 0);
    snprintf(path, sizeof path, "%s/job.json", dir);
    assert_int_equal(fio_write_atomic(path, text, strlen(text), err, sizeof err), 0);
    cJSON_free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(req);
}

/* A job in dir for REQUEST on root/ds. */
static void make_job_on(const char *dir, int replicas)
{
    make_job_req(dir, REQUEST, "ds", replicas);
}

static void make_job(const char *dir)
{
    make_job_on(dir, 1);
}

/* runner_run in a child process (its signal handlers and statics stay
 * there), stopping after step stop (0: never). Returns its exit status. */
static int run_job(const char *dir, int stop)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(3);
        char s[16];
        snprintf(s, sizeof s, "%d", stop);
        if (stop)
            setenv("KILN_STOP_AFTER_STEP", s, 1);
        else
            unsetenv("KILN_STOP_AFTER_STEP");
        _exit(runner_run(dir, true));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void same_file(const char *a, const char *b)
{
    char err[256];
    size_t la, lb;
    char *x = fio_read_file(a, 1 << 24, &la, err, sizeof err);
    char *y = fio_read_file(b, 1 << 24, &lb, err, sizeof err);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

static bool exists(const char *dir, const char *name)
{
    char p[256];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

static void test_resume_is_exact(void **state)
{
    char a[128], b[128], c[128], pa[160], pb[160], pc[160];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    snprintf(c, sizeof c, "%s/c", root);
    make_job(a);
    make_job(b);
    make_job(c);

    assert_int_equal(run_job(a, 0), 0);                    /* never interrupted */
    assert_true(exists(a, "model.safetensors"));
    assert_true(exists(a, "checkpoints/epoch-3.safetensors"));

    /* 7 steps per epoch (120 / 16, the short batch dropped): cancelled during
     * the second epoch, then resumed */
    assert_int_equal(run_job(b, 11), 0);
    assert_true(exists(b, "checkpoints/step-11.safetensors"));
    assert_false(exists(b, "model.safetensors"));
    char ckdir[200], ck[256], err[256];
    ckpt_info ci;
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", b);
    assert_int_equal(ckpt_latest(ckdir, ck, sizeof ck, &ci, err, sizeof err), 1);
    assert_int_equal(ci.step, 11);
    assert_int_equal(ci.epoch, 1);
    assert_int_equal(ci.epoch_step, 4);
    assert_int_equal(run_job(b, 0), 0);

    /* stopped at an epoch's end (after its checkpoint), then resumed */
    assert_int_equal(run_job(c, 14), 0);
    assert_int_equal(run_job(c, 0), 0);

    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    snprintf(pc, sizeof pc, "%s/model.safetensors", c);
    same_file(pa, pb);
    same_file(pa, pc);
    snprintf(pa, sizeof pa, "%s/checkpoints/epoch-3.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/epoch-3.safetensors", b);
    same_file(pa, pb);                  /* optimizer state too */
}

/* The same on two replicas (the CPU's stand-in for two GPUs, engine/net.h):
 * the worker trains data parallel, its checkpoints restore every replica,
 * and a resumed run ends bit for bit where an uninterrupted one does. */
static void test_resume_data_parallel(void **state)
{
    (void)state;
    char a[128], b[128], pa[160], pb[160];
    snprintf(a, sizeof a, "%s/dp-a", root);
    snprintf(b, sizeof b, "%s/dp-b", root);
    make_job_on(a, 2);
    make_job_on(b, 2);
    assert_int_equal(run_job(a, 0), 0);
    assert_int_equal(run_job(b, 11), 0);
    assert_false(exists(b, "model.safetensors"));
    assert_int_equal(run_job(b, 0), 0);
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    same_file(pa, pb);
    snprintf(pa, sizeof pa, "%s/checkpoints/epoch-3.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/epoch-3.safetensors", b);
    same_file(pa, pb);
}

/* A checkpoint from another seed is refused, not silently mixed in. */
static void test_foreign_checkpoint_refused(void **state)
{
    char a[128], d[128], src[200], dst[200], err[256];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(d, sizeof d, "%s/d", root);
    make_job(a);
    assert_int_equal(run_job(a, 0), 0);
    make_job(d);
    /* the same request with another seed */
    snprintf(dst, sizeof dst, "%s/job.json", d);
    size_t len;
    char *text = fio_read_file(dst, 1 << 20, &len, err, sizeof err);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "seed"), 4);
    text = cJSON_Print(cfg);
    assert_int_equal(fio_write_atomic(dst, text, strlen(text), err, sizeof err), 0);
    cJSON_free(text);
    cJSON_Delete(cfg);
    snprintf(src, sizeof src, "%s/checkpoints/epoch-1.safetensors", a);
    text = fio_read_file(src, 1 << 24, &len, err, sizeof err);
    snprintf(dst, sizeof dst, "%s/checkpoints", d);
    assert_int_equal(fio_mkdir_p(dst), 0);
    snprintf(dst, sizeof dst, "%s/checkpoints/epoch-1.safetensors", d);
    assert_int_equal(fio_write_atomic(dst, text, len, err, sizeof err), 0);
    free(text);
    assert_int_equal(run_job(d, 0), 1);
    assert_false(exists(d, "model.safetensors"));
}

/* ---- the metrics and TensorBoard's view of them ----------------------------- */

/* 123 images, batch 3: 41 steps an epoch, none left out; the report
 * interval is 41 / 20 = 2 steps, so the epoch's last report covers 3. */
#define M_IMAGES 123
#define M_BATCH 3
#define M_STEPS 41

/* A network with no dropout (a training step's loss is what evaluation of
 * the same weights gives) and a learning rate too small to move a weight:
 * every step's loss is the loss of the initial weights on its images. */
static const char *FROZEN_REQUEST =
    "{\"network\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"epochs\": 1, \"batch_size\": 3, \"seed\": 5,"
    " \"solver\": {\"type\": \"sgd\", \"lr\": 1e-30, \"momentum\": 0}}";

static const char *TRAINING_REQUEST =
    "{\"network\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"epochs\": 2, \"batch_size\": 3, \"seed\": 6,"
    " \"solver\": {\"type\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.9}}";

/* root/dsm: M_IMAGES training images, and the same images as validation. */
static void make_metrics_dataset(void)
{
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/dsm", root);
    if (access(path, F_OK) == 0)
        return;
    assert_int_equal(fio_mkdir_p(path), 0);
    char *names[] = { "a", "b", "c", "d" };
    ds_info info = { .c = 1, .h = 8, .w = 8, .nclasses = 4, .classes = names,
                     .train_count = M_IMAGES, .val_count = M_IMAGES, .mean = { 100 }, .resize = "squash" };
    assert_int_equal(ds_info_save(path, &info, "test", err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/dsm/train.kds", root);
    write_split(path, M_IMAGES, 7);
    snprintf(path, sizeof path, "%s/dsm/val.kds", root);
    write_split(path, M_IMAGES, 7);
}

/* One event as TensorBoard keeps it: a scalar, or a summary with plugin
 * metadata (HParams), by tag and step. */
typedef struct tb_item {
    char tag[64];
    int64_t step;
    double value;
    int file;                   /* index of the file, in name order */
    int status;                 /* session_end_info's status, else -1 */
} tb_item;

typedef struct tb_view {
    tb_item items[4096];
    int n;
    int files;
    int starts;                 /* SessionLog START events seen */
    int64_t start_step[8];
    Tensorboard__Hparams__HParamsPluginData *start_info;   /* the first session_start_info */
} tb_view;

static void tb_view_clear(tb_view *v)
{
    if (v->start_info)
        tensorboard__hparams__hparams_plugin_data__free_unpacked(v->start_info, NULL);
    v->start_info = NULL;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The session_end_info status in a hparams summary's content, else -1. */
static int end_status(const Tensorflow__Summary__Value *v)
{
    if (!v->metadata || !v->metadata->plugin_data || !v->metadata->plugin_data->has_content)
        return -1;
    const ProtobufCBinaryData *c = &v->metadata->plugin_data->content;
    Tensorboard__Hparams__HParamsPluginData *d =
        tensorboard__hparams__hparams_plugin_data__unpack(NULL, c->len, c->data);
    assert_non_null(d);
    int st = d->data_case == TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO
                 ? (int)d->session_end_info->status : -1;
    tensorboard__hparams__hparams_plugin_data__free_unpacked(d, NULL);
    return st;
}

/* Reads every event file of dir in TensorBoard's order (by file name) the
 * way its EventAccumulator does with purge_orphaned_data (the default):
 * with file_version "brain.Event:2" a SessionLog START event purges
 * everything read before whose step >= the START's step; purge false keeps
 * all (what a reader without the rule would show). */
static void tb_read(const char *dir, tb_view *v, bool purge)
{
    tb_view_clear(v);
    memset(v, 0, sizeof *v);
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[16];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, "events.out.tfevents.", 20)) {
            assert_true(nn < 16);
            names[nn++] = strdup(de->d_name);
        }
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], name_cmp);
    v->files = nn;
    for (int f = 0; f < nn; f++) {
        char path[300], err[256];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        uint8_t *buf = (uint8_t *)fio_read_file(path, 1 << 24, &len, err, sizeof err);
        assert_non_null(buf);
        double version = 0;
        for (size_t off = 0; off < len;) {
            assert_true(len - off >= 16);
            uint64_t n = le64(buf + off);
            assert_int_equal(le32(buf + off + 8), tb_masked_crc(crc32c(0, buf + off, 8)));
            assert_true(n <= len - off - 16);
            const uint8_t *data = buf + off + 12;
            assert_int_equal(le32(data + n), tb_masked_crc(crc32c(0, data, (size_t)n)));
            off += 12 + (size_t)n + 4;
            Tensorflow__Event *e = tensorflow__event__unpack(NULL, (size_t)n, data);
            assert_non_null(e);
            if (e->what_case == TENSORFLOW__EVENT__WHAT_FILE_VERSION) {
                assert_int_equal(strncmp(e->file_version, "brain.Event:", 12), 0);
                version = atof(e->file_version + 12);
            } else if (e->what_case == TENSORFLOW__EVENT__WHAT_SESSION_LOG) {
                if (e->session_log->status == TENSORFLOW__SESSION_LOG__SESSION_STATUS__START) {
                    assert_true(v->starts < 8);
                    v->start_step[v->starts++] = e->step;
                    if (purge && version >= 2) {        /* _CheckForRestartAndMaybePurge */
                        int k = 0;
                        for (int i = 0; i < v->n; i++)
                            if (v->items[i].step < e->step)   /* _NotExpired */
                                v->items[k++] = v->items[i];
                        v->n = k;
                    }
                }
            } else if (e->what_case == TENSORFLOW__EVENT__WHAT_SUMMARY) {
                for (size_t i = 0; i < e->summary->n_value; i++) {
                    const Tensorflow__Summary__Value *sv = e->summary->value[i];
                    assert_true(v->n < 4096);
                    tb_item *it = &v->items[v->n++];
                    snprintf(it->tag, sizeof it->tag, "%s", sv->tag);
                    it->step = e->step;
                    it->file = f;
                    it->value = sv->value_case == TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE
                                    ? sv->simple_value : NAN;
                    it->status = end_status(sv);
                    if (!v->start_info && !strcmp(sv->tag, "_hparams_/session_start_info")) {
                        const ProtobufCBinaryData *c = &sv->metadata->plugin_data->content;
                        v->start_info = tensorboard__hparams__hparams_plugin_data__unpack(NULL, c->len, c->data);
                        assert_non_null(v->start_info);
                    }
                }
            }
            tensorflow__event__free_unpacked(e, NULL);
        }
        free(buf);
        free(names[f]);
    }
}

/* The items of tag in v, in the order read; returns the count. */
static int tb_series(const tb_view *v, const char *tag, const tb_item **out, int max)
{
    int k = 0;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->items[i].tag, tag)) {
            assert_true(k < max);
            out[k++] = &v->items[i];
        }
    return k;
}

/* Each (tag, step) of v at most once. */
static void once_each(const tb_view *v)
{
    for (int i = 0; i < v->n; i++)
        for (int j = i + 1; j < v->n; j++)
            if (!strcmp(v->items[i].tag, v->items[j].tag) && v->items[i].step == v->items[j].step)
                fail_msg("%s at step %lld twice (files %d and %d)", v->items[i].tag,
                         (long long)v->items[i].step, v->items[i].file, v->items[j].file);
}

/* The train reports' steps of `epochs` epochs of M_STEPS: every 2 steps,
 * the last report of an epoch after 3 (38 -> 41). */
static int expected_train_steps(int epochs, int64_t *out)
{
    int k = 0;
    for (int e = 0; e < epochs; e++) {
        for (int i = 2; i <= 38; i += 2)
            out[k++] = (int64_t)e * M_STEPS + i;
        out[k++] = (int64_t)e * M_STEPS + M_STEPS;
    }
    return k;
}

static void steps_are(const tb_view *v, const char *tag, const int64_t *steps, int n)
{
    const tb_item *s[256];
    int k = tb_series(v, tag, s, 256);
    if (k != n)
        fail_msg("%s: %d values, expected %d", tag, k, n);
    for (int i = 0; i < n; i++)
        if (s[i]->step != steps[i])
            fail_msg("%s: value %d at step %lld, expected %lld", tag, i, (long long)s[i]->step,
                     (long long)steps[i]);
}

static double value_at(const tb_view *v, const char *tag, int64_t step)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->items[i].tag, tag) && v->items[i].step == step)
            return v->items[i].value;
    fail_msg("no %s at step %lld", tag, (long long)step);
    return NAN;
}

/* The honest train metrics, checked against what evaluation gives for the
 * same weights: with the weights frozen and validation seeing the training
 * images, the epoch's image-weighted train loss and accuracy are the
 * validation loss and accuracy (computed by net_eval in file order, not by
 * the training steps in shuffled order); the interval means, weighted by
 * their images, add up to the epoch's; no interval is shorter than the
 * rule allows; and each tag is recorded once a step. */
static void test_epoch_means(void **state)
{
    (void)state;
    char dir[128];
    make_metrics_dataset();
    snprintf(dir, sizeof dir, "%s/means", root);
    make_job_req(dir, FROZEN_REQUEST, "dsm", 1);
    assert_int_equal(run_job(dir, 0), 0);

    tb_view *v = calloc(1, sizeof *v);
    assert_non_null(v);
    tb_read(dir, v, true);
    assert_int_equal(v->files, 1);
    assert_int_equal(v->starts, 0);               /* a fresh run: no SessionLog */
    once_each(v);

    int64_t steps[64];
    int ns = expected_train_steps(1, steps);
    steps_are(v, "train/loss", steps, ns);
    steps_are(v, "train/accuracy", steps, ns);
    steps_are(v, "lr", steps, ns);
    int64_t end[1] = { M_STEPS };
    steps_are(v, "train/epoch_loss", end, 1);
    steps_are(v, "train/epoch_accuracy", end, 1);
    steps_are(v, "val/loss", end, 1);

    /* every image once: the intervals' means weighted by their images */
    double loss_sum = 0, acc_sum = 0;
    int64_t prev = 0;
    for (int i = 0; i < ns; i++) {
        int64_t k = steps[i] - prev;
        assert_true(k >= 2 && k <= 3);
        loss_sum += value_at(v, "train/loss", steps[i]) * (double)(k * M_BATCH);
        acc_sum += value_at(v, "train/accuracy", steps[i]) * (double)(k * M_BATCH);
        prev = steps[i];
    }
    assert_int_equal(prev, M_STEPS);
    double ep_loss = value_at(v, "train/epoch_loss", M_STEPS);
    double ep_acc = value_at(v, "train/epoch_accuracy", M_STEPS);
    double val_loss = value_at(v, "val/loss", M_STEPS);
    double val_acc = value_at(v, "val/accuracy", M_STEPS);
    /* float32 values in the file: 1e-6 relative is far above their rounding
     * and far below what a missed or doubled batch moves (1/41 of a mean) */
    assert_true(fabs(loss_sum / M_IMAGES - ep_loss) <= 1e-6 * ep_loss);
    assert_true(fabs(acc_sum / M_IMAGES - ep_acc) <= 1e-6);
    assert_true(fabs(ep_loss - val_loss) <= 1e-5 * val_loss);
    assert_true(ep_acc == val_acc);
    /* the last report is not the epoch: intervals differ from the mean */
    assert_true(fabs(value_at(v, "train/loss", M_STEPS) - ep_loss) > 1e-4);

    /* epochs.json has the same figures */
    char path[200], err[256];
    snprintf(path, sizeof path, "%s/epochs.json", dir);
    char *text = fio_read_file(path, 1 << 20, NULL, err, sizeof err);
    assert_non_null(text);
    cJSON *rec = cJSON_Parse(text);
    free(text);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(rec, "items");
    assert_int_equal(cJSON_GetArraySize(items), 1);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, 0), "metrics");
    assert_non_null(m);
    assert_true((float)cJSON_GetObjectItemCaseSensitive(m, "train/loss")->valuedouble == (float)ep_loss);
    assert_true((float)cJSON_GetObjectItemCaseSensitive(m, "train/accuracy")->valuedouble == (float)ep_acc);
    cJSON_Delete(rec);

    /* the job's end, for TensorBoard's HParams: success, once, at the last step */
    const tb_item *s[4];
    assert_int_equal(tb_series(v, "_hparams_/session_end_info", s, 4), 1);
    assert_int_equal(s[0]->status, TENSORBOARD__HPARAMS__STATUS__STATUS_SUCCESS);
    assert_int_equal(s[0]->step, M_STEPS);

    /* and its hyper-parameters, as job.json resolved them */
    assert_non_null(v->start_info);
    assert_int_equal(v->start_info->data_case,
                     TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO);
    const Tensorboard__Hparams__SessionStartInfo *si = v->start_info->session_start_info;
    int found = 0;
    for (size_t i = 0; i < si->n_hparams; i++) {
        const char *k = si->hparams[i]->key;
        const Google__Protobuf__Value *hv = si->hparams[i]->value;
        if (!strcmp(k, "solver.lr") || !strcmp(k, "batch_size") || !strcmp(k, "epochs") ||
            !strcmp(k, "seed") || !strcmp(k, "solver.momentum")) {
            assert_int_equal(hv->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
            double want = !strcmp(k, "solver.lr") ? 1e-30 : !strcmp(k, "batch_size") ? M_BATCH
                          : !strcmp(k, "epochs") ? 1 : !strcmp(k, "seed") ? 5 : 0;
            assert_true(hv->number_value == want);
            found++;
        } else if (!strcmp(k, "solver.type") || !strcmp(k, "precision") || !strcmp(k, "lr_policy.type")) {
            assert_int_equal(hv->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
            assert_string_equal(hv->string_value, !strcmp(k, "solver.type") ? "sgd"
                                                  : !strcmp(k, "precision") ? "fp32" : "fixed");
            found++;
        } else if (!strcmp(k, "augmentation.mirror")) {
            assert_int_equal(hv->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
            assert_false(hv->bool_value);
            found++;
        }
        assert_null(strstr(k, "dataset_dir"));
        assert_int_not_equal(strncmp(k, "network.", 8), 0);
    }
    assert_int_equal(found, 9);
    tb_view_clear(v);
    free(v);
}

/* Resumed after a kill: the interrupted run trained and recorded 9 steps
 * past its last checkpoint (epoch 1, step 41); the resumed run's event file
 * begins with a SessionLog START at step 42. Read in TensorBoard's order
 * with its purge rule, every (tag, step) appears once, the steps are the
 * report schedule's with none missing, and the values are an uninterrupted
 * run's (resume is bit for bit). */
static void test_resume_tensorboard(void **state)
{
    (void)state;
    char a[128], b[128], ck[200];
    make_metrics_dataset();
    snprintf(a, sizeof a, "%s/tb-a", root);
    snprintf(b, sizeof b, "%s/tb-b", root);
    make_job_req(a, TRAINING_REQUEST, "dsm", 1);
    make_job_req(b, TRAINING_REQUEST, "dsm", 1);
    assert_int_equal(run_job(a, 0), 0);

    assert_int_equal(run_job(b, 50), 0);
    /* a kill at step 50 leaves no step-50 checkpoint: what it leaves is this */
    snprintf(ck, sizeof ck, "%s/checkpoints/step-50.safetensors", b);
    assert_int_equal(unlink(ck), 0);
    assert_true(exists(b, "checkpoints/epoch-1.safetensors"));
    tb_view *v = calloc(1, sizeof *v);
    assert_non_null(v);
    tb_read(b, v, true);
    const tb_item *s[64];
    assert_int_equal(tb_series(v, "_hparams_/session_end_info", s, 64), 0);   /* a cancel: none */
    sleep(1);     /* not needed for names (tb_open takes the next free second), but a later name */
    assert_int_equal(run_job(b, 0), 0);

    tb_read(b, v, false);                  /* without the rule: steps 42..50 twice */
    assert_int_equal(v->files, 2);
    assert_int_equal(v->starts, 1);
    assert_int_equal(v->start_step[0], M_STEPS + 1);
    int twice = 0;
    for (int i = 0; i < v->n; i++)
        if (v->items[i].file == 0 && v->items[i].step > M_STEPS && v->items[i].step <= 50)
            twice++;
    assert_true(twice >= 4 * 4);           /* 43, 45, 47, 49: train/loss, accuracy, lr, perf */

    tb_read(b, v, true);
    once_each(v);
    int64_t steps[64];
    int ns = expected_train_steps(2, steps);
    static const char *const train_tags[] = { "train/loss", "train/accuracy", "lr", "perf/images_per_sec" };
    for (size_t t = 0; t < 4; t++)
        steps_are(v, train_tags[t], steps, ns);
    int64_t ends[2] = { M_STEPS, 2 * M_STEPS };
    static const char *const epoch_tags[] = { "train/epoch_loss", "train/epoch_accuracy", "val/loss",
                                              "val/accuracy" };
    for (size_t t = 0; t < 4; t++)
        steps_are(v, epoch_tags[t], ends, 2);
    /* HParams: each file's session start at its first step, the end once */
    int64_t starts[2] = { 0, M_STEPS + 1 };
    steps_are(v, "_hparams_/session_start_info", starts, 2);
    steps_are(v, "_hparams_/experiment", starts, 2);
    assert_int_equal(tb_series(v, "_hparams_/session_end_info", s, 64), 1);
    assert_int_equal(s[0]->status, TENSORBOARD__HPARAMS__STATUS__STATUS_SUCCESS);
    assert_int_equal(s[0]->file, 1);

    tb_view *u = calloc(1, sizeof *u);
    assert_non_null(u);
    tb_read(a, u, true);
    assert_int_equal(u->files, 1);
    for (int i = 0; i < ns; i++) {
        assert_true(value_at(v, "train/loss", steps[i]) == value_at(u, "train/loss", steps[i]));
        assert_true(value_at(v, "train/accuracy", steps[i]) == value_at(u, "train/accuracy", steps[i]));
    }
    for (size_t t = 0; t < 4; t++)
        for (int e = 0; e < 2; e++)
            assert_true(value_at(v, epoch_tags[t], ends[e]) == value_at(u, epoch_tags[t], ends[e]));

    /* Cancelled at step 50 (a checkpoint there, with the train sums beside
     * it) and resumed part-way through epoch 2: the report at step 51 covers
     * steps 50 and 51 and the epoch's means all of its 41 steps, as in the
     * uninterrupted run, though step 50 was trained by the first process. */
    char c[128];
    snprintf(c, sizeof c, "%s/tb-c", root);
    make_job_req(c, TRAINING_REQUEST, "dsm", 1);
    assert_int_equal(run_job(c, 50), 0);
    assert_true(exists(c, "checkpoints/step-50.safetensors"));
    assert_true(exists(c, "checkpoints/step-50.means.json"));
    assert_int_equal(run_job(c, 0), 0);
    tb_read(c, v, true);
    assert_int_equal(v->files, 2);
    assert_int_equal(v->starts, 1);
    assert_int_equal(v->start_step[0], 51);
    once_each(v);
    for (size_t t = 0; t < 4; t++)
        steps_are(v, train_tags[t], steps, ns);
    for (int i = 0; i < ns; i++) {
        assert_true(value_at(v, "train/loss", steps[i]) == value_at(u, "train/loss", steps[i]));
        assert_true(value_at(v, "train/accuracy", steps[i]) == value_at(u, "train/accuracy", steps[i]));
    }
    for (size_t t = 0; t < 4; t++)
        for (int e = 0; e < 2; e++)
            assert_true(value_at(v, epoch_tags[t], ends[e]) == value_at(u, epoch_tags[t], ends[e]));
    tb_view_clear(u);
    tb_view_clear(v);
    free(u);
    free(v);
}

/* train_main in a child, stdout and stderr to files of root. */
static int run_cli(char **argv, int argc)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char out[128], errf[128];
        snprintf(out, sizeof out, "%s/cli.out", root);
        snprintf(errf, sizeof errf, "%s/cli.err", root);
        if (!freopen(out, "w", stdout) || !freopen(errf, "w", stderr))
            _exit(3);
        unsetenv("KILN_STOP_AFTER_STEP");
        int rc = train_main(argc, argv);
        fflush(NULL);
        _exit(rc);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static bool file_has(const char *name, const char *text)
{
    char p[160], err[256];
    snprintf(p, sizeof p, "%s/%s", root, name);
    char *t = fio_read_file(p, 1 << 20, NULL, err, sizeof err);
    bool yes = t && strstr(t, text);
    free(t);
    return yes;
}

/* kiln train: options become a checked request, the outputs of a job appear,
 * a used folder needs --resume, bad options are refused by name. */
static void test_cli(void **state)
{
    char ds[128], out[128], path[200], err[256];
    snprintf(ds, sizeof ds, "%s/ds", root);
    snprintf(out, sizeof out, "%s/cli", root);
    char *ok[] = { "train", "--dataset", ds, "--network", "lenet-missing", "--out", out };
    assert_int_equal(run_cli(ok, 7), 1);
    assert_true(file_has("cli.err", "--network lenet-missing is neither a built-in network"));

    snprintf(path, sizeof path, "%s/net.json", root);
    const char *spec = "{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                       "\"units\": \"classes\"}]}";
    assert_int_equal(fio_write_atomic(path, spec, strlen(spec), err, sizeof err), 0);
    char *args[] = { "train", "--dataset", ds, "--network", path, "--out", out, "--epochs", "2",
                     "--batch", "32", "--solver", "sgd", "--lr", "0.05", "--nesterov",
                     "--clip-norm", "2", "--larc", "scale", "--larc-eta", "0.01",
                     "--lr-policy", "{\"type\": \"step\", \"step_size\": 3, \"gamma\": 0.5}" };
    int n = (int)(sizeof args / sizeof args[0]);
    assert_int_equal(run_cli(args, n), 0);
    assert_true(exists(out, "model.safetensors"));
    assert_true(exists(out, "checkpoints/epoch-2.safetensors"));
    assert_true(file_has("cli.out", "epoch 2/2: train loss"));
    assert_true(file_has("cli/job.json", "\"nesterov\":\ttrue"));
    assert_true(file_has("cli/job.json", "\"policy\":\t\"scale\""));
    assert_true(file_has("cli/job.json", "\"step_size\":\t3"));

    assert_int_equal(run_cli(args, n), 1);                 /* the folder holds a run */
    assert_true(file_has("cli.err", "already holds a run; pass --resume"));

    char *bad[] = { "train", "--dataset", ds, "--network", "lenet", "--out", out, "--solver",
                    "adam", "--momentum", "0.9" };
    assert_int_equal(run_cli(bad, 11), 2);
    assert_true(file_has("cli.err", "solver.momentum is for type sgd"));
    char *unknown[] = { "train", "--dataset", ds, "--network", "lenet", "--warp", "9" };
    assert_int_equal(run_cli(unknown, 7), 2);
    assert_true(file_has("cli.err", "unknown option --warp"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_is_exact),
        cmocka_unit_test(test_resume_data_parallel),
        cmocka_unit_test(test_foreign_checkpoint_refused),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_epoch_means),
        cmocka_unit_test(test_resume_tensorboard),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
