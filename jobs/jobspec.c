/* jobs/jobspec.c: a POST /api/v1/jobs body turned into a queued job.
 *
 * The request is read by jobs/jobcfg.c (every field's type, range and
 * default). Then, in this order: the dataset (422 dataset_not_found, 409
 * dataset_not_ready), the network against the dataset's shape and classes
 * (422 unknown_network, 422 invalid_network), the learning-rate policy's
 * step counts for the run's length, the training memory against what is
 * available now (422 insufficient_memory, jobs/memfit.h).
 *
 * Nothing is written until everything is valid. Then the job row is inserted,
 * jobs/<id>/job.json is written atomically (temporary name, fsync, rename), and
 * the stored config is replaced by the same text with the id in it. The
 * scheduler starts a queued job only once its job.json exists, so it never
 * sees the window between the insert and the file.
 *
 * job.json is the request resolved (jobcfg_to_json): every solver field of its
 * type with its default, and "lr_policy" (engine/lr.h) with a warm-up in steps.
 * jobspec_resolve_local runs the same checks for `kiln train`, against a
 * dataset folder instead of the store.
 */
#include "jobs/jobspec.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/layout.h"      /* layout_subdir, layout_job_dir, layout_dataset_dir */
#include "engine/dataset.h"   /* ds_info_load, ds_info_free */
#include "engine/fileio.h"    /* fio_write_atomic */
#include "engine/lr.h"        /* lr_from_json, lr_to_json */
#include "engine/net.h"       /* net_builtin, net_builtin_names, net_validate */
#include "jobs/memfit.h"      /* memfit_check: does it fit in what is available */

/* ---- the dataset and the network ------------------------------------------ */

static int load_dataset(store *st, const char *abs_data, int64_t id, char *dir, size_t dirlen,
                        ds_info *info, api_error *e)
{
    store_dataset d;
    int rc = store_dataset_get(st, id, &d);
    if (rc == STORE_NOT_FOUND)
        return api_fail(e, 422, "dataset_not_found", "dataset %lld does not exist", (long long)id);
    if (rc != 0)
        return api_fail(e, 500, "internal", "reading dataset %lld from the database failed", (long long)id);
    if (strcmp(d.status, "ready") != 0) {
        if (!strcmp(d.status, "failed"))
            api_fail(e, 409, "dataset_not_ready", "dataset %lld (\"%.64s\") failed to import (%.200s); "
                 "import it again", (long long)id, d.name, d.error ? d.error : "no reason recorded");
        else
            api_fail(e, 409, "dataset_not_ready", "dataset %lld (\"%.64s\") is still %s (%.0f%%); wait "
                 "until it is ready", (long long)id, d.name, d.status, d.progress * 100);
        store_dataset_clear(&d);
        return -1;
    }
    store_dataset_clear(&d);

    if (layout_dataset_dir(dir, dirlen, abs_data, id) != 0)
        return api_fail(e, 500, "internal", "the data directory's path is too long");
    char err[256];
    if (ds_info_load(dir, info, err, sizeof err) != 0)
        return api_fail(e, 500, "dataset_unreadable", "dataset %lld is ready but its header cannot be "
                    "read: %s", (long long)id, err);
    if (info->train_count == 0) {
        ds_info_free(info);
        return api_fail(e, 422, "dataset_empty", "dataset %lld has no training images", (long long)id);
    }
    return 0;
}

