/* tests/unit/test_scheduler.c: the scheduler and supervisor (jobs/scheduler.h)
 * with a shell script standing in for `kiln worker`: it speaks the report
 * protocol of jobs/runner.h, and does what the job folder's "mode" file says
 * (finish, crash, report an error, die of a signal, wait for SIGTERM, ignore it). */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "db/store.h"
#include "tests/settings_util.h"
#include "engine/checkpoint.h"
#include "jobs/hub.h"
#include "db/event_store.h"
#include "base/layout.h"
#include "jobs/jobspec.h"
#include "tests/unit/jobcfg_util.h"
#include "jobs/scheduler.h"
#include "jobs/evaluation.h"   /* eval_spec_to_json: an evaluation's eval.json */

#define GRACE_MS 300

static const char fake_worker[] =
    "#!/bin/sh\n"
    "# a fake `kiln worker`: does what <job-dir>/mode says\n"
    "case \"$1 $2\" in \"worker --job-dir\"|\"evaluate --eval-dir\") ;; *) exit 64;; esac\n"
    "dir=$3\n"
    "mode=$(cat \"$dir/mode\")\n"
    "order=\"$dir/../../order\"\n"
    "echo \"start $(basename \"$dir\")\" >> \"$order\"\n"
    "[ \"$4\" = --gpus ] && printf '%s' \"$5\" > \"$dir/gpus\"\n"   /* the GPUs it was given */
    "echo '{\"t\":\"status\",\"status\":\"running\"}'\n"
    "echo \"fake worker: $mode\" >&2\n"
    "case \"$mode\" in\n"
    "done)\n"
    "  echo '{\"t\":\"progress\",\"epoch\":0,\"epochs\":1,\"step\":1,\"steps\":2,\"images_per_sec\":100,\"eta\":1}'\n"
    "  echo '{\"t\":\"metric\",\"step\":1,\"epoch\":0.5,\"tag\":\"train/loss\",\"value\":2.5,\"wall_time\":1700000000.5}'\n"
    "  echo 'this line is not a report'\n"
    "  echo '{\"t\":\"metric\",\"step\":2,\"epoch\":1,\"tag\":\"val/accuracy\",\"value\":0.75,\"wall_time\":1700000001}'\n"
    "  echo '{\"t\":\"snapshot\",\"epoch\":1,\"path\":\"checkpoints/epoch-1.safetensors\"}'\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  printf '{\"t\":\"done\"}'\n"       /* the last report without its newline */
    "  exit 0;;\n"
    "crash)\n"
    "  echo 'something went badly wrong' >&2\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  exit 3;;\n"
    "error)\n"
    "  echo '{\"t\":\"error\",\"message\":\"dataset: train.kds is missing\"}'\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  exit 1;;\n"
    "signal)\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  kill -USR1 $$;;\n"
    "done_nonzero)\n"
    "  echo '{\"t\":\"done\"}'\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  exit 2;;\n"
    "wait)\n"
    "  trap 'echo \"{\\\"t\\\":\\\"status\\\",\\\"status\\\":\\\"cancelled\\\"}\"; exit 0' TERM\n"
    "  : > \"$dir/trapped\"\n"               /* trapped_wait: the trap is set */
    "  while :; do sleep 0.02; done;;\n"
    "eval_done)\n"                      /* an evaluation: result.json, then done */
    "  echo '{\"t\":\"progress\",\"done\":3,\"total\":4}'\n"
    "  printf '{\"count\":4,\"top1_accuracy\":0.75}' > \"$dir/result.json\"\n"
    "  echo \"end $(basename \"$dir\")\" >> \"$order\"\n"
    "  echo '{\"t\":\"done\"}'\n"
    "  exit 0;;\n"
    "stubborn)\n"
    "  trap '' TERM\n"
    "  : > \"$dir/trapped\"\n"
    "  while :; do sleep 0.02; done;;\n"
    "esac\n";

typedef struct fixture {
    char data[64];
    char exe[PATH_MAX + 32];
    store *st;
    hub *h;
    sched *s;
    int64_t dataset;
} fixture;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Waits (up to 10 s) until job id's fake worker has set its SIGTERM trap (the
 * "wait" and "stubborn" modes mark it with <job-dir>/trapped): a SIGTERM
 * before that ends the shell itself, not the way the test means. */
