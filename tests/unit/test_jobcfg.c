/* Unit tests of jobs/jobcfg.c: a job's configuration, read and written.
 *
 * - Round trips: jobcfg_to_json then jobcfg_from_json (job.json's form) gives
 *   the same configuration back, for each solver, precision and device form.
 * - Limits: every scalar field of the published schema (jobcfg_schema, what
 *   GET /api/v1/schema serves) is accepted at its bounds and refused just past
 *   them with the same message in all three places a job is read: an API
 *   request, kiln train's request, and a hand-edited job.json read by the
 *   worker (jobcfg_load). The test takes the bounds from the schema, so it
 *   checks that the schema and the readers agree, not a copy of the table.
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "engine/fileio.h"
#include "jobs/jobcfg.h"
#include "jobs/ranks.h"
#include "tests/unit/jobcfg_util.h"

/* The smallest request: an API one, or kiln train's (no dataset_id). */
static cJSON *request_of(jobcfg_form form)
{
    cJSON *r = cJSON_Parse(form == JOBCFG_REQUEST ? "{\"dataset_id\": 1, \"network\": \"lenet\"}"
                                                  : "{\"network\": \"lenet\"}");
    assert_non_null(r);
    return r;
}

/* obj's object at "solver", "solver.larc" or "augmentation" (made when missing). */
static cJSON *object_at(cJSON *root, const char *obj)
{
    if (!obj[0])
        return root;
    if (!strcmp(obj, "augmentation") || !strcmp(obj, "early_stopping")) {
        cJSON *a = cJSON_GetObjectItemCaseSensitive(root, obj);
        return a ? a : cJSON_AddObjectToObject(root, obj);
    }
    cJSON *solver = cJSON_GetObjectItemCaseSensitive(root, "solver");
    if (!solver)
        solver = cJSON_AddObjectToObject(root, "solver");
    if (!strcmp(obj, "solver"))
        return solver;
    cJSON *larc = cJSON_GetObjectItemCaseSensitive(solver, "larc");
    return larc ? larc : cJSON_AddObjectToObject(solver, "larc");
}

/* Sets path ("epochs", "solver.lr", "solver.larc.eta") in root to v, and what
 * the field needs to be valid besides: adam's fields need type adam. */
static void set_path(cJSON *root, const char *path, const cJSON *v, const cJSON *field_schema)
{
    char obj[32] = "";
    const char *key = strrchr(path, '.');
    if (key) {
        snprintf(obj, sizeof obj, "%.*s", (int)(key - path), path);
        key++;
    } else {
        key = path;
    }
    cJSON *o = object_at(root, obj);
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddItemToObject(o, key, cJSON_Duplicate(v, 1));
    const cJSON *solvers = cJSON_GetObjectItemCaseSensitive(field_schema, "solvers");
    const cJSON *first = cJSON_GetArrayItem(solvers, 0);
    if (cJSON_IsString(first)) {
        cJSON *s = object_at(root, "solver");
        cJSON_DeleteItemFromObjectCaseSensitive(s, "type");
        cJSON_AddStringToObject(s, "type", first->valuestring);
    }
    if (!strcmp(path, "loss_scaling")) {          /* "dynamic" is for mixed precision */
        cJSON_DeleteItemFromObjectCaseSensitive(root, "precision");
        cJSON_AddStringToObject(root, "precision", "amp-fp16");
    }
    if (!strncmp(path, "augmentation.", 13) && cJSON_GetObjectItemCaseSensitive(root, "input")) {
        /* job.json's images, large enough for any crop the table allows */
        cJSON_DeleteItemFromObjectCaseSensitive(root, "input");
        cJSON_AddItemToObject(root, "input", cJSON_CreateIntArray((const int[]){ 1, 65535, 65535 }, 3));
    }
}

/* Reads `path` = v in each form; returns the number of forms that accepted
 * it, and checks they all agree (and all refusals say the same). */
