/* tests/unit/test_jobspec.c: POST /api/v1/jobs bodies -> jobs (jobs/jobspec.h),
 * against a temporary data directory with a fake ready dataset (only its
 * header.json: validation never reads the images). */
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
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "db/store.h"
#include "engine/dataset.h"
#include "engine/net.h"       /* engine_devices */
#include "base/layout.h"
#include "jobs/jobreq.h"
#include "jobs/jobspec.h"
#include "tests/unit/jobcfg_util.h"

typedef struct fixture {
    char data[64];
    char abs_data[PATH_MAX];
    store *st;
    int64_t ready, importing, failed;
} fixture;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

/* A ready dataset of 100 train / 20 val 1x28x28 digits in 10 classes. */
static int64_t make_ready_dataset(fixture *f)
{
    int64_t id = 0;
    char err[256], dir[PATH_MAX + 64];
    assert_int_equal(store_dataset_insert(f->st, "digits", &id, err, sizeof err), 0);
    snprintf(dir, sizeof dir, "%s/datasets", f->data);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/datasets/%lld", f->data, (long long)id);
    assert_int_equal(mkdir(dir, 0755), 0);

    static char names[10][2];
    char *classes[10];
    for (int i = 0; i < 10; i++) {
        names[i][0] = (char)('0' + i);
        names[i][1] = '\0';
        classes[i] = names[i];
    }
    ds_info info;
    memset(&info, 0, sizeof info);
    info.c = 1;
    info.h = 28;
    info.w = 28;
    info.nclasses = 10;
    info.classes = classes;
    info.train_count = 100;
    info.val_count = 20;
    info.mean[0] = 33.3f;
    snprintf(info.resize, sizeof info.resize, "squash");
    if (ds_info_save(dir, &info, "test_jobspec", err, sizeof err) != 0)
        fail_msg("ds_info_save: %s", err);
    assert_int_equal(store_dataset_finish(f->st, id, "ready", "{}", NULL), 0);
    return id;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->data, sizeof f->data, "/tmp/kiln-test-jobspec-XXXXXX");
    if (!mkdtemp(f->data) || !realpath(f->data, f->abs_data))
        return -1;
    char path[PATH_MAX], err[256];
    snprintf(path, sizeof path, "%s/kiln.db", f->data);
    f->st = store_open(path, err, sizeof err);
    if (!f->st)
        return -1;
    f->ready = make_ready_dataset(f);
    assert_int_equal(store_dataset_insert(f->st, "half", &f->importing, err, sizeof err), 0);
    assert_int_equal(store_dataset_insert(f->st, "broken", &f->failed, err, sizeof err), 0);
    assert_int_equal(store_dataset_finish(f->st, f->failed, "failed", NULL, "no images"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->st);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->data);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->data);
    free(f);
    return 0;
}