static void trapped_wait(const fixture *f, int64_t id)
{
    char dir[PATH_MAX], path[PATH_MAX + 16];
    assert_int_equal(layout_job_dir(dir, sizeof dir, f->data, id), 0);
    snprintf(path, sizeof path, "%s/trapped", dir);
    for (int i = 0; i < 1000 && access(path, F_OK) != 0; i++)
        sleep_ms(10);
    assert_int_equal(access(path, F_OK), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->data, sizeof f->data, "/tmp/kiln-test-sched-XXXXXX");
    if (!mkdtemp(f->data))
        return -1;
    char path[PATH_MAX], err[256], real[PATH_MAX];
    if (!realpath(f->data, real))
        return -1;
    snprintf(f->exe, sizeof f->exe, "%s/fake-worker.sh", real);
    write_text(f->exe, fake_worker);
    chmod(f->exe, 0755);
    snprintf(path, sizeof path, "%s/jobs", f->data);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/kiln.db", f->data);
    f->st = store_open(path, err, sizeof err);
    f->h = hub_create();
    if (f->h && f->st)
        hub_set_store(f->h, f->st);      /* as kiln serve: events are stored, ids the store's */
    if (!f->st || !f->h)
        return -1;
    if (store_dataset_insert(f->st, "ds", &f->dataset, err, sizeof err) != 0 ||
        store_dataset_finish(f->st, f->dataset, "ready", "{}", NULL) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sched_stop(f->s);
    hub_destroy(f->h);
    store_close(f->st);
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->data);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->data);
    free(f);
    return 0;
}

static void start_gpus(fixture *f, int max_jobs, int gpus)
{
    sched_config cfg = { .data_dir = f->data, .worker_exe = f->exe, .max_cpu_jobs = max_jobs,
                         .kill_grace_ms = GRACE_MS, .gpus = gpus };
    char err[256] = "";
    f->s = sched_start(f->st, f->h, &cfg, err, sizeof err);
    if (!f->s)
        fail_msg("sched_start: %s", err);
}

static void start(fixture *f, int max_jobs)
{
    start_gpus(f, max_jobs, 0);
}

/* A valid job.json (tests/unit/jobcfg_util.h) with fields replaced. */
static void write_job_json(const char *path, const char *fields)
{
    char *text = job_json_text(fields);
    assert_non_null(text);
    write_text(path, text);
    cJSON_free(text);
}

/* A queued job whose fake worker does `mode`; with_json false leaves out job.json. */
static int64_t add_job(fixture *f, const char *mode, bool with_json)
{
    int64_t id = 0;
    char err[256], dir[PATH_MAX], path[PATH_MAX + 16];
    assert_int_equal(store_job_insert(f->st, f->dataset, "fake", "{}", 1, &id, err, sizeof err), 0);
    assert_int_equal(store_job_set_progress(f->st, id, 0, 0, 2, 0, -1), 0);
    layout_job_dir(dir, sizeof dir, f->data, id);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/mode", dir);
    write_text(path, mode);
    if (with_json) {
        snprintf(path, sizeof path, "%s/job.json", dir);
        write_job_json(path, "{}");
    }
    return id;
}

static bool is_final(const char *st)
{
    return !strcmp(st, "done") || !strcmp(st, "failed") || !strcmp(st, "cancelled");
}

/* Waits (bounded) until the job has status want; returns the job. */
static store_job wait_status(fixture *f, int64_t id, const char *want, double timeout_s)
{
    double t0 = now_s();
    store_job j;
    for (;;) {
        assert_int_equal(store_job_get(f->st, id, &j), 0);
        if (!strcmp(j.status, want))
            return j;
        if (now_s() - t0 > timeout_s || is_final(j.status))   /* a final status never changes */
            fail_msg("job %lld: status %s (error %s), waiting for %s", (long long)id, j.status,
                     j.error ? j.error : "-", want);
        store_job_clear(&j);
        sleep_ms(10);
    }
}

static void clear_events(hub_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hub_event_clear(&ev[i]);
}

/* The job's hub events, in order, once its stream has ended (every caller
 * reads a job whose final status is stored: the scheduler stores it just
 * before it publishes the final event and ends the stream, so a reader may
 * come in between; it waits up to 5 s, then returns what is there). */
static size_t read_events(fixture *f, int64_t id, hub_event *ev, size_t max, bool *ended)
{
    bool live, gap;
    size_t n = 0;
    for (int tries = 0; tries < 500; tries++) {
        n = hub_read(f->h, id, 0, ev, max, &live, ended, &gap);
        if (*ended || tries == 499)
            break;
        clear_events(ev, n);
        sleep_ms(10);
    }
    assert_true(live);
    assert_false(gap);
    return n;
}