static int accepted_everywhere(const char *path, const cJSON *v, const cJSON *field_schema,
                               const char *dir)
{
    static const jobcfg_form forms[] = { JOBCFG_REQUEST, JOBCFG_LOCAL_REQUEST, JOBCFG_RESOLVED };
    char first_msg[sizeof ((api_error *)0)->message] = "";
    int ok = 0;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        cJSON *root = forms[i] == JOBCFG_RESOLVED ? job_json_with("{}")
                                                  : request_of(forms[i]);
        set_path(root, path, v, field_schema);
        if (forms[i] == JOBCFG_RESOLVED) {
            /* through the file, as the worker reads it */
            char *text = cJSON_Print(root), file[PATH_MAX], err[256];
            snprintf(file, sizeof file, "%s/job.json", dir);
            assert_int_equal(fio_write_atomic(file, text, strlen(text), err, sizeof err), 0);
            cJSON_free(text);
        }
        jobcfg c;
        api_error e;
        int rc = forms[i] == JOBCFG_RESOLVED ? jobcfg_load(dir, &c, &e)
                                             : jobcfg_from_json(root, forms[i], &c, &e);
        cJSON_Delete(root);
        if (rc == 0) {
            ok++;
            jobcfg_free(&c);
            continue;
        }
        assert_string_equal(e.code, "invalid_field");
        const char *msg = forms[i] == JOBCFG_RESOLVED ? strstr(e.message, ": ") + 2 : e.message;
        if (!strstr(msg, path))
            fail_msg("%s: the refusal \"%s\" does not name the field", path, msg);
        if (!first_msg[0])
            snprintf(first_msg, sizeof first_msg, "%s", msg);
        else if (strcmp(first_msg, msg) != 0)
            fail_msg("%s: \"%s\" in one form, \"%s\" in another", path, first_msg, msg);
    }
    if (ok != 0 && ok != 3)
        fail_msg("%s: accepted in %d of the 3 forms", path, ok);
    return ok;
}

static void every_limit_is_the_same_in_every_form(void **state)
{
    (void)state;
    char dir[] = "/tmp/kiln-jobcfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    cJSON *schema = jobcfg_schema();
    assert_non_null(schema);
    int checked = 0;
    /* the table's limits; what the dispatcher can run is multi_process_jobs' */
    jobcfg_set_cluster(true);
    for (const cJSON *f = schema->child; f; f = f->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(f, "default");
        if (!strcmp(f->string, "name") || !strcmp(f->string, "devices") ||
            !strncmp(f->string, "lr_policy.", 10))
            continue;       /* not scalars, or read by engine/lr.c (test_engine_lr) */
        if (!strcmp(type->valuestring, "integer") || !strcmp(type->valuestring, "number")) {
            bool integer = !strcmp(type->valuestring, "integer");
            const cJSON *lo = cJSON_GetObjectItemCaseSensitive(f, "minimum");
            const cJSON *xlo = cJSON_GetObjectItemCaseSensitive(f, "exclusiveMinimum");
            const cJSON *hi = cJSON_GetObjectItemCaseSensitive(f, "maximum");
            const cJSON *xhi = cJSON_GetObjectItemCaseSensitive(f, "exclusiveMaximum");
            double l = lo ? lo->valuedouble : xlo->valuedouble;
            double h = hi ? hi->valuedouble : xhi->valuedouble;
            double step = integer ? 1 : fmax(fabs(h - l) * 1e-6, 1e-12);
            /* a default of null (keep_checkpoints: all) is the field left out */
            bool null_def = cJSON_IsNull(def);
            struct { double v; bool ok; } cases[] = {
                { null_def ? (lo ? l : l + step) : def->valuedouble, true },
                { lo ? l : l + step, true },
                { hi ? h : h - step, true },
                { lo ? l - step : l, false },
                { hi ? h + step : h, false },
            };
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                cJSON *v = cJSON_CreateNumber(cases[k].v);
                int n = accepted_everywhere(f->string, v, f, dir);
                cJSON_Delete(v);
                if ((n == 3) != cases[k].ok)
                    fail_msg("%s = %.17g: %s, want %s", f->string, cases[k].v,
                             n ? "accepted" : "refused", cases[k].ok ? "accepted" : "refused");
            }
            if (null_def) {
                cJSON *nul = cJSON_CreateNull();
                assert_int_equal(accepted_everywhere(f->string, nul, f, dir), 3);
                cJSON_Delete(nul);
            }
            if (integer) {                           /* not a whole number */
                cJSON *v = cJSON_CreateNumber((null_def ? l : def->valuedouble) + 0.5);
                assert_int_equal(accepted_everywhere(f->string, v, f, dir), 0);
                cJSON_Delete(v);
            }
        } else if (!strcmp(type->valuestring, "boolean")) {
            cJSON *t = cJSON_CreateTrue(), *one = cJSON_CreateNumber(1);
            assert_int_equal(accepted_everywhere(f->string, t, f, dir), 3);
            assert_int_equal(accepted_everywhere(f->string, one, f, dir), 0);
            cJSON_Delete(t);
            cJSON_Delete(one);
        } else {
            const cJSON *choice;
            cJSON_ArrayForEach(choice, cJSON_GetObjectItemCaseSensitive(f, "enum"))
                assert_int_equal(accepted_everywhere(f->string, choice, f, dir), 3);
            cJSON *bad = cJSON_CreateString("no-such-choice");
            assert_int_equal(accepted_everywhere(f->string, bad, f, dir), 0);
            cJSON_Delete(bad);
        }
        checked++;
    }
    assert_true(checked >= 23);                      /* every field of the table was seen */
    cJSON_Delete(schema);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/job.json", dir);
    unlink(path);
    rmdir(dir);
}