static int create_from(fixture *f, const char *json, int64_t *id, api_error *e)
{
    cJSON *body = cJSON_Parse(json);
    assert_non_null(body);
    int rc = jobspec_create(f->st, f->data, body, id, e);
    cJSON_Delete(body);
    return rc;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static void defaults_are_filled_and_job_json_written(void **state)
{
    fixture *f = *state;
    char body[128];
    snprintf(body, sizeof body, "{\"dataset_id\": %lld, \"network\": \"lenet\"}", (long long)f->ready);
    int64_t id = 0;
    api_error e;
    if (create_from(f, body, &id, &e) != 0)
        fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
    assert_true(id > 0);

    char dir[PATH_MAX], path[PATH_MAX + 16], want_dir[PATH_MAX + 64];
    layout_job_dir(dir, sizeof dir, f->data, id);
    snprintf(path, sizeof path, "%s/job.json", dir);
    char *text = slurp(path);
    assert_non_null(text);
    snprintf(path, sizeof path, "%s/job.json.tmp", dir);
    assert_int_equal(access(path, F_OK), -1);          /* no temporary left behind */

    cJSON *c = cJSON_Parse(text);
    assert_non_null(c);
    assert_int_equal((int64_t)num(c, "id"), id);
    assert_int_equal((int64_t)num(c, "dataset_id"), f->ready);
    snprintf(want_dir, sizeof want_dir, "%s/datasets/%lld", f->abs_data, (long long)f->ready);
    assert_string_equal(str(c, "dataset_dir"), want_dir);
    assert_true(str(c, "dataset_dir")[0] == '/');
    assert_string_equal(str(c, "network_name"), "lenet");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(c, "network");
    assert_true(cJSON_IsObject(spec));
    assert_true(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(spec, "layers")) >= 4);
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(c, "input");
    assert_int_equal(cJSON_GetArraySize(input), 3);
    assert_int_equal(cJSON_GetArrayItem(input, 0)->valueint, 1);
    assert_int_equal(cJSON_GetArrayItem(input, 1)->valueint, 28);
    assert_int_equal(cJSON_GetArrayItem(input, 2)->valueint, 28);
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(c, "classes");
    assert_int_equal(cJSON_GetArraySize(classes), 10);
    assert_string_equal(cJSON_GetArrayItem(classes, 7)->valuestring, "7");
    assert_int_equal((int)num(c, "epochs"), 10);
    assert_int_equal((int)num(c, "batch_size"), 64);
    assert_string_equal(str(c, "precision"), "fp32");
    engine_device devs[17];
    bool gpus = engine_devices(devs, 17) > 1;
    assert_string_equal(str(c, "backend"), gpus ? "cuda" : "cpu");   /* a GPU when there is one */
    assert_int_equal((int)num(c, "seed"), 1);
    assert_int_equal((int)num(c, "snapshot_interval"), 1);
    const cJSON *solver = cJSON_GetObjectItemCaseSensitive(c, "solver");
    assert_string_equal(str(solver, "type"), "sgd");
    assert_true(num(solver, "lr") == 0.01);
    assert_true(num(solver, "momentum") == 0.9);
    assert_true(num(solver, "weight_decay") == 0);
    assert_null(cJSON_GetObjectItemCaseSensitive(c, "name"));

    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    assert_string_equal(j.status, "queued");
    assert_string_equal(j.network, "lenet");
    assert_int_equal(j.dataset_id, f->ready);
    assert_int_equal(j.epochs, 10);
    assert_int_equal(j.steps, 10 * 1);                 /* floor(100 / 64) = 1 per epoch (the last
                                                        * short batch dropped) */
    assert_string_equal(j.config_json, text);          /* the store holds what the file holds */
    store_job_clear(&j);
    cJSON_Delete(c);
    free(text);
}

static void given_values_are_kept(void **state)
{
    fixture *f = *state;
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset_id\": %lld, \"network\": \"lenet\", \"epochs\": 2, \"batch_size\": 32, "
             "\"seed\": 7, \"snapshot_interval\": 2, \"precision\": \"fp32\", \"name\": \"try 1\", "
             "\"solver\": {\"type\": \"sgd\", \"lr\": 0.05, \"momentum\": 0, \"weight_decay\": 0.0005}}",
             (long long)f->ready);
    int64_t id = 0;
    api_error e;
    if (create_from(f, body, &id, &e) != 0)
        fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    cJSON *c = cJSON_Parse(j.config_json);
    assert_non_null(c);
    assert_int_equal((int)num(c, "epochs"), 2);
    assert_int_equal((int)num(c, "batch_size"), 32);
    assert_int_equal((int)num(c, "seed"), 7);
    assert_int_equal((int)num(c, "snapshot_interval"), 2);
    assert_string_equal(str(c, "name"), "try 1");
    const cJSON *solver = cJSON_GetObjectItemCaseSensitive(c, "solver");
    assert_true(num(solver, "lr") == 0.05);
    assert_true(num(solver, "momentum") == 0);
    assert_true(num(solver, "weight_decay") == 0.0005);
    assert_int_equal(j.steps, 2 * 3);                  /* floor(100 / 32) = 3 per epoch */
    cJSON_Delete(c);
    store_job_clear(&j);
}