static void a_finished_worker_is_done_with_its_metrics(void **state)
{
    fixture *f = *state;
    int64_t id = add_job(f, "done", true);
    start(f, 1);
    store_job j = wait_status(f, id, "done", 10);
    assert_null(j.error);
    assert_non_null(j.started_at);
    assert_non_null(j.finished_at);
    assert_int_equal(j.step, 2);
    assert_int_equal(j.steps, 2);
    assert_int_equal(j.epoch, 1);
    assert_true(fabs(j.images_per_sec - 120.0) < 1e-9 || fabs(j.images_per_sec - 100.0) < 1e-9);
    store_job_clear(&j);

    store_metric *m = NULL;
    size_t n = 0;
    assert_int_equal(store_metric_list(f->st, id, -1, &m, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].tag, "train/loss");
    assert_int_equal(m[0].step, 1);
    assert_true(fabs(m[0].value - 2.5) < 1e-12);
    assert_true(fabs(m[0].epoch - 0.5) < 1e-12);
    assert_true(fabs(m[0].wall_time - 1700000000.5) < 1e-6);
    assert_string_equal(m[1].tag, "val/accuracy");
    assert_true(fabs(m[1].value - 0.75) < 1e-12);
    free(m);

    /* The stream: running, metric, metric, then done (log lines, if the
     * worker wrote any, in between); it ended. Progress is a snapshot, not
     * an event. The store holds the same events under the same ids. */
    hub_event all[32], ev[16];
    bool ended = false;
    size_t total = read_events(f, id, all, 32, &ended);
    assert_true(ended);
    size_t k = 0;
    for (size_t i = 0; i < total; i++) {
        assert_int_equal(all[i].id, i + 1);
        if (strcmp(all[i].type, "log") != 0 && k < 16)
            ev[k++] = all[i];
    }
    store_event stored[32];
    size_t ns = 0;
    assert_int_equal(store_event_page(f->st, id, 0, stored, 32, &ns), 0);
    assert_int_equal(ns, total);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(stored[i].id, all[i].id);
        assert_string_equal(stored[i].type, all[i].type);
        assert_string_equal(stored[i].data, all[i].data);
        store_event_clear(&stored[i]);
    }
    assert_int_equal(k, 4);
    assert_string_equal(ev[0].type, "status");
    assert_non_null(strstr(ev[0].data, "\"running\""));
    assert_string_equal(ev[1].type, "metric");
    cJSON *md = cJSON_Parse(ev[1].data);
    assert_non_null(md);
    assert_string_equal(cJSON_GetObjectItem(md, "tag")->valuestring, "train/loss");
    assert_true(cJSON_GetObjectItem(md, "value")->valuedouble == 2.5);
    assert_int_equal(cJSON_GetObjectItem(md, "step")->valueint, 1);
    assert_non_null(cJSON_GetObjectItem(md, "epoch"));
    assert_non_null(cJSON_GetObjectItem(md, "wall_time"));
    cJSON_Delete(md);
    assert_string_equal(ev[2].type, "metric");
    assert_string_equal(ev[3].type, "status");
    cJSON *sd = cJSON_Parse(ev[3].data);
    assert_string_equal(cJSON_GetObjectItem(sd, "status")->valuestring, "done");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(sd, "error")));
    cJSON_Delete(sd);
    clear_events(all, total);

    uint64_t seen = 0;
    char *progress = NULL;
    assert_true(hub_progress(f->h, id, &seen, &progress));
    assert_non_null(strstr(progress, "\"steps\":2"));
    free(progress);
    assert_false(hub_progress(f->h, id, &seen, &progress));   /* nothing newer */
}

typedef struct fail_case {
    const char *mode;
    const char *mentions[2];
} fail_case;

static void failures_carry_their_reason(void **state)
{
    fixture *f = *state;
    static const fail_case cases[] = {
        { "crash", { "status 3", "something went badly wrong" } },  /* exit code + log tail */
        { "error", { "dataset: train.kds is missing", NULL } },      /* the reported error */
        { "signal", { "signal 10", NULL } },                          /* SIGUSR1 */
        { "done_nonzero", { "status 2", NULL } },                     /* done, but exit 2 */
    };
    int64_t ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = add_job(f, cases[i].mode, true);
    start(f, 1);
    for (int i = 0; i < 4; i++) {
        store_job j = wait_status(f, ids[i], "failed", 10);
        assert_non_null(j.error);
        for (int k = 0; k < 2; k++)
            if (cases[i].mentions[k] && !strstr(j.error, cases[i].mentions[k]))
                fail_msg("%s: error \"%s\" does not mention \"%s\"", cases[i].mode, j.error,
                         cases[i].mentions[k]);
        store_job_clear(&j);

        hub_event ev[8];
        bool ended = false;
        size_t n = read_events(f, ids[i], ev, 8, &ended);
        assert_true(ended);
        assert_true(n >= 2);
        assert_non_null(strstr(ev[n - 1].data, "\"failed\""));
        clear_events(ev, n);
    }

    /* One at a time (max_cpu_jobs 1), oldest first. */
    char path[PATH_MAX], want[256] = "";
    snprintf(path, sizeof path, "%s/order", f->data);
    for (int i = 0; i < 4; i++) {
        size_t used = strlen(want);
        snprintf(want + used, sizeof want - used, "start %lld\nend %lld\n", (long long)ids[i],
                 (long long)ids[i]);
    }
    char *order = slurp(path);
    assert_string_equal(order, want);
    free(order);
}