/* The worker reads a hand-edited job.json with the API's limits: the
 * batch_size the old reader let through (up to 1,000,000) is refused. */
static void a_hand_edited_job_json_gets_the_api_limits(void **state)
{
    (void)state;
    cJSON *j = job_json_with("{\"batch_size\": 5000}");
    jobcfg c;
    api_error e;
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_string_equal(e.message, "batch_size must be an integer from 1 to 4096");
    cJSON_Delete(j);
    j = job_json_with("{\"solver\": {\"type\": \"sgd\", \"lr\": 50}}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_string_equal(e.message, "solver.lr must be a number greater than 0 and at most 10");
    cJSON_Delete(j);
    j = job_json_with("{\"surprise\": 1}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_string_equal(e.code, "unknown_field");
    cJSON_Delete(j);
    j = job_json_with("{\"backend\": \"cuda:0,1\"}");     /* a string to parse: not any more */
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_string_equal(e.message, "backend must be \"cpu\" or \"cuda\"");
    cJSON_Delete(j);
}

/* to_json, from_json, to_json: the same text, and the same fields. */
static void round_trip(const char *fields)
{
    cJSON *j = job_json_with(fields);
    assert_non_null(j);
    jobcfg a, b;
    api_error e;
    if (jobcfg_from_json(j, JOBCFG_RESOLVED, &a, &e) != 0)
        fail_msg("%s: %s", fields, e.message);
    cJSON *out = jobcfg_to_json(&a);
    assert_non_null(out);
    if (jobcfg_from_json(out, JOBCFG_RESOLVED, &b, &e) != 0)
        fail_msg("%s: its own output is refused: %s", fields, e.message);
    cJSON *again = jobcfg_to_json(&b);
    if (!cJSON_Compare(out, again, true)) {
        char *x = cJSON_Print(out), *y = cJSON_Print(again);
        fail_msg("%s: written\n%s\nthen\n%s", fields, x, y);
    }
    /* every field the input gave is kept as given */
    cJSON *given = cJSON_Parse(fields);
    for (const cJSON *g = given->child; g; g = g->next)
        if (!cJSON_Compare(g, cJSON_GetObjectItemCaseSensitive(out, g->string), true))
            fail_msg("%s: \"%s\" is not kept", fields, g->string);
    cJSON_Delete(given);
    assert_int_equal(a.epochs, b.epochs);
    assert_int_equal(a.batch_size, b.batch_size);
    assert_true(a.seed == b.seed);
    assert_int_equal(a.precision, b.precision);
    assert_int_equal(a.dynamic_scaling, b.dynamic_scaling);
    assert_memory_equal(&a.solver, &b.solver, sizeof a.solver);
    assert_memory_equal(&a.devices, &b.devices, sizeof a.devices);
    assert_memory_equal(&a.input, &b.input, sizeof a.input);
    assert_memory_equal(&a.augment, &b.augment, sizeof a.augment);
    assert_int_equal(a.checkpoint_metric, b.checkpoint_metric);
    assert_int_equal(a.keep_checkpoints, b.keep_checkpoints);
    assert_int_equal(a.early_stop.enabled, b.early_stop.enabled);
    assert_int_equal(a.early_stop.metric, b.early_stop.metric);
    assert_int_equal(a.early_stop.patience, b.early_stop.patience);
    assert_true(a.early_stop.min_delta == b.early_stop.min_delta);
    assert_int_equal(a.loader_threads, b.loader_threads);
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.dataset_dir, b.dataset_dir);
    jobcfg_free(&a);
    jobcfg_free(&b);
    cJSON_Delete(again);
    cJSON_Delete(out);
    cJSON_Delete(j);
}

static void configs_round_trip(void **state)
{
    (void)state;
    round_trip("{}");
    round_trip("{\"epochs\": 3, \"batch_size\": 32, \"seed\": 4294967295, \"name\": \"a run\"}");
    round_trip("{\"solver\": {\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.5, \"nesterov\": true, "
               "\"weight_decay\": 0.0005, \"decay_bias\": true, \"clip_norm\": 2, "
               "\"label_smoothing\": 0.1, \"larc\": {\"policy\": \"scale\", \"eta\": 0.002}}}");
    round_trip("{\"solver\": {\"type\": \"adamw\", \"lr\": 0.001, \"beta1\": 0.8, \"beta2\": 0.99, "
               "\"eps\": 1e-07, \"weight_decay\": 0.01, \"decay_bias\": false, \"clip_norm\": 0, "
               "\"label_smoothing\": 0}}");
    round_trip("{\"precision\": \"amp-fp16\", \"loss_scaling\": \"dynamic\"}");
    round_trip("{\"precision\": \"amp-bf16\", \"loss_scaling\": \"off\"}");
    round_trip("{\"backend\": \"cuda\", \"gpus\": [2, 0], \"gpu_count\": 2}");
    round_trip("{\"backend\": \"cuda\", \"gpus\": [], \"gpu_count\": 3}");
    round_trip("{\"backend\": \"cpu\", \"replicas\": 2}");
    round_trip("{\"lr_policy\": {\"type\": \"step\", \"step_size\": 10, \"gamma\": 0.5, "
               "\"warmup_steps\": 3}}");
    round_trip("{\"input\": [3, 32, 32], \"augmentation\": {\"crop\": 28, \"pad\": 4, "
               "\"mirror\": true}, \"loader_threads\": 3}");
    round_trip("{\"augmentation\": {\"crop\": 0, \"pad\": 0, \"mirror\": false}, "
               "\"loader_threads\": 0}");
    round_trip("{\"checkpoint_metric\": \"val/loss\", \"keep_checkpoints\": 3, "
               "\"early_stopping\": {\"metric\": \"val/accuracy\", \"patience\": 2, "
               "\"min_delta\": 0.001}}");
    round_trip("{\"checkpoint_metric\": \"val/accuracy\", \"keep_checkpoints\": null}");
}

/* A request's defaults are the schema's. */
static void request_defaults_are_the_schemas(void **state)
{
    (void)state;
    cJSON *r = cJSON_Parse("{\"dataset_id\": 1, \"network\": \"lenet\", \"devices\": 0}");
    jobcfg c;
    api_error e;
    assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), 0);
    cJSON *schema = jobcfg_schema();