/* "devices": 0 or [] is the CPU everywhere; a GPU asked of a machine
 * without one, or more GPUs than it has, is a 422 naming the problem; a
 * malformed list a 400. Several GPUs go into job.json as "gpu_count" and the
 * "gpus" named, which jobcfg reads back (as the scheduler does). */
/* The GPUs a job asks for: 0 for a CPU job. */
static int gpu_count(const jobcfg *c)
{
    return c->devices.kind == BACKEND_CUDA ? c->devices.count : 0;
}

static void devices_field(void **state)
{
    fixture *f = *state;
    engine_device devs[17];
    int gpus = engine_devices(devs, 17) - 1;
    char body[256];
    int64_t id = 0;
    api_error e;
    const struct { const char *devices; int status; const char *code; int count; int first; }
    cases[] = {
        { "0", 0, NULL, 0, -1 },
        { "[]", 0, NULL, 0, -1 },
        { "1", gpus ? 0 : 422, gpus ? NULL : "no_gpu", 1, -1 },
        { "[0]", gpus ? 0 : 422, gpus ? NULL : "no_gpu", 1, 0 },
        { "2", gpus >= 2 ? 0 : 422, gpus >= 2 ? NULL : gpus ? "unknown_device" : "no_gpu", 2, -1 },
        { "[1, 0]", gpus >= 2 ? 0 : 422, gpus >= 2 ? NULL : gpus ? "unknown_device" : "no_gpu", 2,
          1 },
        { "[0, 0]", 400, "invalid_field", 0, 0 },         /* twice */
        { "\"all\"", 400, "invalid_field", 0, 0 },
        { "[-1]", 400, "invalid_field", 0, 0 },
        { "[0, \"1\"]", 400, "invalid_field", 0, 0 },
        { "1.5", 400, "invalid_field", 0, 0 },
        { "2, \"batch_size\": 1", 400, "invalid_field", 0, 0 },  /* an image for each GPU */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "{\"dataset_id\": %lld, \"network\": \"lenet\", "
                 "\"devices\": %s}", (long long)f->ready, cases[i].devices);
        int rc = create_from(f, body, &id, &e);
        if (cases[i].status == 0) {
            if (rc != 0)
                fail_msg("devices %s: %d %s: %s", cases[i].devices, e.status, e.code,
                         e.message);
            store_job j;
            assert_int_equal(store_job_get(f->st, id, &j), 0);
            cJSON *c = cJSON_Parse(j.config_json);
            assert_string_equal(str(c, "backend"), cases[i].count ? "cuda" : "cpu");
            jobcfg cfg;
            assert_int_equal(jobcfg_from_json(c, JOBCFG_RESOLVED, &cfg, &e), 0);
            assert_int_equal(gpu_count(&cfg), cases[i].count);
            assert_int_equal(cfg.devices.listed, cases[i].first >= 0);
            if (cfg.devices.listed)
                assert_int_equal(cfg.devices.ids[0], cases[i].first);
            jobcfg_free(&cfg);
            cJSON_Delete(c);
            store_job_clear(&j);
            continue;
        }
        if (rc == 0 || e.status != cases[i].status || strcmp(e.code, cases[i].code) != 0)
            fail_msg("devices %s: got %d %s (%s), want %d %s", cases[i].devices,
                     rc ? e.status : 0, rc ? e.code : "-", rc ? e.message : "",
                     cases[i].status, cases[i].code);
        assert_non_null(strstr(e.message, "GPU"));
    }
}

/* jobcfg reads job.json's devices as written now and as written before jobs
 * could have several GPUs ("gpu": a number, -1 for any). */