static void cancel_queued_running_and_stubborn(void **state)
{
    fixture *f = *state;
    int64_t running = add_job(f, "wait", true);
    int64_t queued = add_job(f, "done", true);
    start(f, 1);
    store_job j = wait_status(f, running, "running", 10);
    store_job_clear(&j);

    /* The queued one ends at once, and its stream says so and ends. */
    assert_int_equal(sched_cancel(f->s, queued), 0);
    j = wait_status(f, queued, "cancelled", 0.001);
    assert_non_null(j.finished_at);
    store_job_clear(&j);
    hub_event ev[64];                  /* a worker's log lines are events too */
    bool ended = false;
    size_t n = read_events(f, queued, ev, 64, &ended);
    assert_true(ended);
    assert_int_equal(n, 1);
    assert_non_null(strstr(ev[0].data, "\"cancelled\""));
    clear_events(ev, n);

    /* The running one gets SIGTERM, reports cancelled and exits. */
    trapped_wait(f, running);
    assert_int_equal(sched_cancel(f->s, running), 0);
    j = wait_status(f, running, "cancelled", 5);
    store_job_clear(&j);
    n = read_events(f, running, ev, 64, &ended);
    assert_true(ended);
    assert_non_null(strstr(ev[n - 1].data, "\"cancelled\""));
    clear_events(ev, n);

    /* Ended jobs: SCHED_ALREADY_ENDED; unknown ones: STORE_NOT_FOUND. */
    assert_int_equal(sched_cancel(f->s, running), SCHED_ALREADY_ENDED);
    assert_int_equal(sched_cancel(f->s, queued), SCHED_ALREADY_ENDED);
    assert_int_equal(sched_cancel(f->s, 424242), STORE_NOT_FOUND);

    /* One that ignores SIGTERM is killed after the grace period. */
    int64_t stubborn = add_job(f, "stubborn", true);
    sched_wake(f->s);
    j = wait_status(f, stubborn, "running", 10);
    store_job_clear(&j);
    trapped_wait(f, stubborn);
    double t0 = now_s();
    assert_int_equal(sched_cancel(f->s, stubborn), 0);
    j = wait_status(f, stubborn, "cancelled", 5);
    double took = now_s() - t0;
    store_job_clear(&j);
    assert_true(took >= GRACE_MS / 1000.0 * 0.9);
}

/* A job whose job.json is json (what jobspec writes for "devices"). */
static int64_t add_job_with(fixture *f, const char *mode, const char *json)
{
    int64_t id = add_job(f, mode, false);
    char dir[PATH_MAX], path[PATH_MAX + 16];
    layout_job_dir(dir, sizeof dir, f->data, id);
    snprintf(path, sizeof path, "%s/job.json", dir);
    write_job_json(path, json);
    return id;
}

/* The --gpus a job's worker was given ("" for none). */
static char *gpus_given(fixture *f, int64_t id)
{
    char dir[PATH_MAX], path[PATH_MAX + 16];
    layout_job_dir(dir, sizeof dir, f->data, id);
    snprintf(path, sizeof path, "%s/gpus", dir);
    return slurp(path);
}

static void assert_gpus(fixture *f, int64_t id, const char *want)
{
    store_job j = wait_status(f, id, "running", 10);
    store_job_clear(&j);
    char *got = NULL;
    for (int i = 0; i < 500; i++) {       /* the worker writes the file as it starts */
        free(got);
        got = gpus_given(f, id);
        if (!want[0] || got[0])
            break;
        sleep_ms(10);
    }
    if (strcmp(got, want) != 0)
        fail_msg("job %lld: given --gpus \"%s\", want \"%s\"", (long long)id, got, want);
    free(got);
}

/* The devices stored with job id (store_set_devices). */
static void assert_devices(fixture *f, int64_t id, const char *want)
{
    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    if (!j.devices_json || strcmp(j.devices_json, want) != 0)
        fail_msg("job %lld: devices %s, want %s", (long long)id, j.devices_json ? j.devices_json : "NULL",
                 want);
    store_job_clear(&j);
}

static void assert_queued(fixture *f, int64_t id)
{
    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    if (strcmp(j.status, "queued") != 0)
        fail_msg("job %lld: %s, want queued", (long long)id, j.status);
    store_job_clear(&j);
}