#define DEF(path) cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(schema, path), \
                                                   "default")
    assert_int_equal(c.epochs, DEF("epochs")->valuedouble);
    assert_int_equal(c.batch_size, DEF("batch_size")->valuedouble);
    assert_true(c.seed == (uint64_t)DEF("seed")->valuedouble);
    assert_true(c.solver.lr == DEF("solver.lr")->valuedouble);
    assert_true(c.solver.momentum == DEF("solver.momentum")->valuedouble);
    assert_string_equal(precision_name(c.precision), DEF("precision")->valuestring);
    assert_string_equal(solver_type_name(c.solver.type), DEF("solver.type")->valuestring);
    assert_int_equal(c.solver.larc, LARC_NONE);
    assert_int_equal(c.devices.kind, BACKEND_CPU);
    assert_int_equal(c.dynamic_scaling, false);
    assert_int_equal(c.augment.crop, DEF("augmentation.crop")->valuedouble);
    assert_int_equal(c.augment.pad, DEF("augmentation.pad")->valuedouble);
    assert_true(cJSON_IsFalse(DEF("augmentation.mirror")) && !c.augment.mirror);
    assert_int_equal(c.loader_threads, DEF("loader_threads")->valuedouble);
#undef DEF
    jobcfg_free(&c);
    cJSON_Delete(schema);
    cJSON_Delete(r);
}