static void gpus_of_job_json(void **state)
{
    (void)state;
    const struct { const char *json; int count; bool listed; int first; } cases[] = {
        { "{\"backend\": \"cpu\"}", 0, false, 0 },
        { "{\"backend\": \"cpu\", \"gpu\": -1}", 0, false, 0 },
        { "{\"backend\": \"cuda\", \"gpu\": -1}", 1, false, 0 },
        { "{\"backend\": \"cuda\", \"gpu\": 3}", 1, true, 3 },
        { "{\"backend\": \"cuda\", \"gpus\": [], \"gpu_count\": 4}", 4, false, 0 },
        { "{\"backend\": \"cuda\", \"gpus\": [2, 5], \"gpu_count\": 2}", 2, true, 2 },
        { "{}", 0, false, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *c = job_json_with(cases[i].json);
        jobcfg cfg;
        api_error e;
        if (jobcfg_from_json(c, JOBCFG_RESOLVED, &cfg, &e) != 0)
            fail_msg("%s: %s", cases[i].json, e.message);
        assert_int_equal(gpu_count(&cfg), cases[i].count);
        assert_int_equal(cfg.devices.listed, cases[i].listed);
        assert_int_equal(cfg.devices.listed ? cfg.devices.ids[0] : 0, cases[i].first);
        jobcfg_free(&cfg);
        cJSON_Delete(c);
    }
}

/* Mixed precision: the precision is kept, and dynamic loss scaling is on by
 * default for amp-fp16 only (DESIGN.md, AMP), unless the request says. */
static void precision_and_loss_scaling(void **state)
{
    fixture *f = *state;
    const struct { const char *extra, *precision, *scaling; } cases[] = {
        { "\"precision\": \"amp-fp16\"", "amp-fp16", "dynamic" },
        { "\"precision\": \"amp-bf16\"", "amp-bf16", "off" },
        { "\"precision\": \"amp-bf16\", \"loss_scaling\": \"dynamic\"", "amp-bf16", "dynamic" },
        { "\"precision\": \"amp-fp16\", \"loss_scaling\": \"off\"", "amp-fp16", "off" },
        { "\"precision\": \"fp32\"", "fp32", "off" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"dataset_id\": %lld, \"network\": \"lenet\", %s}",
                 (long long)f->ready, cases[i].extra);
        int64_t id = 0;
        api_error e;
        if (create_from(f, body, &id, &e) != 0)
            fail_msg("%s: %d %s: %s", body, e.status, e.code, e.message);
        store_job j;
        assert_int_equal(store_job_get(f->st, id, &j), 0);
        cJSON *c = cJSON_Parse(j.config_json);
        assert_string_equal(str(c, "precision"), cases[i].precision);
        assert_string_equal(str(c, "loss_scaling"), cases[i].scaling);
        cJSON_Delete(c);
        store_job_clear(&j);
    }
}

static void optimizer_options_are_resolved(void **state)
{
    fixture *f = *state;
    char body[768];
    snprintf(body, sizeof body,
             "{\"dataset_id\": %lld, \"network\": \"lenet\", \"epochs\": 3, \"batch_size\": 32, "
             "\"solver\": {\"type\": \"adamw\", \"lr\": 0.001, \"beta2\": 0.99, "
             "\"weight_decay\": 0.01, \"clip_norm\": 5, \"label_smoothing\": 0.1}, "
             "\"lr_policy\": {\"type\": \"cosine\", \"warmup_epochs\": 1}}",
             (long long)f->ready);
    int64_t id = 0;
    api_error e;
    if (create_from(f, body, &id, &e) != 0)
        fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    cJSON *c = cJSON_Parse(j.config_json);
    const cJSON *solver = cJSON_GetObjectItemCaseSensitive(c, "solver");
    assert_string_equal(str(solver, "type"), "adamw");
    assert_true(num(solver, "beta1") == 0.9);
    assert_true(num(solver, "beta2") == 0.99);
    assert_true(num(solver, "eps") == 1e-8);
    assert_true(num(solver, "clip_norm") == 5);
    assert_true(num(solver, "label_smoothing") == 0.1);
    assert_true(num(solver, "weight_decay") == 0.01);
    assert_null(cJSON_GetObjectItemCaseSensitive(solver, "momentum"));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(solver, "decay_bias")));
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "lr_policy");
    assert_string_equal(str(lp, "type"), "cosine");
    assert_true(num(lp, "warmup_steps") == 3);         /* 1 epoch = floor(100 / 32) steps */
    assert_true(num(lp, "min_lr") == 0);
    cJSON_Delete(c);
    store_job_clear(&j);

    snprintf(body, sizeof body,
             "{\"dataset_id\": %lld, \"network\": \"lenet\", "
             "\"solver\": {\"nesterov\": true, \"larc\": {\"policy\": \"scale\"}}}",
             (long long)f->ready);
    if (create_from(f, body, &id, &e) != 0)
        fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    c = cJSON_Parse(j.config_json);
    solver = cJSON_GetObjectItemCaseSensitive(c, "solver");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(solver, "nesterov")));
    assert_true(num(solver, "momentum") == 0.9);
    const cJSON *larc = cJSON_GetObjectItemCaseSensitive(solver, "larc");
    assert_string_equal(str(larc, "policy"), "scale");
    assert_true(num(larc, "eta") == 0.001);
    assert_string_equal(str(cJSON_GetObjectItemCaseSensitive(c, "lr_policy"), "type"), "fixed");
    cJSON_Delete(c);
    store_job_clear(&j);
}