/* GPUs, three of them: each job gets its own (the ones it names, or the
 * lowest free ones), jobs wait until theirs are free, a waiting job keeps
 * later ones off the GPUs it waits for, CPU jobs run beside them, and a job
 * asking for GPUs the machine lacks fails with the reason. */
static void gpu_jobs_get_their_own_gpus(void **state)
{
    fixture *f = *state;
    const char *any2 = "{\"backend\": \"cuda\", \"gpus\": [], \"gpu_count\": 2}";
    const char *any1 = "{\"backend\": \"cuda\", \"gpus\": [], \"gpu_count\": 1}";
    int64_t a = add_job_with(f, "wait", any2);                      /* 0,1 */
    int64_t b = add_job_with(f, "wait", "{\"backend\": \"cuda\", \"gpus\": [1], "
                                        "\"gpu_count\": 1}");      /* waits for 1 */
    int64_t c = add_job_with(f, "wait", "{\"backend\": \"cpu\"}");    /* beside them */
    int64_t d = add_job_with(f, "wait", any1);                      /* 2 */
    int64_t e = add_job_with(f, "wait", any2);                      /* waits */
    int64_t g = add_job_with(f, "wait", any1);                      /* waits behind e */
    int64_t x = add_job_with(f, "wait", "{\"backend\": \"cuda\", \"gpus\": [0, 3], "
                                        "\"gpu_count\": 2}");
    int64_t y = add_job_with(f, "wait", "{\"backend\": \"cuda\", \"gpus\": [], "
                                        "\"gpu_count\": 4}");
    int64_t old = add_job_with(f, "wait", "{\"backend\": \"cuda\", \"gpu\": 2}");  /* older */
    start_gpus(f, 1, 3);
    assert_gpus(f, a, "0,1");
    assert_gpus(f, c, "");
    assert_gpus(f, d, "2");
    store_work kinds[4];
    int64_t on[4];                        /* what GET /api/v1/hardware shows on each GPU */
    assert_int_equal(sched_gpu_work(f->s, kinds, on, 4), 3);
    assert_true(on[0] == a && on[1] == a && on[2] == d && on[3] == 0);
    assert_true(kinds[0] == STORE_WORK_JOB && kinds[2] == STORE_WORK_JOB);
    store_job j = wait_status(f, x, "failed", 10);
    assert_non_null(strstr(j.error, "GPU 3, but this machine has 3"));
    store_job_clear(&j);
    j = wait_status(f, y, "failed", 10);
    assert_non_null(strstr(j.error, "4 GPUs, but this machine has 3"));
    store_job_clear(&j);
    sleep_ms(300);                        /* a few looks at the queue */
    assert_queued(f, b);
    assert_queued(f, e);
    assert_queued(f, g);
    assert_queued(f, old);
    /* The devices each worker got are stored with its job ... */
    assert_devices(f, a, "[\"cuda:0\",\"cuda:1\"]");
    assert_devices(f, c, "[\"cpu\"]");
    assert_devices(f, d, "[\"cuda:2\"]");
    /* ... and the view says what the waiting ones wait for, from the same rule. */
    sched_queue_item *v = NULL;
    size_t nv = 0;
    assert_int_equal(sched_queue_view(f->s, &v, &nv), 0);
    assert_int_equal(nv, 7);
    int64_t run_ids[] = { a, c, d };
    uint64_t run_gpus[] = { 3, 0, 4 };
    for (int i = 0; i < 3; i++)
        assert_true(v[i].running && v[i].id == run_ids[i] && v[i].gpus == run_gpus[i]);
    char want[4][96];
    snprintf(want[0], sizeof want[0], "GPU 1 (used by job %lld)", (long long)a);
    snprintf(want[1], sizeof want[1], "2 GPUs (0 free)");
    snprintf(want[2], sizeof want[2], "1 GPU (0 free)");
    snprintf(want[3], sizeof want[3], "GPU 2 (used by job %lld)", (long long)d);
    int64_t wait_ids[] = { b, e, g, old };
    for (int i = 0; i < 4; i++) {
        assert_false(v[3 + i].running);
        assert_int_equal(v[3 + i].id, wait_ids[i]);
        assert_string_equal(v[3 + i].why, want[i]);
    }
    free(v);

    trapped_wait(f, a);
    assert_int_equal(sched_cancel(f->s, a), 0);
    assert_gpus(f, b, "1");
    sleep_ms(300);
    assert_queued(f, e);                  /* only GPU 0 is free */
    assert_queued(f, g);                  /* and e waits for it first */
    trapped_wait(f, d);
    assert_int_equal(sched_cancel(f->s, d), 0);
    assert_gpus(f, e, "0,2");
    trapped_wait(f, b);
    assert_int_equal(sched_cancel(f->s, b), 0);
    assert_gpus(f, g, "1");
    assert_queued(f, old);
    trapped_wait(f, e);
    assert_int_equal(sched_cancel(f->s, e), 0);
    assert_gpus(f, old, "2");             /* a job.json from before multi-GPU jobs */
    int64_t all[] = { c, g, old };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        trapped_wait(f, all[i]);
        assert_int_equal(sched_cancel(f->s, all[i]), 0);
        j = wait_status(f, all[i], "cancelled", 5);
        store_job_clear(&j);
    }
}

