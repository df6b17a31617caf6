/* Resuming a job (jobs/runner.c through runner_run, as `kiln worker` and
 * `kiln train` run it): a run cancelled part-way through an epoch, or
 * stopped after an epoch's checkpoint, and then run again in the same folder
 * ends with the same model, bit for bit, as a run never interrupted; with
 * Adam, clipping and a warm-up cosine policy, so that the optimizer state,
 * its step count and the policy's position all have to come back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/dataset.h"
#include "engine/fileio.h"
#include "engine/rng.h"
#include "jobs/jobspec.h"
#include "jobs/runner.h"

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

static const char *REQUEST =
    "{\"network\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
    "  {\"type\": \"relu\"}, {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"flatten\"},"
    "  {\"type\": \"dropout\", \"rate\": 0.2},"
    "  {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"epochs\": 3, \"batch_size\": 16, \"seed\": 3,"
    " \"solver\": {\"type\": \"adam\", \"lr\": 0.01, \"clip_norm\": 1, \"weight_decay\": 0.001},"
    " \"lr_policy\": {\"type\": \"cosine\", \"warmup_steps\": 5}}";

/* A job folder with job.json for REQUEST. */
/* A job folder; backend NULL keeps what the request resolves to (the CPU). */
/* A job in dir; replicas > 1 trains data parallel on replicas of the net on
 * the one CPU (job.json's "replicas"). */
static void make_job_on(const char *dir, int replicas)
{
    char ds[128], path[160], err[256];
    snprintf(ds, sizeof ds, "%s/ds", root);
    cJSON *req = cJSON_Parse(REQUEST);
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