/* "augmentation": read once here, checked against the dataset's images
 * when the dataset is known (jobcfg_set_data, as jobspec resolves a request
 * and as the worker reads job.json), carried in job.json, and the network's
 * input is the crop. */
static void augmentation_against_the_dataset(void **state)
{
    (void)state;
    cJSON *r = cJSON_Parse("{\"dataset_id\": 1, \"network\": \"lenet\", \"devices\": 0, "
                           "\"augmentation\": {\"crop\": 28, \"pad\": 4, \"mirror\": true}}");
    jobcfg c;
    api_error e;
    assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), 0);
    assert_int_equal(c.augment.crop, 28);
    assert_int_equal(c.augment.pad, 4);
    assert_true(c.augment.mirror);
    const char *classes[] = { "a", "b" };
    assert_int_equal(jobcfg_set_data(&c, "/data/x", (net_shape){ 3, 32, 30 }, classes, 2, &e), 0);
    net_shape in = jobcfg_net_input(&c);
    assert_int_equal(in.c, 3);
    assert_int_equal(in.h, 28);
    assert_int_equal(in.w, 28);
    ds_augment a = jobcfg_ds_augment(&c);
    assert_int_equal(a.crop_h, 28);
    assert_int_equal(a.crop_w, 28);
    assert_int_equal(a.pad, 4);
    assert_true(a.mirror);
    cJSON *j = jobcfg_to_json(&c);
    const cJSON *aug = cJSON_GetObjectItemCaseSensitive(j, "augmentation");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(aug, "crop")->valueint, 28);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(aug, "pad")->valueint, 4);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(aug, "mirror")));
    cJSON_Delete(j);
    jobcfg_free(&c);

    /* a crop larger than the images: 400 naming the field, in either side */
    assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), 0);
    assert_int_equal(jobcfg_set_data(&c, "/data/x", (net_shape){ 1, 28, 27 }, classes, 2, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_field");
    assert_non_null(strstr(e.message, "augmentation.crop 28 is larger than the dataset's 27x28 images"));
    jobcfg_free(&c);
    cJSON_Delete(r);
    /* the same in a hand-edited job.json */
    j = job_json_with("{\"input\": [1, 16, 16], \"augmentation\": {\"crop\": 20}}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_non_null(strstr(e.message, "augmentation.crop 20"));
    cJSON_Delete(j);

    /* the object's own shape */
    static const char *const bad[][2] = {
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"augmentation\": true}", "augmentation must be an object" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"augmentation\": {\"flip\": true}}",
          "unknown field \"augmentation.flip\"" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"augmentation\": {\"crop\": -1}}", "augmentation.crop must be" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"augmentation\": {\"pad\": 65}}", "augmentation.pad must be" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"augmentation\": {\"mirror\": 1}}", "augmentation.mirror must be" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"loader_threads\": 65}", "loader_threads must be" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        r = cJSON_Parse(bad[k][0]);
        assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), -1);
        assert_int_equal(e.status, 400);
        if (!strstr(e.message, bad[k][1]))
            fail_msg("%s: \"%s\" does not say \"%s\"", bad[k][0], e.message, bad[k][1]);
        cJSON_Delete(r);
    }
    /* job.json from before augmentation: none */
    j = job_json_with("{}");
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "augmentation"));
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), 0);
    assert_int_equal(c.augment.crop + c.augment.pad + c.augment.mirror + c.loader_threads, 0);
    in = jobcfg_net_input(&c);
    assert_int_equal(in.h * 10 + in.w, 2 * 10 + 2);            /* the stored size */
    jobcfg_free(&c);
    cJSON_Delete(j);
}

/* checkpoint_metric, keep_checkpoints and early_stopping: their defaults
 * (the schema's), the object's presence turning early stopping on, job.json
 * keeping them, and refusals naming the field. */