/* Priority before age: of the queued jobs the highest starts first (one CPU
 * slot), a change while queued reorders them, a running job's cannot change;
 * the view says what each waits for and the order it will start them in. */
static void priority_orders_the_queue(void **state)
{
    fixture *f = *state;
    int64_t first = add_job(f, "wait", true);
    int64_t plain = add_job(f, "done", true);
    int64_t urgent = add_job(f, "done", true);
    int64_t later = add_job(f, "done", true);
    assert_int_equal(store_job_set_priority(f->st, first, 9), 0);   /* starts first, and waits */
    assert_int_equal(store_job_set_priority(f->st, urgent, 5), 0);
    start(f, 1);
    store_job j = wait_status(f, first, "running", 10);
    store_job_clear(&j);
    assert_devices(f, first, "[\"cpu\"]");
    assert_int_equal(store_job_set_priority(f->st, first, 0), STORE_NOT_FOUND);

    sched_queue_item *v = NULL;
    size_t n = 0;
    assert_int_equal(sched_queue_view(f->s, &v, &n), 0);
    assert_int_equal(n, 4);
    assert_true(v[0].running && v[0].id == first);
    int64_t order[] = { urgent, plain, later };
    char want[96];
    snprintf(want, sizeof want, "a free CPU slot (1 of 1 in use by job %lld)", (long long)first);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(v[1 + i].id, order[i]);
        assert_string_equal(v[1 + i].why, want);
    }
    free(v);

    /* later raised above urgent while it waits */
    assert_int_equal(store_job_set_priority(f->st, later, 6), 0);
    assert_int_equal(sched_queue_view(f->s, &v, &n), 0);
    assert_true(n == 4 && v[1].id == later && v[2].id == urgent && v[3].id == plain);
    free(v);

    trapped_wait(f, first);
    assert_int_equal(sched_cancel(f->s, first), 0);
    int64_t ended[] = { later, urgent, plain };
    for (int i = 0; i < 3; i++) {
        j = wait_status(f, ended[i], "done", 10);
        store_job_clear(&j);
    }
    char path[PATH_MAX], expect[256];
    snprintf(path, sizeof path, "%s/order", f->data);
    snprintf(expect, sizeof expect, "start %lld\nstart %lld\nend %lld\nstart %lld\nend %lld\nstart %lld\nend %lld\n",
             (long long)first, (long long)later, (long long)later, (long long)urgent, (long long)urgent,
             (long long)plain, (long long)plain);
    char *got = slurp(path);
    assert_string_equal(got, expect);
    free(got);
}

static void waits_for_job_json_and_requeues_after_a_crash(void **state)
{
    fixture *f = *state;
    /* A job "running" when the server died comes back to the queue and runs. */
    int64_t orphan = add_job(f, "done", true);
    assert_int_equal(store_job_set_status(f->st, orphan, "running", NULL), 0);
    store_metric stale = { .step = 99, .epoch = 3, .tag = "train/loss", .value = 1, .wall_time = 1 };
    assert_int_equal(store_metric_insert(f->st, orphan, &stale), 0);
    char odir[PATH_MAX], stale_tb[PATH_MAX + 64];
    layout_job_dir(odir, sizeof odir, f->data, orphan);
    snprintf(stale_tb, sizeof stale_tb, "%s/events.out.tfevents.1.oldhost", odir);
    write_text(stale_tb, "an earlier run's curves");
    /* A job whose job.json is not written yet is not started. */
    int64_t early = add_job(f, "done", false);
    start(f, 1);
    store_job j = wait_status(f, orphan, "done", 10);
    store_job_clear(&j);
    store_metric *m = NULL;
    size_t n = 0;
    assert_int_equal(store_metric_list(f->st, orphan, -1, &m, &n), 0);
    assert_int_equal(n, 2);                   /* the earlier run's metrics are gone */
    free(m);
    assert_int_equal(access(stale_tb, F_OK), -1);   /* and so is its TensorBoard file */

    sleep_ms(200);
    assert_int_equal(store_job_get(f->st, early, &j), 0);
    assert_string_equal(j.status, "queued");
    store_job_clear(&j);
    /* Waiting, its stream is open already: an SSE reader waits for its events. */
    hub_event ev[2];
    bool live = false, ended = true, gap = true;
    assert_int_equal(hub_read(f->h, early, 0, ev, 2, &live, &ended, &gap), 0);
    assert_true(live);
    assert_false(ended);

    char dir[PATH_MAX], path[PATH_MAX + 16];
    layout_job_dir(dir, sizeof dir, f->data, early);
    snprintf(path, sizeof path, "%s/job.json", dir);
    write_job_json(path, "{}");
    sched_wake(f->s);
    j = wait_status(f, early, "done", 10);
    store_job_clear(&j);
}