static void a_spec_object_is_validated_and_kept(void **state)
{
    fixture *f = *state;
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset_id\": %lld, \"network\": {\"name\": \"tiny\", \"layers\": ["
             "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 16}, {\"type\": \"relu\"}, "
             "{\"type\": \"dense\", \"units\": \"classes\"}]}}",
             (long long)f->ready);
    int64_t id = 0;
    api_error e;
    if (create_from(f, body, &id, &e) != 0)
        fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
    store_job j;
    assert_int_equal(store_job_get(f->st, id, &j), 0);
    assert_string_equal(j.network, "tiny");
    cJSON *c = cJSON_Parse(j.config_json);
    assert_string_equal(str(c, "network_name"), "tiny");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "network"), "layers");
    assert_int_equal(cJSON_GetArraySize(layers), 4);
    cJSON_Delete(c);
    store_job_clear(&j);
}

typedef struct bad_case {
    const char *what;
    const char *body;        /* {R}: the ready dataset, {I} importing, {F} failed */
    int status;
    const char *code;
    const char *mention;     /* the message names this */
} bad_case;

static const bad_case bad_cases[] = {
    { "not an object", "[1, 2]", 400, "invalid_request", "object" },
    { "unknown field", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"bogus\": 1}", 400,
      "unknown_field", "bogus" },
    { "unknown solver field",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"sgd\", \"nesterovv\": true}}",
      400, "unknown_field", "solver.nesterovv" },
    { "unknown larc field",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"larc\": {\"policy\": \"clip\", \"rate\": 1}}}",
      400, "unknown_field", "solver.larc.rate" },
    { "unknown lr_policy field",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"lr_policy\": {\"type\": \"step\", \"power\": 2}}",
      400, "unknown_field", "lr_policy.power" },
    { "lr_policy type unknown",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"lr_policy\": {\"type\": \"triangle\"}}",
      400, "invalid_field", "lr_policy.type" },
    { "lr_policy gamma out of range",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"lr_policy\": {\"type\": \"step\", \"step_size\": 5, \"gamma\": 2}}",
      400, "invalid_field", "lr_policy.gamma" },
    { "larc policy unknown",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"larc\": {\"policy\": \"max\"}}}",
      400, "invalid_field", "solver.larc.policy" },
    { "larc with adam",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"adam\", \"larc\": {}}}",
      400, "invalid_field", "solver.larc is for type sgd" },
    { "momentum with adamw",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"adamw\", \"momentum\": 0.9}}",
      400, "invalid_field", "solver.momentum" },
    { "beta1 with sgd",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"beta1\": 0.9}}",
      400, "invalid_field", "solver.beta1 is for types adam and adamw" },
    { "beta2 1", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"adam\", \"beta2\": 1}}",
      400, "invalid_field", "solver.beta2" },
    { "eps 0", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"adam\", \"eps\": 0}}",
      400, "invalid_field", "solver.eps" },
    { "nesterov without momentum",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"momentum\": 0, \"nesterov\": true}}",
      400, "invalid_field", "solver.nesterov" },
    { "clip_norm negative",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"clip_norm\": -1}}",
      400, "invalid_field", "solver.clip_norm" },
    { "label_smoothing 1",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"label_smoothing\": 1}}",
      400, "invalid_field", "solver.label_smoothing" },
    { "decay_bias not a boolean",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"decay_bias\": 1}}",
      400, "invalid_field", "solver.decay_bias" },
    { "field given twice", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"epochs\": 1, \"epochs\": 2}",
      400, "invalid_field", "epochs" },
    { "missing dataset_id", "{\"network\": \"lenet\"}", 400, "missing_field", "dataset_id" },
    { "missing network", "{\"dataset_id\": {R}}", 400, "missing_field", "network" },
    { "network of a wrong type", "{\"dataset_id\": {R}, \"network\": 5}", 400, "invalid_field", "network" },
    { "dataset_id a string", "{\"dataset_id\": \"1\", \"network\": \"lenet\"}", 400, "invalid_field",
      "dataset_id" },
    { "epochs a string", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"epochs\": \"two\"}", 400,
      "invalid_field", "epochs must be an integer from 1 to 10000" },
    { "epochs 0", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"epochs\": 0}", 400, "invalid_field",
      "epochs" },
    { "epochs not whole", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"epochs\": 1.5}", 400,
      "invalid_field", "epochs" },
    { "epochs a boolean", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"epochs\": true}", 400,
      "invalid_field", "epochs" },
    { "batch_size too large", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"batch_size\": 5000}",
      400, "invalid_field", "batch_size must be an integer from 1 to 4096" },
    { "negative lr", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"lr\": -1}}", 400,
      "invalid_field", "solver.lr" },
    { "momentum 1", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"momentum\": 1}}", 400,
      "invalid_field", "solver.momentum" },
    { "solver not an object", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": \"sgd\"}", 400,
      "invalid_field", "solver" },
    { "seed negative", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"seed\": -1}", 400,
      "invalid_field", "seed" },
    { "precision unknown", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"precision\": \"fp64\"}",
      400, "invalid_field", "precision" },
    { "loss scaling for fp32", "{\"dataset_id\": {R}, \"network\": \"lenet\", "
      "\"loss_scaling\": \"dynamic\"}", 400, "invalid_field", "loss_scaling" },
    { "loss scaling unknown", "{\"dataset_id\": {R}, \"network\": \"lenet\", "
      "\"precision\": \"amp-fp16\", \"loss_scaling\": \"static\"}", 400, "invalid_field",
      "loss_scaling" },
    { "solver unknown", "{\"dataset_id\": {R}, \"network\": \"lenet\", \"solver\": {\"type\": \"rmsprop\"}}",
      400, "invalid_field", "solver.type" },
    { "dataset missing", "{\"dataset_id\": 98765, \"network\": \"lenet\"}", 422, "dataset_not_found",
      "98765" },
    { "dataset importing", "{\"dataset_id\": {I}, \"network\": \"lenet\"}", 409, "dataset_not_ready",
      "importing" },
    { "dataset failed", "{\"dataset_id\": {F}, \"network\": \"lenet\"}", 409, "dataset_not_ready",
      "no images" },
    { "unknown network", "{\"dataset_id\": {R}, \"network\": \"no-such-net\"}", 422, "unknown_network",
      "lenet" },
    { "unknown layer type",
      "{\"dataset_id\": {R}, \"network\": {\"layers\": [{\"type\": \"warp\"}, "
      "{\"type\": \"dense\", \"units\": \"classes\"}]}}",
      422, "invalid_network", "warp" },
    { "impossible shape",
      "{\"dataset_id\": {R}, \"network\": {\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, "
      "\"kernel\": 40}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]}}",
      422, "invalid_network", "layer 1" },
    { "crop larger than the images",
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"augmentation\": {\"crop\": 29}}",
      400, "invalid_field", "augmentation.crop 29 is larger than the dataset's 28x28 images" },
    { "network too large for the crop",       /* checked with the crop's input, 4x4 */
      "{\"dataset_id\": {R}, \"network\": \"lenet\", \"augmentation\": {\"crop\": 4}}",
      422, "invalid_network", "4x4" },
};