static void snapshot_and_early_stopping_fields(void **state)
{
    (void)state;
    jobcfg c;
    api_error e;
    cJSON *schema = jobcfg_schema();
#define DEF(path) cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(schema, path), \
                                                   "default")
    cJSON *r = cJSON_Parse("{\"dataset_id\": 1, \"network\": \"lenet\", \"devices\": 0}");
    assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), 0);
    assert_string_equal(snap_metric_name(c.checkpoint_metric), DEF("checkpoint_metric")->valuestring);
    assert_string_equal(DEF("checkpoint_metric")->valuestring, "val/accuracy");
    assert_true(cJSON_IsNull(DEF("keep_checkpoints")));
    assert_int_equal(c.keep_checkpoints, 0);
    assert_false(c.early_stop.enabled);
    const char *classes[] = { "a", "b" };
    assert_int_equal(jobcfg_set_data(&c, "/data/x", (net_shape){ 1, 28, 28 }, classes, 2, &e), 0);
    cJSON *j = jobcfg_to_json(&c);
    assert_non_null(j);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "keep_checkpoints")));
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "early_stopping"));
    cJSON_Delete(j);
    jobcfg_free(&c);
    cJSON_Delete(r);

    r = cJSON_Parse("{\"dataset_id\": 1, \"network\": \"lenet\", \"devices\": 0, "
                    "\"keep_checkpoints\": 2, \"early_stopping\": {}}");
    assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), 0);
    assert_int_equal(c.keep_checkpoints, 2);
    assert_true(c.early_stop.enabled);
    assert_string_equal(snap_metric_name(c.early_stop.metric), DEF("early_stopping.metric")->valuestring);
    assert_string_equal(DEF("early_stopping.metric")->valuestring, "val/loss");
    assert_int_equal(c.early_stop.patience, DEF("early_stopping.patience")->valuedouble);
    assert_int_equal(c.early_stop.patience, 5);
    assert_true(c.early_stop.min_delta == DEF("early_stopping.min_delta")->valuedouble);
    assert_int_equal(jobcfg_set_data(&c, "/data/x", (net_shape){ 1, 28, 28 }, classes, 2, &e), 0);
    j = jobcfg_to_json(&c);
    assert_non_null(j);
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(j, "early_stopping");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(es, "metric")->valuestring, "val/loss");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(es, "patience")->valueint, 5);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "keep_checkpoints")->valueint, 2);
    cJSON_Delete(j);
    jobcfg_free(&c);
    cJSON_Delete(r);
#undef DEF
    cJSON_Delete(schema);

    static const char *const bad[][2] = {
        { "\"early_stopping\": true", "early_stopping must be an object" },
        { "\"early_stopping\": {\"wait\": 3}", "unknown field \"early_stopping.wait\"" },
        { "\"early_stopping\": {\"patience\": 0}", "early_stopping.patience must be an integer from 1" },
        { "\"early_stopping\": {\"patience\": 2.5}", "early_stopping.patience must be" },
        { "\"early_stopping\": {\"min_delta\": -0.1}", "early_stopping.min_delta must be a number at least 0" },
        { "\"early_stopping\": {\"metric\": \"loss\"}", "early_stopping.metric must be \"val/accuracy\" or \"val/loss\"" },
        { "\"keep_checkpoints\": 0", "keep_checkpoints must be an integer from 1" },
        { "\"keep_checkpoints\": \"all\"", "keep_checkpoints must be" },
        { "\"checkpoint_metric\": \"val/acc\"", "checkpoint_metric must be" },
        { "\"checkpoint_metric\": \"train/loss\"", "checkpoint_metric must be \"val/accuracy\" or \"val/loss\"" },
        { "\"early_stopping\": {\"metric\": \"train/accuracy\"}", "early_stopping.metric must be \"val/accuracy\" or \"val/loss\"" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char text[256];
        snprintf(text, sizeof text, "{\"dataset_id\": 1, \"network\": \"lenet\", %s}", bad[k][0]);
        r = cJSON_Parse(text);
        assert_non_null(r);
        assert_int_equal(jobcfg_from_json(r, JOBCFG_REQUEST, &c, &e), -1);
        assert_int_equal(e.status, 400);
        if (!strstr(e.message, bad[k][1]))
            fail_msg("%s: \"%s\" does not say \"%s\"", bad[k][0], e.message, bad[k][1]);
        cJSON_Delete(r);
    }
}

/* Steps of a run: an epoch's last short batch is dropped in training (the
 * loader's own count, loader_batch_count), except in a split smaller than
 * one batch. */