/* The spec (a new cJSON tree) and its display name, or -1 with e filled. */
static int resolve_network(const cJSON *req_net, net_shape in, const ds_info *info, cJSON **spec,
                           char *net_name, size_t namelen, api_error *e)
{
    *spec = NULL;
    if (cJSON_IsString(req_net)) {
        const char *text = net_builtin(req_net->valuestring);
        if (!text) {
            char names[256];
            settings_join(net_builtin_names(), names, sizeof names);
            return api_fail(e, 422, "unknown_network", "unknown network \"%.64s\"; built-in networks: %s",
                        req_net->valuestring, names);
        }
        *spec = cJSON_Parse(text);
        if (!*spec)
            return api_fail(e, 500, "internal", "the built-in network \"%s\" does not parse",
                        req_net->valuestring);
        snprintf(net_name, namelen, "%s", req_net->valuestring);
    } else {
        *spec = cJSON_Duplicate(req_net, 1);
        if (!*spec)
            return api_fail(e, 500, "internal", "out of memory copying the network spec");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(req_net, "name");
        snprintf(net_name, namelen, "%.63s",
                 cJSON_IsString(n) && n->valuestring[0] ? n->valuestring : "custom");
    }

    char err[512];
    if (net_validate(*spec, in, info->nclasses, err, sizeof err) != 0) {
        cJSON_Delete(*spec);
        *spec = NULL;
        return api_fail(e, 422, "invalid_network", "%s", err);
    }
    return 0;
}

/* ---- resolving the request ------------------------------------------------ */

/* "lr_policy" (fixed when the request has none) with warm-up epochs turned
 * into steps for this dataset. */
static int resolve_lr_policy(jobcfg *c, const ds_info *info, api_error *e)
{
    int64_t steps = jobcfg_steps(c, (int64_t)info->train_count);
    lr_policy p;
    char err[256];
    if (lr_from_json(c->lr_policy, c->solver.lr, steps, steps / c->epochs, &p, NULL, err,
                     sizeof err) != 0)
        return api_fail(e, 400, "invalid_field", "%s", err);
    cJSON *o = cJSON_CreateObject();
    if (!o || lr_to_json(&p, o) != 0) {
        cJSON_Delete(o);
        return api_fail(e, 500, "internal", "out of memory");
    }
    cJSON_Delete(c->lr_policy);
    c->lr_policy = o;
    return 0;
}

/* The request c resolved against the dataset in dir: the data (which checks
 * the augmentation against the images), the spec for the network's input
 * (the crop), the policy. */
static int resolve(jobcfg *c, const char *dir, const ds_info *info, api_error *e)
{
    cJSON *spec = NULL;
    net_shape in = { info->c, info->h, info->w };
    if (jobcfg_set_data(c, dir, in, (const char *const *)info->classes, info->nclasses, e) != 0 ||
        resolve_network(c->network, jobcfg_net_input(c), info, &spec, c->network_name,
                        sizeof c->network_name, e))
        return -1;
    cJSON_Delete(c->network);
    c->network = spec;
    return resolve_lr_policy(c, info, e);
}

/* The training-memory estimate against what is available now (jobs/memfit.h):
 * 422 insufficient_memory naming the largest batch that fits. */
static int check_memory(const jobcfg *c, const ds_info *info, api_error *e)
{
    char err[512];
    int64_t fits = 0;
    int rc = memfit_check(c, jobcfg_net_input(c), info->nclasses, NULL, &fits, err, sizeof err);
    if (rc > 0)
        return api_fail(e, 422, "insufficient_memory", "%s", err);
    if (rc < 0)
        return api_fail(e, 422, "invalid_network", "%s", err);
    return 0;
}

/* Writes text to dir/job.json atomically (engine/fileio.h). */
static int write_job_json(const char *dir, const char *text, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, dir, LAYOUT_JOB_JSON) != 0)
        return set_err(err, errlen, "the path of job.json in %s is too long", dir);
    return fio_write_atomic(path, text, strlen(text), err, errlen);
}