/* body with {R}, {I} and {F} replaced by the datasets' ids. */
/* job.json read back; the caller frees it. */
static cJSON *job_json(const fixture *f, int64_t id)
{
    char dir[PATH_MAX], path[PATH_MAX + 16];
    layout_job_dir(dir, sizeof dir, f->data, id);
    snprintf(path, sizeof path, "%s/job.json", dir);
    char *text = slurp(path);
    assert_non_null(text);
    cJSON *c = cJSON_Parse(text);
    free(text);
    assert_non_null(c);
    return c;
}

/* jobreq_from_config: the request rebuilt from a job's job.json makes the
 * same job again (every field but the id), built-in or custom network, and
 * overrides merged or set by path change only what they name. */
static void a_request_rebuilt_from_job_json_makes_the_same_job(void **state)
{
    fixture *f = *state;
    const char *const bodies[] = {
        "{\"dataset_id\": %lld, \"network\": \"lenet\", \"epochs\": 3, \"batch_size\": 16, "
        "\"seed\": 11, \"name\": \"try 2\", \"precision\": \"amp-bf16\", \"devices\": 0, "
        "\"solver\": {\"type\": \"sgd\", \"lr\": 0.02, \"momentum\": 0.8, \"nesterov\": true, "
        "\"weight_decay\": 0.0001, \"larc\": {\"policy\": \"clip\"}}, "
        "\"lr_policy\": {\"type\": \"cosine\", \"warmup_epochs\": 1}, "
        "\"augmentation\": {\"mirror\": true}, \"early_stopping\": {\"patience\": 2}}",
        "{\"dataset_id\": %lld, \"network\": {\"name\": \"tiny\", \"layers\": ["
        "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 16}, {\"type\": \"relu\"}, "
        "{\"type\": \"dense\", \"units\": \"classes\"}]}, \"keep_checkpoints\": 2}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, bodies[i], (long long)f->ready);
        int64_t a = 0, b = 0;
        api_error e;
        if (create_from(f, body, &a, &e) != 0)
            fail_msg("jobspec_create: %d %s: %s", e.status, e.code, e.message);
        cJSON *ca = job_json(f, a);
        cJSON *req = jobreq_from_config(ca, &e);
        if (!req)
            fail_msg("jobreq_from_config: %s", e.message);
        const cJSON *rnet = cJSON_GetObjectItemCaseSensitive(req, "network");
        assert_true(i == 0 ? cJSON_IsString(rnet) : cJSON_IsObject(rnet));
        assert_null(cJSON_GetObjectItemCaseSensitive(req, "dataset_dir"));
        if (jobspec_create(f->st, f->data, req, &b, &e) != 0)
            fail_msg("the rebuilt request: %d %s: %s", e.status, e.code, e.message);
        cJSON *cb = job_json(f, b);
        assert_int_not_equal(a, b);
        cJSON_DeleteItemFromObjectCaseSensitive(ca, "id");
        cJSON_DeleteItemFromObjectCaseSensitive(cb, "id");
        if (!cJSON_Compare(ca, cb, true)) {
            char *x = cJSON_PrintUnformatted(ca), *y = cJSON_PrintUnformatted(cb);
            fail_msg("job %zu made again differs:\n%s\n%s", i, x, y);
        }

        /* Overrides: a nested field, a removed one (back to its default), a path. */
        cJSON *o = cJSON_Parse("{\"solver\": {\"lr\": 0.5}, \"name\": null, \"epochs\": 1}");
        cJSON *v = cJSON_CreateNumber(64);
        assert_int_equal(jobreq_merge(req, o, &e), 0);
        assert_int_equal(jobreq_set(req, "batch_size", v, &e), 0);
        int64_t c = 0;
        if (jobspec_create(f->st, f->data, req, &c, &e) != 0)
            fail_msg("the overridden request: %d %s: %s", e.status, e.code, e.message);
        cJSON *cc = job_json(f, c);
        cJSON *solver = cJSON_GetObjectItemCaseSensitive(cc, "solver");
        assert_true(num(solver, "lr") == 0.5);
        assert_int_equal((int)num(cc, "epochs"), 1);
        assert_int_equal((int)num(cc, "batch_size"), 64);
        assert_null(cJSON_GetObjectItemCaseSensitive(cc, "name"));
        if (i == 0)   /* the rest of the solver is the source's */
            assert_true(num(solver, "momentum") == 0.8);
        cJSON_Delete(o);
        cJSON_Delete(v);
        cJSON_Delete(cc);
        cJSON_Delete(req);
        cJSON_Delete(ca);
        cJSON_Delete(cb);
    }
}

