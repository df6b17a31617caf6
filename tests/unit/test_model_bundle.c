/* A job's snapshots (jobs/snapshots.c) and an opened model (jobs/model_bundle.c):
 * selections parsed, the best picked by either metric, the weights a
 * selection means and the errors when there are none, and a model opened
 * from its job folder and from a tarball predicting the same. The job is
 * really trained (runner_run, as kiln train runs it) on a tiny dataset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "engine/dataset.h"
#include "engine/fileio.h"
#include "engine/rng.h"
#include "jobs/jobspec.h"
#include "jobs/model_bundle.h"
#include "jobs/runner.h"
#include "jobs/snapshots.h"

static char root[64], job[96];

static void write_split(const char *path, int count, uint64_t seed)
{
    char err[256];
    rng r;
    rng_seed(&r, seed);
    ds_writer *wr = ds_writer_open(path, 1, 8, 8, err, sizeof err);
    assert_non_null(wr);
    for (int i = 0; i < count; i++) {
        uint8_t img[64];
        int c = i % 3;
        for (int k = 0; k < 64; k++) {
            double v = (k % 3 == c ? 170 : 70) + 30 * rng_normal(&r);
            img[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        assert_int_equal(ds_writer_add(wr, img, c, err, sizeof err), 0);
    }
    assert_int_equal(ds_writer_commit(wr, err, sizeof err), 0);
}

static const char *REQUEST =
    "{\"network\": {\"name\": \"tiny\", \"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"batchnorm\"}, {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2},"
    "  {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"epochs\": 2, \"batch_size\": 16, \"seed\": 5,"
    " \"augmentation\": {\"crop\": 6},"
    " \"solver\": {\"type\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9}}";

static int setup(void **state)
{
    char path[160], err[256];
    snprintf(root, sizeof root, "/tmp/kiln-bundle-test-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/ds", root);
    if (fio_mkdir_p(path) != 0)
        return -1;
    char *names[] = { "red", "green", "blue" };
    ds_info info = { .c = 1, .h = 8, .w = 8, .nclasses = 3, .classes = names,
                     .train_count = 96, .val_count = 30, .mean = { 101.5f }, .resize = "crop" };
    if (ds_info_save(path, &info, "test", err, sizeof err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/ds/train.kds", root);
    write_split(path, 96, 1);
    snprintf(path, sizeof path, "%s/ds/val.kds", root);
    write_split(path, 30, 2);

    /* the job: job.json as jobspec resolves it, trained in a child process */
    snprintf(job, sizeof job, "%s/job", root);
    snprintf(path, sizeof path, "%s/ds", root);
    cJSON *req = cJSON_Parse(REQUEST);
    api_error e;
    jobcfg c;
    if (jobspec_resolve_local(req, path, &c, &e) != 0)
        return -1;
    cJSON *cfg = jobcfg_to_json(&c);
    jobcfg_free(&c);
    char *text = cJSON_Print(cfg);
    fio_mkdir_p(job);
    snprintf(path, sizeof path, "%s/job.json", job);
    int rc = fio_write_atomic(path, text, strlen(text), err, sizeof err);
    cJSON_free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(req);
    if (rc != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(3);
        _exit(runner_run(job, true));
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    /* The worker wrote snapshots.json: each snapshot at the step its epoch
     * ended (6 steps an epoch: 96 images in batches of 16), with its metrics. */
    snap_list l;
    if (snap_list_load(job, &l, err, sizeof err) != 0)
        return -1;
    bool ok = l.n == 2 && l.items[0].step == 6 && l.items[1].step == 12 && l.final_epoch == 2 &&
              cJSON_IsNumber(cJSON_GetObjectItem(l.items[0].metrics, "val/loss"));
    snap_list_free(&l);
    if (!ok) {
        fprintf(stderr, "setup: the worker's snapshots.json is not as expected\n");
        return -1;
    }
    /* The tests start from the files alone, as a job from before
     * snapshots.json (test_list_from_files), and write their own. */
    snprintf(path, sizeof path, "%s/snapshots.json", job);
    return unlink(path);
}

static int teardown(void **state)
{
    return fio_rm_rf(root);
}