/* Makes <data>/jobs/<id>, moving aside a folder left by an older database. */
static int make_job_dir(const char *abs_data, int64_t id, char *dir, size_t dirlen, char *err,
                        size_t errlen)
{
    char jobs[PATH_MAX];
    if (layout_subdir(jobs, sizeof jobs, abs_data, LAYOUT_JOBS) != 0 ||
        layout_job_dir(dir, dirlen, abs_data, id) != 0)
        return set_err(err, errlen, "the data directory's path is too long");
    if (fio_mkdir_p(jobs) != 0)
        return set_err(err, errlen, "cannot create %s: %s", jobs, strerror(errno));
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return set_err(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    char aside[PATH_MAX + 32];
    snprintf(aside, sizeof aside, "%s.stale-%lld", dir, (long long)time(NULL));
    fprintf(stderr, "kiln: %s exists from an older database; moving it to %s\n", dir, aside);
    if (rename(dir, aside) != 0 || mkdir(dir, 0755) != 0)
        return set_err(err, errlen, "cannot replace the stale folder %s: %s", dir, strerror(errno));
    return 0;
}

int jobspec_create(store *st, const char *data_dir, const cJSON *body, int64_t *id, api_error *e)
{
    jobcfg c;
    ds_info info;
    bool have_info = false;
    cJSON *cfg = NULL;
    char *text = NULL;
    char abs_data[PATH_MAX], dataset_dir[PATH_MAX], job_dir[PATH_MAX], err[512];
    int64_t job_id = 0;
    bool inserted = false;
    int ret = -1;

    memset(&info, 0, sizeof info);
    if (jobcfg_from_json(body, JOBCFG_REQUEST, &c, e) != 0)
        return -1;
    if (!realpath(data_dir, abs_data)) {
        api_fail(e, 500, "internal", "data directory %s: %s", data_dir, strerror(errno));
        goto out;
    }
    if (load_dataset(st, abs_data, c.dataset_id, dataset_dir, sizeof dataset_dir, &info, e))
        goto out;
    have_info = true;
    if (resolve(&c, dataset_dir, &info, e) != 0 || check_memory(&c, &info, e) != 0)
        goto out;
    if (!(cfg = jobcfg_to_json(&c)) || !(text = cJSON_PrintUnformatted(cfg))) {
        api_fail(e, 500, "internal", "out of memory building the job config");
        goto out;
    }
    if (store_job_insert(st, c.dataset_id, c.network_name, text, c.epochs, &job_id, err,
                         sizeof err) != 0) {
        api_fail(e, 500, "internal", "storing the job failed: %s", err);
        goto out;
    }
    inserted = true;

    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "id"), (double)job_id);
    cJSON_free(text);
    if (!(text = cJSON_Print(cfg))) {
        api_fail(e, 500, "internal", "out of memory building the job config");
        goto out;
    }
    if (make_job_dir(abs_data, job_id, job_dir, sizeof job_dir, err, sizeof err) != 0 ||
        write_job_json(job_dir, text, err, sizeof err) != 0) {
        api_fail(e, 500, "internal", "writing job.json failed: %s", err);
        goto out;
    }
    if (store_job_set_config(st, job_id, text) != 0 ||
        store_job_set_progress(st, job_id, 0, 0, jobcfg_steps(&c, (int64_t)info.train_count), 0,
                               -1) != 0) {
        api_fail(e, 500, "internal", "updating job %lld in the database failed", (long long)job_id);
        goto out;
    }
    *id = job_id;
    ret = 0;
out:
    if (ret != 0 && inserted)
        store_job_delete(st, job_id);        /* never leave a job the worker cannot read */
    cJSON_free(text);
    cJSON_Delete(cfg);
    jobcfg_free(&c);
    if (have_info)
        ds_info_free(&info);
    return ret;
}

int jobspec_resolve_local(const cJSON *body, const char *dataset_dir, jobcfg *out, api_error *e)
{
    ds_info info;
    char abs_dir[PATH_MAX], err[512];
    if (jobcfg_from_json(body, JOBCFG_LOCAL_REQUEST, out, e) != 0)
        return -1;
    int rc = -1;
    if (!realpath(dataset_dir, abs_dir)) {
        api_fail(e, 422, "dataset_not_found", "dataset folder %s: %s", dataset_dir, strerror(errno));
    } else if (ds_info_load(abs_dir, &info, err, sizeof err) != 0) {
        api_fail(e, 422, "dataset_not_found", "%s is not a prepared dataset: %s", abs_dir, err);
    } else {
        if (info.train_count == 0)
            api_fail(e, 422, "dataset_empty", "dataset %s has no training images", abs_dir);
        else
            rc = resolve(out, abs_dir, &info, e);
        ds_info_free(&info);
    }
    if (rc != 0)
        jobcfg_free(out);
    return rc;
}