/* A requeued job with a checkpoint resumes from it (jobs/runner.c): the
 * metrics up to the checkpoint's step and the TensorBoard file stay, later
 * metrics go. */
static void a_requeued_job_keeps_metrics_up_to_its_checkpoint(void **state)
{
    fixture *f = *state;
    int64_t orphan = add_job(f, "done", true);
    assert_int_equal(store_job_set_status(f->st, orphan, "running", NULL), 0);
    store_metric before = { .step = 40, .epoch = 1, .tag = "train/loss", .value = 1, .wall_time = 1 };
    store_metric after = { .step = 99, .epoch = 3, .tag = "train/loss", .value = 1, .wall_time = 2 };
    assert_int_equal(store_metric_insert(f->st, orphan, &before), 0);
    assert_int_equal(store_metric_insert(f->st, orphan, &after), 0);
    char dir[PATH_MAX], path[PATH_MAX + 64], tb[PATH_MAX + 64], err[256];
    layout_job_dir(dir, sizeof dir, f->data, orphan);
    snprintf(tb, sizeof tb, "%s/events.out.tfevents.1.oldhost", dir);
    write_text(tb, "the curves so far");
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/checkpoints/step-50.safetensors", dir);
    cJSON *spec = cJSON_Parse("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                              "\"units\": \"classes\"}]}");
    net *n = net_create(spec, (net_shape){ 1, 2, 2 }, 2, 1, NULL, NULL, 1, err, sizeof err);
    cJSON_Delete(spec);
    assert_non_null(n);
    ckpt_info ci = { .step = 50, .epoch = 1, .epoch_step = 10, .seed = 1 };
    assert_int_equal(ckpt_save(n, path, &ci, err, sizeof err), 0);
    net_free(n);

    start(f, 1);
    store_job j = wait_status(f, orphan, "done", 10);
    store_job_clear(&j);
    store_metric *m = NULL;
    size_t count = 0;
    assert_int_equal(store_metric_list(f->st, orphan, -1, &m, &count), 0);
    assert_int_equal(count, 3);               /* step 40, then the new run's 1 and 2 */
    assert_int_equal(m[0].step, 40);
    for (size_t i = 0; i < count; i++)
        assert_true(m[i].step != 99);
    free(m);
    assert_int_equal(access(tb, F_OK), 0);
}

static void stop_requeues_running_jobs(void **state)
{
    fixture *f = *state;
    int64_t id = add_job(f, "wait", true);
    start(f, 2);
    store_job j = wait_status(f, id, "running", 10);
    store_job_clear(&j);
    trapped_wait(f, id);
    double t0 = now_s();
    sched_stop(f->s);
    f->s = NULL;
    assert_true(now_s() - t0 < 5);
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    assert_string_equal(j.status, "queued");   /* runs again at the next start */
    assert_null(j.finished_at);
    store_job_clear(&j);
    hub_event ev[8];
    bool ended = false;
    size_t n = read_events(f, id, ev, 8, &ended);
    assert_true(ended);                         /* its readers are not left hanging */
    clear_events(ev, n);
}