static void test_select_parse(void **state)
{
    snap_select s;
    api_error e;
    assert_int_equal(snap_select_parse(NULL, "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_FINAL);
    assert_int_equal(snap_select_parse("final", "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_FINAL);
    assert_int_equal(snap_select_parse("best", "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_BEST);
    assert_int_equal(snap_select_parse("12", "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_EPOCH);
    assert_int_equal(s.epoch, 12);
    const char *bad[] = { "0", "-1", "abc", "1x", " 1", "1000001", "99999999999999999999", "Best" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(snap_select_parse(bad[i], "epoch", &s, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.code, "invalid_field");
        assert_non_null(strstr(e.message, "epoch"));
    }
    cJSON *n = cJSON_CreateNumber(3), *f = cJSON_CreateNumber(2.5), *b = cJSON_CreateString("best");
    assert_int_equal(snap_select_from_json(n, "epoch", &s, &e), 0);
    assert_int_equal(s.epoch, 3);
    assert_int_equal(snap_select_from_json(f, "epoch", &s, &e), -1);
    assert_int_equal(snap_select_from_json(b, "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_BEST);
    assert_int_equal(snap_select_from_json(NULL, "epoch", &s, &e), 0);
    assert_int_equal(s.kind, SNAP_FINAL);
    cJSON_Delete(n);
    cJSON_Delete(f);
    cJSON_Delete(b);
}

static void test_metrics(void **state)
{
    snap_metric m;
    assert_int_equal(snap_metric_parse("val/loss", &m), 0);
    assert_int_equal(m, SNAP_VAL_LOSS);
    assert_int_equal(snap_metric_parse("val/accuracy", &m), 0);
    assert_int_equal(m, SNAP_VAL_ACCURACY);
    assert_int_equal(snap_metric_parse("val/acc", &m), -1);
    assert_string_equal(snap_metric_name(SNAP_TRAIN_LOSS), "train/loss");
    assert_null(snap_metric_name(SNAP_METRIC_COUNT));
    assert_true(snap_metric_improves(SNAP_VAL_LOSS, 0.5, 0.6, 0));
    assert_false(snap_metric_improves(SNAP_VAL_LOSS, 0.55, 0.6, 0.1));   /* not by min_delta */
    assert_false(snap_metric_improves(SNAP_VAL_LOSS, 0.6, 0.6, 0));      /* a tie is no improvement */
    assert_true(snap_metric_improves(SNAP_VAL_ACCURACY, 0.9, 0.8, 0.05));
    assert_false(snap_metric_improves(SNAP_VAL_ACCURACY, 0.8, 0.9, 0));
    assert_false(snap_metric_improves(SNAP_VAL_ACCURACY, NAN, 0.1, 0));
    assert_true(snap_metric_improves(SNAP_VAL_LOSS, 3.0, NAN, 0));
}

/* Without snapshots.json, the checkpoint files, and no best. */
static void test_list_from_files(void **state)
{
    snap_list l;
    char err[256];
    assert_int_equal(snap_list_load(job, &l, err, sizeof err), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.items[0].epoch, 1);
    assert_int_equal(l.items[1].epoch, 2);
    assert_string_equal(l.items[1].file, "checkpoints/epoch-2.safetensors");
    assert_int_equal(l.best, 0);
    snap_list_free(&l);

    char path[PATH_MAX];
    int epoch;
    bool final;
    api_error e;
    snap_select best = { .kind = SNAP_BEST };
    assert_int_equal(snap_resolve(job, best, 0, path, sizeof path, &epoch, &final, &e), -1);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "no_best_snapshot");
    snap_select fin = { .kind = SNAP_FINAL };
    assert_int_equal(snap_resolve(job, fin, 0, path, sizeof path, &epoch, &final, &e), 0);
    assert_true(final);
    assert_int_equal(epoch, 2);                      /* job.json's epochs */
    assert_non_null(strstr(path, "model.safetensors"));
    snap_select ep = { .kind = SNAP_EPOCH, .epoch = 7 };
    assert_int_equal(snap_resolve(job, ep, 0, path, sizeof path, &epoch, &final, &e), -1);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "snapshot_not_found");
    assert_non_null(strstr(e.message, "epochs 1, 2"));
    ep.epoch = 1;
    assert_int_equal(snap_resolve(job, ep, 0, path, sizeof path, &epoch, &final, &e), 0);
    assert_false(final);
    assert_int_equal(epoch, 1);
    assert_non_null(strstr(path, "checkpoints/epoch-1.safetensors"));
}

static void put_metric(snap_item *it, const char *tag, double v)
{
    cJSON_AddNumberToObject(it->metrics, tag, v);
}

/* snapshots.json written and read back; the best by either metric. */
static void test_list_saved_and_best(void **state)
{
    snap_list l;
    char err[256];
    assert_int_equal(snap_list_load(job, &l, err, sizeof err), 0);
    put_metric(&l.items[0], "val/accuracy", 0.8);
    put_metric(&l.items[0], "val/loss", 0.4);
    put_metric(&l.items[1], "val/accuracy", 0.8);          /* a tie: the earlier wins */
    put_metric(&l.items[1], "val/loss", 0.3);
    l.items[1].step = 12;
    l.final_epoch = 2;
    snap_list_pick_best(&l);
    assert_int_equal(l.best, 1);
    l.metric = SNAP_VAL_LOSS;
    snap_list_pick_best(&l);
    assert_int_equal(l.best, 2);
    assert_int_equal(snap_list_save(job, &l, err, sizeof err), 0);
    snap_list_free(&l);

    assert_int_equal(snap_list_load(job, &l, err, sizeof err), 0);
    assert_int_equal(l.metric, SNAP_VAL_LOSS);
    assert_int_equal(l.best, 2);
    assert_int_equal(l.final_epoch, 2);
    assert_int_equal(l.items[1].step, 12);
    cJSON *j = snap_list_to_json(&l);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "items"), 1), "best")));
    cJSON_Delete(j);
    snap_list_free(&l);

    char path[PATH_MAX];
    int epoch;
    bool final;
    api_error e;
    snap_select best = { .kind = SNAP_BEST };
    assert_int_equal(snap_resolve(job, best, 0, path, sizeof path, &epoch, &final, &e), 0);
    assert_int_equal(epoch, 2);
    assert_false(final);

    /* a file name that leaves checkpoints/ is refused, not followed */
    char sp[200];
    snprintf(sp, sizeof sp, "%s/snapshots.json", job);
    const char *evil = "{\"metric\":\"val/loss\",\"items\":[{\"epoch\":1,\"file\":\"../../etc/passwd\"}]}";
    char keep[4096];
    size_t klen;
    char *old = fio_read_file(sp, sizeof keep, &klen, err, sizeof err);
    assert_non_null(old);
    assert_int_equal(fio_write_atomic(sp, evil, strlen(evil), err, sizeof err), 0);
    assert_int_equal(snap_list_load(job, &l, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed"));
    assert_int_equal(fio_write_atomic(sp, old, klen, err, sizeof err), 0);
    free(old);
}

static void test_prep_json(void **state)
{
    model_prep p = { .c = 3, .h = 32, .w = 40, .resize = IMG_HALF_CROP, .crop_h = 28, .crop_w = 30,
                     .mean = { 120.5f, 110, 100 }, .scale = 1.0f / 255 }, q;
    char err[256];
    cJSON *j = model_prep_to_json(&p);
    assert_int_equal(model_prep_from_json(j, &q, err, sizeof err), 0);
    assert_int_equal(q.c, 3);
    assert_int_equal(q.w, 40);
    assert_int_equal(q.crop_h, 28);
    assert_int_equal(q.crop_w, 30);
    assert_int_equal(q.resize, IMG_HALF_CROP);
    assert_true(q.mean[0] == 120.5f && q.mean[2] == 100);
    assert_true(q.scale == p.scale);
    cJSON_ReplaceItemInObject(j, "center_crop", cJSON_CreateIntArray((const int[]){ 33, 30 }, 2));
    assert_int_equal(model_prep_from_json(j, &q, err, sizeof err), -1);
    assert_non_null(strstr(err, "center_crop"));
    cJSON_ReplaceItemInObject(j, "center_crop", cJSON_CreateIntArray((const int[]){ 28, 30 }, 2));
    cJSON_ReplaceItemInObject(j, "mean", cJSON_CreateIntArray((const int[]){ 1, 2 }, 2));
    assert_int_equal(model_prep_from_json(j, &q, err, sizeof err), -1);
    assert_non_null(strstr(err, "mean"));
    cJSON_Delete(j);
}

static void add_member(struct archive *a, const char *name, const void *data, size_t n)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)n);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    assert_int_equal(archive_write_data(a, data, n), (la_ssize_t)n);
    archive_entry_free(e);
}

/* A tarball as the download writes it, leaving out `skip` (NULL: none). */
static void write_tar(const char *tar, const model_bundle *b, const char *skip)
{
    char err[256];
    size_t wlen;
    char *w = fio_read_file(b->weights, 1 << 24, &wlen, err, sizeof err);
    assert_non_null(w);
    char *spec = cJSON_Print(b->spec);
    cJSON *pj = model_prep_to_json(&b->prep);
    char *prep = cJSON_Print(pj);
    char labels[256] = "";
    for (int i = 0; i < b->nclasses; i++)
        strcat(strcat(labels, b->labels[i]), "\n");
    struct archive *a = archive_write_new();
    archive_write_set_format_ustar(a);
    assert_int_equal(archive_write_open_filename(a, tar), ARCHIVE_OK);
    if (!skip || strcmp(skip, "network.json"))
        add_member(a, "network.json", spec, strlen(spec));
    if (!skip || strcmp(skip, "weights.safetensors"))
        add_member(a, "weights.safetensors", w, wlen);
    add_member(a, "labels.txt", labels, strlen(labels));
    add_member(a, "preprocess.json", prep, strlen(prep));
    add_member(a, "info.json", "{\"job\": 4, \"epoch\": 2, \"network\": \"tiny\"}", 42);
    archive_write_close(a);
    archive_write_free(a);
    free(w);
    cJSON_free(spec);
    cJSON_free(prep);
    cJSON_Delete(pj);
}

static void test_bundle_job_and_tar(void **state)
{
    model_bundle b, t;
    api_error e;
    char err[256];
    snap_select fin = { .kind = SNAP_FINAL };
    assert_int_equal(model_bundle_open(job, fin, &b, &e), 0);
    assert_int_equal(b.nclasses, 3);
    assert_string_equal(b.labels[2], "blue");
    assert_string_equal(b.network_name, "tiny");
    assert_true(b.final);
    assert_int_equal(b.epoch, 2);
    /* the crop it trained on is the network's input; the mean is the dataset's */
    assert_int_equal(b.input.c, 1);
    assert_int_equal(b.input.h, 6);
    assert_int_equal(b.input.w, 6);
    assert_int_equal(b.prep.h, 8);
    assert_int_equal(b.prep.resize, IMG_CROP);
    assert_true(b.prep.mean[0] == 101.5f);

    char tar[160];
    snprintf(tar, sizeof tar, "%s/model.tar", root);
    write_tar(tar, &b, NULL);
    assert_int_equal(model_bundle_open(tar, fin, &t, &e), 0);
    assert_int_equal(t.nclasses, 3);
    assert_string_equal(t.labels[0], "red");
    assert_int_equal(t.epoch, 2);
    assert_int_equal(t.job_id, 4);
    assert_memory_equal(&t.input, &b.input, sizeof b.input);
    char tmpdir[PATH_MAX];
    snprintf(tmpdir, sizeof tmpdir, "%s", t.tmpdir);

    /* both predict the same, and not a uniform guess */
    net *n1 = model_bundle_net(&b, 4, err, sizeof err), *n2 = model_bundle_net(&t, 4, err, sizeof err);
    assert_non_null(n1);
    assert_non_null(n2);
    float x[4 * 36], p1[12], p2[12];
    for (int i = 0; i < 4 * 36; i++)
        x[i] = (float)((i * 37) % 255 - 101.5) / 255.0f;
    assert_int_equal(net_predict(n1, x, 4, p1, err, sizeof err), 0);
    assert_int_equal(net_predict(n2, x, 4, p2, err, sizeof err), 0);
    assert_memory_equal(p1, p2, sizeof p1);
    assert_true(fabsf(p1[0] - 1.0f / 3) > 1e-3f);
    net_free(n1);
    net_free(n2);
    model_bundle_free(&t);
    struct stat sb;
    assert_int_not_equal(stat(tmpdir, &sb), 0);     /* the unpacked folder is gone */

    snap_select best = { .kind = SNAP_BEST };
    assert_int_equal(model_bundle_open(tar, best, &t, &e), -1);
    assert_int_equal(e.status, 400);
    write_tar(tar, &b, "weights.safetensors");
    assert_int_equal(model_bundle_open(tar, fin, &t, &e), -1);
    assert_string_equal(e.code, "bad_model");
    assert_non_null(strstr(e.message, "weights.safetensors"));
    write_tar(tar, &b, "network.json");
    assert_int_equal(model_bundle_open(tar, fin, &t, &e), -1);
    assert_non_null(strstr(e.message, "network.json"));
    assert_int_equal(fio_write_atomic(tar, "not a tar", 9, err, sizeof err), 0);
    assert_int_equal(model_bundle_open(tar, fin, &t, &e), -1);
    assert_int_equal(e.status, 400);
    model_bundle_free(&b);

    snap_select ep = { .kind = SNAP_EPOCH, .epoch = 9 };
    assert_int_equal(model_bundle_open(job, ep, &b, &e), -1);
    assert_int_equal(e.status, 404);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_parse),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_prep_json),
        cmocka_unit_test(test_list_from_files),
        cmocka_unit_test(test_list_saved_and_best),
        cmocka_unit_test(test_bundle_job_and_tar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