/* jobreq_set and jobreq_merge refuse what cannot be a request's change. */
static void bad_overrides_are_refused(void **state)
{
    (void)state;
    cJSON *req = cJSON_Parse("{\"network\": \"lenet\", \"solver\": {\"lr\": 0.1}}");
    cJSON *v = cJSON_CreateNumber(1);
    api_error e;
    const char *const paths[] = { "", "solver.", ".lr", "a..b", "network.layers" };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        memset(&e, 0, sizeof e);
        assert_int_equal(jobreq_set(req, paths[i], v, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.code, "invalid_field");
    }
    cJSON *arr = cJSON_CreateArray();
    assert_int_equal(jobreq_merge(req, arr, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(jobreq_set(req, "solver.lr", v, &e), 0);
    assert_true(num(cJSON_GetObjectItemCaseSensitive(req, "solver"), "lr") == 1);
    cJSON *bad = cJSON_Parse("{\"lr_policy\": {\"type\": \"step\"}}");
    assert_null(jobreq_from_config(bad, &e));
    assert_int_equal(e.status, 400);
    cJSON_Delete(bad);
    cJSON_Delete(arr);
    cJSON_Delete(v);
    cJSON_Delete(req);
}

static void fill_ids(const fixture *f, const char *tmpl, char *out, size_t n)
{
    size_t used = 0;
    for (const char *p = tmpl; *p && used + 24 < n; p++) {
        int64_t id = !strncmp(p, "{R}", 3) ? f->ready : !strncmp(p, "{I}", 3) ? f->importing
                     : !strncmp(p, "{F}", 3) ? f->failed : -1;
        if (id >= 0) {
            used += (size_t)snprintf(out + used, n - used, "%lld", (long long)id);
            p += 2;
        } else {
            out[used++] = *p;
        }
    }
    out[used] = '\0';
}

static void bad_requests_are_refused_by_name(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        char body[1024];
        fill_ids(f, c->body, body, sizeof body);
        int64_t id = -7;
        api_error e;
        int rc = create_from(f, body, &id, &e);
        if (rc != -1 || e.status != c->status || strcmp(e.code, c->code) != 0 ||
            !strstr(e.message, c->mention))
            fail_msg("%s: got rc %d, %d %s \"%s\"; want %d %s mentioning \"%s\"", c->what, rc,
                     e.status, e.code, e.message, c->status, c->code, c->mention);
        assert_int_equal(id, -7);               /* untouched on failure */
        if (getenv("KILN_TEST_VERBOSE"))
            fprintf(stderr, "%-24s %d %s: %s\n", c->what, e.status, e.code, e.message);
    }
    /* None of them created a job or a job folder. */
    store_job *list = NULL;
    size_t n = 0;
    assert_int_equal(store_job_list(f->st, &list, &n), 0);
    assert_int_equal(n, 0);
    store_job_list_free(list, n);
    char jobs[PATH_MAX + 8];
    snprintf(jobs, sizeof jobs, "%s/jobs/1", f->data);
    assert_int_equal(access(jobs, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(defaults_are_filled_and_job_json_written, setup, teardown),
        cmocka_unit_test_setup_teardown(given_values_are_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(optimizer_options_are_resolved, setup, teardown),
        cmocka_unit_test_setup_teardown(precision_and_loss_scaling, setup, teardown),
        cmocka_unit_test_setup_teardown(devices_field, setup, teardown),
        cmocka_unit_test(gpus_of_job_json),
        cmocka_unit_test_setup_teardown(a_spec_object_is_validated_and_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_requests_are_refused_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(a_request_rebuilt_from_job_json_makes_the_same_job, setup,
                                        teardown),
        cmocka_unit_test(bad_overrides_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