/* A queued evaluation of job_id whose fake worker does `mode`. */
static int64_t add_eval(fixture *f, int64_t job_id, const char *mode)
{
    int64_t id = 0;
    char err[256], dir[PATH_MAX], path[PATH_MAX + 16];
    assert_int_equal(store_eval_insert(f->st, job_id, f->dataset, "val", "final", 1, &id, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/evaluations", f->data);
    mkdir(path, 0755);
    layout_eval_dir(dir, sizeof dir, f->data, id);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/mode", dir);
    write_text(path, mode);
    eval_spec sp = { .id = id, .job_id = job_id, .dataset_id = f->dataset, .split = EVAL_SPLIT_VAL,
                     .selection = "final", .weights = { .kind = SNAP_FINAL }, .epoch = 1, .batch_size = 8,
                     .devices = { .kind = BACKEND_CPU, .count = 1 } };
    snprintf(sp.job_dir, sizeof sp.job_dir, "/nowhere");
    snprintf(sp.dataset_dir, sizeof sp.dataset_dir, "/nowhere");
    cJSON *o = eval_spec_to_json(&sp);
    char *text = cJSON_Print(o);
    snprintf(path, sizeof path, "%s/eval.json", dir);
    write_text(path, text);
    cJSON_free(text);
    cJSON_Delete(o);
    return id;
}

static store_eval wait_eval(fixture *f, int64_t id, const char *want, double timeout_s)
{
    double t0 = now_s();
    store_eval e;
    for (;;) {
        assert_int_equal(store_eval_get(f->st, id, &e), 0);
        if (!strcmp(e.status, want))
            return e;
        if (now_s() - t0 > timeout_s || is_final(e.status))
            fail_msg("evaluation %lld: status %s (error %s), waiting for %s", (long long)id, e.status,
                     e.error ? e.error : "-", want);
        store_eval_clear(&e);
        sleep_ms(10);
    }
}

/* Evaluations are work of the same queue: one CPU slot runs a job and an
 * evaluation one after the other; a done evaluation has its result.json
 * stored, one that ends without it fails saying so, a crash carries its log. */
static void evaluations_share_the_queue(void **state)
{
    fixture *f = *state;
    int64_t job = add_job(f, "done", true);
    int64_t ev = add_eval(f, job, "eval_done");
    int64_t bad = add_eval(f, job, "done");        /* reports done without a result.json */
    int64_t crash = add_eval(f, job, "crash");
    start(f, 1);
    store_eval e = wait_eval(f, ev, "done", 10);
    assert_string_equal(e.result_json, "{\"count\":4,\"top1_accuracy\":0.75}");
    assert_true(e.progress == 1);
    assert_non_null(e.started_at);
    store_eval_clear(&e);
    e = wait_eval(f, bad, "failed", 10);
    assert_non_null(strstr(e.error, "without a readable result.json"));
    assert_null(e.result_json);
    store_eval_clear(&e);
    e = wait_eval(f, crash, "failed", 10);
    assert_non_null(strstr(e.error, "worker exited with status 3"));
    assert_non_null(strstr(e.error, "something went badly wrong"));
    store_eval_clear(&e);
    store_job j = wait_status(f, job, "done", 10);
    store_job_clear(&j);
    /* one slot: each ended before the next started */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/order", f->data);
    char *order = slurp(path);
    const char *p = order;
    for (int k = 0; k < 4; k++) {
        char start[32], end[32];
        int a = 0, b = 0;
        assert_int_equal(sscanf(p, "%31s %d\n%31s %d\n", start, &a, end, &b), 4);
        assert_string_equal(start, "start");
        assert_string_equal(end, "end");
        assert_int_equal(a, b);
        for (int line = 0; line < 2; line++)
            p = strchr(p, '\n') + 1;
    }
    free(order);
}

/* Cancel: a queued evaluation at once, a running one by SIGTERM; at start,
 * one left running by a dead server runs again. */
static void evaluations_cancel_and_requeue(void **state)
{
    fixture *f = *state;
    int64_t job = add_job(f, "done", true);
    int64_t running = add_eval(f, job, "wait");
    int64_t queued = add_eval(f, job, "eval_done");
    int64_t left = add_eval(f, job, "eval_done");
    assert_int_equal(store_eval_set_status(f->st, left, "running", NULL), 0);   /* a dead server's */
    start(f, 1);
    assert_int_equal(sched_cancel_eval(f->s, queued), 0);
    store_eval e = wait_eval(f, queued, "cancelled", 5);
    store_eval_clear(&e);
    e = wait_eval(f, running, "running", 10);     /* after the job, in the one slot */
    store_eval_clear(&e);
    e = wait_eval(f, left, "queued", 1);          /* requeued at start; waits for the slot */
    store_eval_clear(&e);
    assert_int_equal(sched_cancel_eval(f->s, running), 0);
    e = wait_eval(f, running, "cancelled", 10);
    assert_null(e.result_json);
    store_eval_clear(&e);
    e = wait_eval(f, left, "done", 10);
    store_eval_clear(&e);
    assert_int_equal(sched_cancel_eval(f->s, running), SCHED_ALREADY_ENDED);
    assert_int_equal(sched_cancel_eval(f->s, 9999), STORE_NOT_FOUND);
    store_job j = wait_status(f, job, "done", 10);
    store_job_clear(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_finished_worker_is_done_with_its_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(failures_carry_their_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_queued_running_and_stubborn, setup, teardown),
        cmocka_unit_test_setup_teardown(gpu_jobs_get_their_own_gpus, setup, teardown),
        cmocka_unit_test_setup_teardown(priority_orders_the_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(waits_for_job_json_and_requeues_after_a_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(a_requeued_job_keeps_metrics_up_to_its_checkpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stop_requeues_running_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(evaluations_share_the_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(evaluations_cancel_and_requeue, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