static void steps_drop_the_last_short_batch(void **state)
{
    (void)state;
    jobcfg c = { .epochs = 3, .batch_size = 64 };
    assert_int_equal(jobcfg_steps(&c, 100), 3 * 1);          /* 100 = 64 + 36: one step an epoch */
    assert_int_equal(jobcfg_steps(&c, 128), 3 * 2);
    assert_int_equal(jobcfg_steps(&c, 191), 3 * 2);
    assert_int_equal(jobcfg_steps(&c, 40), 3 * 1);           /* smaller than a batch: trains on it */
    assert_int_equal(jobcfg_steps(&c, 0), 0);
    c.batch_size = 1;
    assert_int_equal(jobcfg_steps(&c, 7), 3 * 7);
    for (int64_t n = 1; n < 300; n += 7)
        assert_int_equal(jobcfg_steps(&c, n), (int64_t)loader_batch_count((size_t)n, 1, true) * 3);
}

/* Reads text in form (job.json through jobcfg_from_json's resolved form);
 * 0, or -1 with *e. */
static int read_form(const char *text, jobcfg_form form, jobcfg *c, api_error *e)
{
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    int rc = jobcfg_from_json(j, form, c, e);
    cJSON_Delete(j);
    return rc;
}

/* nodes and tasks_per_node: several ranks need a dispatcher that runs them
 * (the local one refuses them, naming --dispatcher slurm); a GPU job's
 * ranks are its GPUs; the batch needs an image for each rank. */
static void multi_process_jobs(void **state)
{
    (void)state;
    jobcfg c;
    api_error e;
    jobcfg_set_cluster(false);
    static const char *const multi[][2] = {
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"tasks_per_node\": 2}",
          "{\"network\": \"lenet\", \"tasks_per_node\": 2}" },
        { "{\"dataset_id\": 1, \"network\": \"lenet\", \"nodes\": 2}",
          "{\"network\": \"lenet\", \"nodes\": 2}" },
    };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(read_form(multi[i][0], JOBCFG_REQUEST, &c, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.code, "invalid_field");
        assert_non_null(strstr(e.message, "--dispatcher slurm"));
        assert_int_equal(read_form(multi[i][1], JOBCFG_LOCAL_REQUEST, &c, &e), -1);
        assert_non_null(strstr(e.message, "--dispatcher slurm"));
    }
    assert_int_equal(read_form("{\"dataset_id\": 1, \"network\": \"lenet\", \"nodes\": 1, "
                               "\"tasks_per_node\": 1}", JOBCFG_REQUEST, &c, &e), 0);
    assert_int_equal(c.nodes, 1);
    assert_int_equal(c.tasks_per_node, 1);
    assert_false(jobcfg_multi_process(&c));
    assert_int_equal(jobcfg_ranks(&c), 1);
    jobcfg_free(&c);

    jobcfg_set_cluster(true);
    assert_int_equal(read_form("{\"dataset_id\": 1, \"network\": \"lenet\", \"nodes\": 3, "
                               "\"tasks_per_node\": 2}", JOBCFG_REQUEST, &c, &e), 0);
    assert_true(jobcfg_multi_process(&c));
    assert_int_equal(jobcfg_ranks(&c), 6);
    jobcfg_free(&c);
    jobcfg_set_cluster(false);              /* the worker reads job.json anyway */
    cJSON *j = job_json_with("{\"nodes\": 3, \"tasks_per_node\": 2}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), 0);
    cJSON_Delete(j);
    cJSON *back = jobcfg_to_json(&c);               /* job.json keeps them */
    jobcfg_free(&c);
    assert_int_equal(jobcfg_from_json(back, JOBCFG_RESOLVED, &c, &e), 0);
    cJSON_Delete(back);
    assert_int_equal(c.nodes, 3);
    assert_int_equal(c.tasks_per_node, 2);
    jobcfg_free(&c);
    jobcfg_set_cluster(true);
    assert_int_equal(read_form("{\"dataset_id\": 1, \"network\": \"lenet\", \"batch_size\": 5, "
                               "\"nodes\": 2, \"tasks_per_node\": 3}", JOBCFG_REQUEST, &c, &e), -1);
    assert_non_null(strstr(e.message, "smaller than the job's 6 ranks"));

    /* job.json: a GPU job's ranks are its GPUs; replicas do not mix with ranks */
    j = job_json_with("{\"backend\": \"cuda\", \"gpu_count\": 2, \"nodes\": 2}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), 0);
    assert_int_equal(jobcfg_ranks(&c), 4);
    jobcfg_free(&c);
    cJSON_Delete(j);
    j = job_json_with("{\"backend\": \"cuda\", \"gpu_count\": 2, \"tasks_per_node\": 2}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_non_null(strstr(e.message, "tasks_per_node is for CPU jobs"));
    cJSON_Delete(j);
    j = job_json_with("{\"replicas\": 2, \"tasks_per_node\": 2}");
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), -1);
    assert_non_null(strstr(e.message, "replicas"));
    cJSON_Delete(j);
    jobcfg_set_cluster(false);
}

static void clear_rank_env(void)
{
    static const char *const names[] = { "KILN_RANK", "KILN_WORLD_SIZE", "KILN_LOCAL_RANK",
        "KILN_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID",
        "SLURM_STEP_ID", "SLURM_RESTART_COUNT" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

/* jobs/ranks.h: KILN_* before SLURM_*, a Slurm step of one task is alone,
 * bad values are refused naming the variable. */
static void ranks_from_the_environment(void **state)
{
    (void)state;
    worker_rank w;
    char err[256];
    clear_rank_env();
    assert_int_equal(ranks_from_env(&w, err, sizeof err), 0);
    assert_int_equal(w.size, 1);
    assert_int_equal(w.rank, 0);
    assert_null(w.source);
    assert_string_equal(w.run_id, "0");

    setenv("SLURM_NTASKS", "1", 1);               /* one task: alone */
    setenv("SLURM_PROCID", "0", 1);
    assert_int_equal(ranks_from_env(&w, err, sizeof err), 0);
    assert_int_equal(w.size, 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_JOB_ID", "77", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    assert_int_equal(ranks_from_env(&w, err, sizeof err), 0);
    assert_int_equal(w.size, 4);
    assert_int_equal(w.rank, 3);
    assert_int_equal(w.local_rank, 1);
    assert_string_equal(w.source, "SLURM_PROCID");
    assert_string_equal(w.run_id, "slurm-77.0");
    setenv("SLURM_RESTART_COUNT", "2", 1);        /* requeued: a fresh rendezvous */
    assert_int_equal(ranks_from_env(&w, err, sizeof err), 0);
    assert_string_equal(w.run_id, "slurm-77.0.r2");

    setenv("KILN_WORLD_SIZE", "2", 1);            /* KILN_* win */
    setenv("KILN_RANK", "1", 1);
    setenv("KILN_RUN_ID", "t-1", 1);
    assert_int_equal(ranks_from_env(&w, err, sizeof err), 0);
    assert_int_equal(w.size, 2);
    assert_int_equal(w.rank, 1);
    assert_int_equal(w.local_rank, 1);
    assert_string_equal(w.source, "KILN_RANK");
    assert_string_equal(w.run_id, "t-1");

    setenv("KILN_RANK", "2", 1);                  /* not below the size */
    assert_int_equal(ranks_from_env(&w, err, sizeof err), -1);
    assert_non_null(strstr(err, "KILN_RANK"));
    unsetenv("KILN_RANK");
    assert_int_equal(ranks_from_env(&w, err, sizeof err), -1);
    assert_non_null(strstr(err, "KILN_RANK is not"));
    setenv("KILN_RANK", "0", 1);
    setenv("KILN_RUN_ID", "../x", 1);
    assert_int_equal(ranks_from_env(&w, err, sizeof err), -1);
    assert_non_null(strstr(err, "KILN_RUN_ID"));
    clear_rank_env();
    setenv("SLURM_NTASKS", "two", 1);
    assert_int_equal(ranks_from_env(&w, err, sizeof err), -1);
    assert_non_null(strstr(err, "SLURM_NTASKS"));
    clear_rank_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(configs_round_trip),
        cmocka_unit_test(request_defaults_are_the_schemas),
        cmocka_unit_test(every_limit_is_the_same_in_every_form),
        cmocka_unit_test(a_hand_edited_job_json_gets_the_api_limits),
        cmocka_unit_test(augmentation_against_the_dataset),
        cmocka_unit_test(steps_drop_the_last_short_batch),
        cmocka_unit_test(snapshot_and_early_stopping_fields),
        cmocka_unit_test(multi_process_jobs),
        cmocka_unit_test(ranks_from_the_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
