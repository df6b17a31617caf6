/* jobs/jobspec.c: a POST /api/v1/jobs body turned into a queued job.
 *
 * Order of checks, so that the first problem a user sees is the cheapest to
 * fix: unknown fields (400 unknown_field), then each field's type and range
 * (400 invalid_field, or 400 missing_field for dataset_id/network), then what
 * this build cannot do (422 not_supported), then the dataset (422
 * dataset_not_found, 409 dataset_not_ready), then the network against the
 * dataset's shape and classes (422 unknown_network, 422 invalid_network).
 *
 * Nothing is written until everything is valid. Then the job row is inserted,
 * jobs/<id>/job.json is written atomically (temporary name, fsync, rename), and
 * the stored config is replaced by the same text with the id in it. The
 * scheduler starts a queued job only once its job.json exists, so it never
 * sees the window between the insert and the file.
 *
 * job.json holds the request resolved: every solver field of its type with
 * its default, and "lr_policy" (engine/lr.h) with a warm-up in steps.
 * jobspec_resolve_local runs the same checks for `kiln train`, against a
 * dataset folder instead of the store.
 */
#include "base/err.h"
#include "jobs/jobspec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/dataset.h"   /* ds_info_load, ds_info_free */
#include "engine/fileio.h"    /* fio_write_atomic */
#include "engine/lr.h"        /* lr_from_json, lr_to_json */
#include "engine/net.h"       /* net_builtin, net_builtin_names, net_validate */

/* Ranges of the request's fields (the BRIEF's table). */
#define EPOCHS_DEFAULT 10
#define EPOCHS_MAX 10000
#define BATCH_DEFAULT 64
#define BATCH_MAX 4096
#define SEED_DEFAULT 1
#define SEED_MAX 4294967295.0
#define SNAPSHOT_DEFAULT 1
#define SNAPSHOT_MAX 10000
#define LR_DEFAULT 0.01
#define LR_MAX 10.0
#define MOMENTUM_DEFAULT 0.9
#define WEIGHT_DECAY_DEFAULT 0.0
#define BETA1_DEFAULT 0.9
#define BETA2_DEFAULT 0.999
#define EPS_DEFAULT 1e-8
#define CLIP_NORM_MAX 1e6
#define LARC_ETA_DEFAULT 0.001
#define NAME_MAX_LEN 200
#define DATASET_ID_MAX 9007199254740991.0     /* 2^53 - 1: exact in a JSON number */

static const char *const job_fields[] = {
    "dataset_id", "network", "epochs", "batch_size", "precision", "solver", "seed",
    "snapshot_interval", "name", "lr_policy", "loss_scaling", "devices", NULL,
};
static const char *const solver_fields[] = {
    "type", "lr", "momentum", "nesterov", "beta1", "beta2", "eps", "weight_decay", "decay_bias",
    "clip_norm", "larc", "label_smoothing", NULL,
};
static const char *const larc_fields[] = { "policy", "eta", NULL };
static const char *const larc_policies[] = { "clip", "scale", NULL };
static const char *const no_choices[] = { NULL };

/* Precisions and solvers: what this build runs, and what it knows of but
 * cannot run yet (422 not_supported rather than 400). */
static const char *const precisions_ok[] = { "fp32", "amp-bf16", "amp-fp16", NULL };
static const char *const precisions_later[] = { NULL };
static const char *const loss_scalings[] = { "dynamic", "off", NULL };
static const char *const solvers_ok[] = { "sgd", "adam", "adamw", NULL };
static const char *const solvers_later[] = { NULL };

static bool fmt_path(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats a path into buf; false when it does not fit. */
static bool fmt_path(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return k >= 0 && (size_t)k < n;
}

static bool in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; list[i]; i++)
        if (!strcmp(list[i], s))
            return true;
    return false;
}

/* "a, b, c" into buf. */
static void join_list(const char *const *list, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; list[i] && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", list[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

void jobspec_dir(const char *data_dir, int64_t id, char *buf, size_t n)
{
    snprintf(buf, n, "%s/jobs/%lld", data_dir, (long long)id);
}

/* ---- field checks --------------------------------------------------------- */

/* 400 unknown_field for the first key of obj not in allowed; 400 invalid_field
 * for a key given twice. where is "" or "solver.". */
static int check_fields(const cJSON *obj, const char *const *allowed, const char *where,
                        const char *what, api_error *e)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        if (!in_list(allowed, key)) {
            char names[256];
            join_list(allowed, names, sizeof names);
            return api_fail(e, 400, "unknown_field", "unknown field \"%s%.64s\": %s takes %s", where, key,
                        what, names);
        }
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (d->string && !strcmp(d->string, key))
                return api_fail(e, 400, "invalid_field", "field \"%s%.64s\" is given twice", where, key);
    }
    return 0;
}

/* An optional field: NULL when absent or JSON null (take the default). */
static const cJSON *opt_field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool is_integer(const cJSON *v)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
}

/* An integer field in [lo, hi], or def when absent. */
static int get_int(const cJSON *obj, const char *where, const char *name, double def, double lo,
                   double hi, double *out, api_error *e)
{
    const cJSON *v = opt_field(obj, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!is_integer(v) || v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, "invalid_field", "%s%s must be an integer from %.0f to %.0f", where, name,
                    lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* A number field in [lo, hi] (or (lo, hi] with lo_open, [lo, hi) with hi_open). */
static int get_num(const cJSON *obj, const char *where, const char *name, double def, double lo,
                   bool lo_open, double hi, bool hi_open, double *out, api_error *e)
{
    const cJSON *v = opt_field(obj, name);
    if (!v) {
        *out = def;
        return 0;
    }
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    bool ok = isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (!ok)
        return api_fail(e, 400, "invalid_field", "%s%s must be a number %s %g and %s %g", where, name,
                    lo_open ? "greater than" : "at least", lo, hi_open ? "below" : "at most", hi);
    *out = x;
    return 0;
}

/* A string field naming one of ok (or of later: 422 not_supported). */
static int get_choice(const cJSON *obj, const char *where, const char *name, const char *def,
                      const char *const *ok, const char *const *later, const char **out,
                      api_error *e)
{
    const cJSON *v = opt_field(obj, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (cJSON_IsString(v) && in_list(ok, v->valuestring)) {
        *out = v->valuestring;
        return 0;
    }
    char oks[128];
    join_list(ok, oks, sizeof oks);
    if (cJSON_IsString(v) && in_list(later, v->valuestring))
        return api_fail(e, 422, "not_supported", "%s%s \"%s\" is not supported yet; use %s", where, name,
                    v->valuestring, oks);
    char all[300], laters[128];
    join_list(later, laters, sizeof laters);
    snprintf(all, sizeof all, "%s%s%s", oks, laters[0] ? ", " : "", laters);
    return api_fail(e, 400, "invalid_field", "%s%s must be one of %s", where, name, all);
}

/* ---- the request ---------------------------------------------------------- */

struct request;
static int parse_devices(const cJSON *v, struct request *r, api_error *e);

typedef struct request {
    double dataset_id;
    const cJSON *network;       /* string or object, in the request */
    double epochs, batch_size, seed, snapshot_interval;
    const char *precision;
    const char *loss_scaling;   /* "dynamic" or "off", resolved from the precision */
    int ngpus;                  /* GPUs to train on (the CUDA backend); 0: the CPU */
    bool gpus_listed;           /* gpu_ids names them; else any free ones, chosen by the
                                 * scheduler */
    int gpu_ids[KILN_MAX_DEVICES];
    const char *solver_type;
    double lr, momentum, weight_decay;
    bool nesterov, decay_bias;
    double beta1, beta2, eps, clip_norm, label_smoothing;
    const char *larc_policy;    /* NULL: no LARC */
    double larc_eta;
    const cJSON *lr_policy;     /* NULL: fixed */
    const char *name;           /* NULL when not given */
} request;

/* An optional boolean field, def when absent. */
static int get_bool(const cJSON *obj, const char *where, const char *name, bool def, bool *out,
                    api_error *e)
{
    const cJSON *v = opt_field(obj, name);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return api_fail(e, 400, "invalid_field", "%s%s must be true or false", where, name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* The solver object: every key, its type and range, and which keys go with
 * which type (400 invalid_field: "solver.beta1 is for adam and adamw"). */
static int parse_solver(const cJSON *solver, request *r, api_error *e)
{
    static const char *const sgd_only[] = { "momentum", "nesterov", "larc", NULL };
    static const char *const adam_only[] = { "beta1", "beta2", "eps", NULL };
    if (check_fields(solver, solver_fields, "solver.", "solver", e) ||
        get_num(solver, "solver.", "lr", LR_DEFAULT, 0, true, LR_MAX, false, &r->lr, e) ||
        get_num(solver, "solver.", "weight_decay", WEIGHT_DECAY_DEFAULT, 0, false, 1, false,
                &r->weight_decay, e) ||
        get_bool(solver, "solver.", "decay_bias", false, &r->decay_bias, e) ||
        get_num(solver, "solver.", "clip_norm", 0, 0, false, CLIP_NORM_MAX, false, &r->clip_norm,
                e) ||
        get_num(solver, "solver.", "label_smoothing", 0, 0, false, 1, true, &r->label_smoothing,
                e))
        return -1;
    const cJSON *ty = opt_field(solver, "type");
    bool sgd = !ty || (cJSON_IsString(ty) && !strcmp(ty->valuestring, "sgd"));
    bool adam = cJSON_IsString(ty) && (!strcmp(ty->valuestring, "adam") ||
                                       !strcmp(ty->valuestring, "adamw"));
    for (size_t i = 0; sgd_only[i] && adam; i++)
        if (opt_field(solver, sgd_only[i]))
            return api_fail(e, 400, "invalid_field", "solver.%s is for type sgd; %s takes beta1, "
                        "beta2 and eps", sgd_only[i], ty->valuestring);
    for (size_t i = 0; adam_only[i] && sgd; i++)
        if (opt_field(solver, adam_only[i]))
            return api_fail(e, 400, "invalid_field", "solver.%s is for types adam and adamw",
                        adam_only[i]);
    if (get_num(solver, "solver.", "momentum", adam ? 0 : MOMENTUM_DEFAULT, 0, false, 1, true,
                &r->momentum, e) ||
        get_bool(solver, "solver.", "nesterov", false, &r->nesterov, e) ||
        get_num(solver, "solver.", "beta1", BETA1_DEFAULT, 0, false, 1, true, &r->beta1, e) ||
        get_num(solver, "solver.", "beta2", BETA2_DEFAULT, 0, false, 1, true, &r->beta2, e) ||
        get_num(solver, "solver.", "eps", EPS_DEFAULT, 0, true, 1, false, &r->eps, e))
        return -1;
    if (r->nesterov && r->momentum <= 0)
        return api_fail(e, 400, "invalid_field", "solver.nesterov needs a momentum above 0");

    r->larc_policy = NULL;
    r->larc_eta = 0;
    const cJSON *larc = opt_field(solver, "larc");
    if (larc) {
        if (!cJSON_IsObject(larc))
            return api_fail(e, 400, "invalid_field", "solver.larc must be an object: {\"policy\": "
                        "\"clip\" or \"scale\", \"eta\": 0.001}");
        if (check_fields(larc, larc_fields, "solver.larc.", "solver.larc", e) ||
            get_num(larc, "solver.larc.", "eta", LARC_ETA_DEFAULT, 0, true, 1, false,
                    &r->larc_eta, e) ||
            get_choice(larc, "solver.larc.", "policy", "clip", larc_policies, no_choices,
                       &r->larc_policy, e))
            return -1;
    }
    return 0;
}

/* local: kiln train, with a dataset folder instead of dataset_id. */
static int parse_request(const cJSON *body, bool local, request *r, api_error *e)
{
    if (!cJSON_IsObject(body))
        return api_fail(e, 400, "invalid_request", "the request body must be a JSON object");
    if (check_fields(body, job_fields, "", "a job", e))
        return -1;

    const cJSON *ds = opt_field(body, "dataset_id");
    r->dataset_id = 0;
    if (local && ds)
        return api_fail(e, 400, "invalid_field", "dataset_id is not used with a dataset folder");
    if (!local && !ds)
        return api_fail(e, 400, "missing_field", "dataset_id is required (the id of a ready dataset)");
    if (!local && get_int(body, "", "dataset_id", 0, 1, DATASET_ID_MAX, &r->dataset_id, e))
        return -1;

    r->network = opt_field(body, "network");
    if (!r->network)
        return api_fail(e, 400, "missing_field",
                    "network is required: a built-in network name (e.g. \"lenet\") or a spec object");
    if (!cJSON_IsString(r->network) && !cJSON_IsObject(r->network))
        return api_fail(e, 400, "invalid_field",
                    "network must be a built-in network name (a string) or a spec object");

    if (get_int(body, "", "epochs", EPOCHS_DEFAULT, 1, EPOCHS_MAX, &r->epochs, e) ||
        get_int(body, "", "batch_size", BATCH_DEFAULT, 1, BATCH_MAX, &r->batch_size, e) ||
        get_int(body, "", "seed", SEED_DEFAULT, 0, SEED_MAX, &r->seed, e) ||
        get_int(body, "", "snapshot_interval", SNAPSHOT_DEFAULT, 1, SNAPSHOT_MAX,
                &r->snapshot_interval, e))
        return -1;

    r->name = NULL;
    const cJSON *name = opt_field(body, "name");
    if (name) {
        if (!cJSON_IsString(name) || strlen(name->valuestring) > NAME_MAX_LEN)
            return api_fail(e, 400, "invalid_field", "name must be a string of at most %d bytes",
                        NAME_MAX_LEN);
        if (name->valuestring[0])
            r->name = name->valuestring;
    }

    const cJSON *solver = opt_field(body, "solver");
    static const cJSON empty = { .type = cJSON_Object };
    if (!solver)
        solver = &empty;
    if (!cJSON_IsObject(solver))
        return api_fail(e, 400, "invalid_field",
                    "solver must be an object: {\"type\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9, "
                    "\"weight_decay\": 0}");
    if (parse_solver(solver, r, e))
        return -1;

    /* The policy's fields; step counts are checked again once the dataset
     * gives the run's length (resolve_lr_policy). */
    r->lr_policy = opt_field(body, "lr_policy");
    if (r->lr_policy) {
        char err[256];
        bool unknown = false;
        lr_policy p;
        if (lr_from_json(r->lr_policy, r->lr, 1, 1, &p, &unknown, err, sizeof err) != 0)
            return api_fail(e, 400, unknown ? "unknown_field" : "invalid_field", "%s", err);
    }

    /* What this build cannot run comes after every 400, before the dataset. */
    if (get_choice(body, "", "precision", "fp32", precisions_ok, precisions_later, &r->precision, e) ||
        get_choice(body, "", "loss_scaling", NULL, loss_scalings, no_choices, &r->loss_scaling,
                   e) ||
        get_choice(solver, "solver.", "type", "sgd", solvers_ok, solvers_later, &r->solver_type, e))
        return -1;
    if (parse_devices(opt_field(body, "devices"), r, e) != 0)
        return -1;
    /* Dynamic loss scaling by default where FP16's range needs it (DESIGN.md, AMP). */
    bool fp32 = !strcmp(r->precision, "fp32");
    if (!r->loss_scaling)
        r->loss_scaling = !strcmp(r->precision, "amp-fp16") ? "dynamic" : "off";
    else if (fp32 && !strcmp(r->loss_scaling, "dynamic"))
        return api_fail(e, 400, "invalid_field", "loss_scaling \"dynamic\" is for mixed precision "
                    "(precision amp-bf16 or amp-fp16), not fp32");
    return 0;
}

/* "devices": absent, one GPU when the machine has one (any free one), else
 * the CPU; 0 or [] the CPU; N any N GPUs, chosen by the scheduler when the
 * job starts; [i, j, ...] those GPUs. Several GPUs train data parallel
 * (engine/net.h), so the batch must have an image for each. */
static int parse_devices(const cJSON *v, struct request *r, api_error *e)
{
    engine_device d[KILN_MAX_DEVICES + 1];
    int n = engine_devices(d, KILN_MAX_DEVICES + 1);
    int gpus = (n > KILN_MAX_DEVICES + 1 ? KILN_MAX_DEVICES + 1 : n) - 1;
    r->ngpus = 0;
    r->gpus_listed = false;
    if (!v) {
        r->ngpus = gpus > 0;
        return 0;
    }
    const char *form = "devices must be a GPU count (0: the CPU) or a list of GPU numbers, "
                       "such as 2 or [0, 1]";
    if (cJSON_IsNumber(v)) {
        if (!(v->valuedouble >= 0 && v->valuedouble <= 1024 &&
              v->valuedouble == (int)v->valuedouble))
            return api_fail(e, 400, "invalid_field", "%s", form);
        r->ngpus = (int)v->valuedouble;
    } else if (cJSON_IsArray(v)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            if (!(cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= 1024 &&
                  x->valuedouble == (int)x->valuedouble))
                return api_fail(e, 400, "invalid_field", "devices must list GPU numbers, such as "
                            "[0, 1]");
            if (r->ngpus == KILN_MAX_DEVICES)
                return api_fail(e, 400, "invalid_field", "devices lists more than %d GPUs",
                            KILN_MAX_DEVICES);
            for (int k = 0; k < r->ngpus; k++)
                if (r->gpu_ids[k] == (int)x->valuedouble)
                    return api_fail(e, 400, "invalid_field", "devices lists GPU %d twice",
                                r->gpu_ids[k]);
            r->gpu_ids[r->ngpus++] = (int)x->valuedouble;
        }
        r->gpus_listed = true;
    } else {
        return api_fail(e, 400, "invalid_field", "%s", form);
    }
    if (r->ngpus == 0)
        return 0;
    if (r->ngpus > r->batch_size)
        return api_fail(e, 400, "invalid_field", "batch_size %.0f is smaller than the %d GPUs in "
                    "devices: each GPU needs at least one image of every batch",
                    r->batch_size, r->ngpus);
    if (gpus == 0)
        return api_fail(e, 422, "no_gpu", "devices asks for a GPU, but this machine has none (or this "
                    "kiln was built without CUDA); leave devices out or give 0 to train on the CPU");
    for (int k = 0; r->gpus_listed && k < r->ngpus; k++)
        if (r->gpu_ids[k] >= gpus)
            return api_fail(e, 422, "unknown_device", "there is no GPU %d (this machine has %d: 0 "
                        "to %d)", r->gpu_ids[k], gpus, gpus - 1);
    if (r->ngpus > gpus)
        return api_fail(e, 422, "unknown_device", "devices asks for %d GPUs, but this machine has %d",
                    r->ngpus, gpus);
    return 0;
}

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

    snprintf(dir, dirlen, "%s/datasets/%lld", abs_data, (long long)id);
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
static int resolve_network(const cJSON *req_net, const ds_info *info, cJSON **spec,
                           char *net_name, size_t namelen, api_error *e)
{
    *spec = NULL;
    if (cJSON_IsString(req_net)) {
        const char *text = net_builtin(req_net->valuestring);
        if (!text) {
            char names[256];
            join_list(net_builtin_names(), names, sizeof names);
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
    net_shape in = { info->c, info->h, info->w };
    if (net_validate(*spec, in, info->nclasses, err, sizeof err) != 0) {
        cJSON_Delete(*spec);
        *spec = NULL;
        return api_fail(e, 422, "invalid_network", "%s", err);
    }
    return 0;
}

/* ---- the resolved config and its file ------------------------------------- */

static int64_t steps_of(const request *r, const ds_info *info);

/* The resolved solver: the type's fields with their defaults. */
static bool add_solver(cJSON *solver, const request *r)
{
    bool sgd = !strcmp(r->solver_type, "sgd");
    bool ok = cJSON_AddStringToObject(solver, "type", r->solver_type) &&
              cJSON_AddNumberToObject(solver, "lr", r->lr);
    if (sgd)
        ok = ok && cJSON_AddNumberToObject(solver, "momentum", r->momentum) &&
             cJSON_AddBoolToObject(solver, "nesterov", r->nesterov);
    else
        ok = ok && cJSON_AddNumberToObject(solver, "beta1", r->beta1) &&
             cJSON_AddNumberToObject(solver, "beta2", r->beta2) &&
             cJSON_AddNumberToObject(solver, "eps", r->eps);
    ok = ok && cJSON_AddNumberToObject(solver, "weight_decay", r->weight_decay) &&
         cJSON_AddBoolToObject(solver, "decay_bias", r->decay_bias) &&
         cJSON_AddNumberToObject(solver, "clip_norm", r->clip_norm) &&
         cJSON_AddNumberToObject(solver, "label_smoothing", r->label_smoothing);
    if (ok && r->larc_policy) {
        cJSON *larc = cJSON_AddObjectToObject(solver, "larc");
        ok = larc && cJSON_AddStringToObject(larc, "policy", r->larc_policy) &&
             cJSON_AddNumberToObject(larc, "eta", r->larc_eta);
    }
    return ok;
}

/* "lr_policy" with warm-up epochs turned into steps for this dataset. */
static int add_lr_policy(cJSON *cfg, const request *r, const ds_info *info)
{
    int64_t per_epoch = steps_of(r, info) / (int64_t)r->epochs;
    lr_policy p;
    char err[256];
    if (lr_from_json(r->lr_policy, r->lr, steps_of(r, info), per_epoch, &p, NULL, err,
                     sizeof err) != 0)
        return -1;                /* checked in parse_request: not reached */
    cJSON *o = cJSON_AddObjectToObject(cfg, "lr_policy");
    return o && lr_to_json(&p, o) == 0 ? 0 : -1;
}

int jobspec_gpus(const cJSON *cfg, int *ids, int max, bool *listed)
{
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(cfg, "backend");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(cfg, "gpu_count");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(cfg, "gpus");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(cfg, "gpu");
    *listed = false;
    if (!cJSON_IsString(be) || strcmp(be->valuestring, "cuda") != 0)
        return 0;
    if (!cJSON_IsNumber(count)) {                   /* written before multi-GPU jobs */
        *listed = cJSON_IsNumber(one) && one->valueint >= 0 && max > 0;
        if (*listed)
            ids[0] = one->valueint;
        return 1;
    }
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        if (cJSON_IsNumber(x) && n < max)
            ids[n++] = x->valueint;
    }
    *listed = n > 0;
    return *listed ? n : count->valueint < 1 ? 1 : count->valueint;
}

/* The GPUs of a CUDA job in job.json (jobs/scheduler.c reads them):
 * "gpu_count", and "gpus", the list the request named ([]: any free ones). */
static bool add_gpus(cJSON *cfg, const request *r)
{
    if (!r->ngpus)
        return true;
    cJSON *list = cJSON_CreateIntArray(r->gpu_ids, r->gpus_listed ? r->ngpus : 0);
    if (!cJSON_AddItemToObject(cfg, "gpus", list)) {
        cJSON_Delete(list);
        return false;
    }
    return cJSON_AddNumberToObject(cfg, "gpu_count", r->ngpus) != NULL;
}

static cJSON *build_config(const request *r, const char *dataset_dir, const ds_info *info,
                           const char *net_name, cJSON *spec)
{
    cJSON *cfg = cJSON_CreateObject();
    if (!cfg)
        goto fail;
    bool ok = cJSON_AddNumberToObject(cfg, "id", 0) &&   /* set once the row exists */
              cJSON_AddNumberToObject(cfg, "dataset_id", r->dataset_id) &&
              cJSON_AddStringToObject(cfg, "dataset_dir", dataset_dir) &&
              cJSON_AddStringToObject(cfg, "network_name", net_name);
    if (!ok)
        goto fail;
    if (!cJSON_AddItemToObject(cfg, "network", spec))
        goto fail;
    spec = NULL;

    int shape[3] = { info->c, info->h, info->w };
    cJSON *input = cJSON_CreateIntArray(shape, 3);
    cJSON *classes = cJSON_CreateStringArray((const char *const *)info->classes, info->nclasses);
    if (!input || !classes) {
        cJSON_Delete(input);
        cJSON_Delete(classes);
        goto fail;
    }
    if (!cJSON_AddItemToObject(cfg, "input", input)) {
        cJSON_Delete(input);
        cJSON_Delete(classes);
        goto fail;
    }
    if (!cJSON_AddItemToObject(cfg, "classes", classes)) {
        cJSON_Delete(classes);
        goto fail;
    }

    cJSON *solver = cJSON_CreateObject();
    if (!solver)
        goto fail;
    ok = cJSON_AddNumberToObject(cfg, "epochs", r->epochs) &&
         cJSON_AddNumberToObject(cfg, "batch_size", r->batch_size) &&
         cJSON_AddStringToObject(cfg, "precision", r->precision) &&
         cJSON_AddStringToObject(cfg, "loss_scaling", r->loss_scaling) &&
         cJSON_AddStringToObject(cfg, "backend", r->ngpus ? "cuda" : "cpu") &&
         add_gpus(cfg, r) &&
         cJSON_AddNumberToObject(cfg, "seed", r->seed) &&
         cJSON_AddNumberToObject(cfg, "snapshot_interval", r->snapshot_interval) &&
         add_solver(solver, r);
    if (!cJSON_AddItemToObject(cfg, "solver", solver)) {
        cJSON_Delete(solver);
        goto fail;
    }
    if (!ok || add_lr_policy(cfg, r, info) != 0)
        goto fail;
    if (r->name && !cJSON_AddStringToObject(cfg, "name", r->name))
        goto fail;
    return cfg;
fail:
    cJSON_Delete(spec);
    cJSON_Delete(cfg);
    return NULL;
}

static int mkdir_if_missing(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* Writes text to dir/name atomically (engine/fileio.h). */
static int write_atomic(const char *dir, const char *name, const char *text, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (!fmt_path(path, sizeof path, "%s/%s", dir, name)) {
        set_err(err, errlen, "the path of %s in %s is too long", name, dir);
        return -1;
    }
    return fio_write_atomic(path, text, strlen(text), err, errlen);
}

/* Makes <data>/jobs/<id>, moving aside a folder left by an older database. */
static int make_job_dir(const char *abs_data, int64_t id, char *dir, size_t dirlen, char *err,
                        size_t errlen)
{
    char jobs[PATH_MAX];
    if (!fmt_path(jobs, sizeof jobs, "%s/jobs", abs_data)) {
        set_err(err, errlen, "the data directory's path is too long");
        return -1;
    }
    if (mkdir_if_missing(jobs) != 0) {
        set_err(err, errlen, "cannot create %s: %s", jobs, strerror(errno));
        return -1;
    }
    jobspec_dir(abs_data, id, dir, dirlen);
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST) {
        set_err(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    char aside[PATH_MAX + 32];
    fmt_path(aside, sizeof aside, "%s.stale-%lld", dir, (long long)time(NULL));
    fprintf(stderr, "kiln: %s exists from an older database; moving it to %s\n", dir, aside);
    if (rename(dir, aside) != 0 || mkdir(dir, 0755) != 0) {
        set_err(err, errlen, "cannot replace the stale folder %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int64_t steps_of(const request *r, const ds_info *info)
{
    int64_t batch = (int64_t)r->batch_size;
    int64_t per_epoch = ((int64_t)info->train_count + batch - 1) / batch;
    return per_epoch * (int64_t)r->epochs;
}

int jobspec_create(store *st, const char *data_dir, const cJSON *body, int64_t *id, api_error *e)
{
    request r;
    ds_info info;
    bool have_info = false;
    cJSON *spec = NULL, *cfg = NULL;
    char *text = NULL;
    char abs_data[PATH_MAX], dataset_dir[PATH_MAX + 64], job_dir[PATH_MAX + 64];
    char net_name[64], err[512];
    int64_t job_id = 0;
    bool inserted = false;
    int ret = -1;

    memset(e, 0, sizeof *e);
    memset(&info, 0, sizeof info);
    if (parse_request(body, false, &r, e))
        goto out;
    if (!realpath(data_dir, abs_data)) {
        api_fail(e, 500, "internal", "data directory %s: %s", data_dir, strerror(errno));
        goto out;
    }
    if (load_dataset(st, abs_data, (int64_t)r.dataset_id, dataset_dir, sizeof dataset_dir, &info, e))
        goto out;
    have_info = true;
    if (resolve_network(r.network, &info, &spec, net_name, sizeof net_name, e))
        goto out;

    cfg = build_config(&r, dataset_dir, &info, net_name, spec);
    spec = NULL;                              /* owned by cfg (or freed) now */
    if (!cfg || !(text = cJSON_PrintUnformatted(cfg))) {
        api_fail(e, 500, "internal", "out of memory building the job config");
        goto out;
    }
    if (store_job_insert(st, (int64_t)r.dataset_id, net_name, text, (int)r.epochs, &job_id, err,
                         sizeof err) != 0) {
        api_fail(e, 500, "internal", "storing the job failed: %s", err);
        goto out;
    }
    inserted = true;

    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "id"), (double)job_id);
    cJSON_free(text);
    text = cJSON_Print(cfg);
    if (!text) {
        api_fail(e, 500, "internal", "out of memory building the job config");
        goto out;
    }
    if (make_job_dir(abs_data, job_id, job_dir, sizeof job_dir, err, sizeof err) != 0 ||
        write_atomic(job_dir, "job.json", text, err, sizeof err) != 0) {
        api_fail(e, 500, "internal", "writing job.json failed: %s", err);
        goto out;
    }
    if (store_job_set_config(st, job_id, text) != 0 ||
        store_job_set_progress(st, job_id, 0, 0, steps_of(&r, &info), 0, -1) != 0) {
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
    cJSON_Delete(spec);
    if (have_info)
        ds_info_free(&info);
    return ret;
}

cJSON *jobspec_resolve_local(const cJSON *body, const char *dataset_dir, api_error *e)
{
    request r;
    ds_info info;
    cJSON *spec = NULL, *cfg = NULL;
    char abs_dir[PATH_MAX], err[512], net_name[64];
    memset(e, 0, sizeof *e);
    if (parse_request(body, true, &r, e))
        return NULL;
    if (!realpath(dataset_dir, abs_dir)) {
        api_fail(e, 422, "dataset_not_found", "dataset folder %s: %s", dataset_dir, strerror(errno));
        return NULL;
    }
    if (ds_info_load(abs_dir, &info, err, sizeof err) != 0) {
        api_fail(e, 422, "dataset_not_found", "%s is not a prepared dataset: %s", abs_dir, err);
        return NULL;
    }
    if (info.train_count == 0)
        api_fail(e, 422, "dataset_empty", "dataset %s has no training images", abs_dir);
    else if (resolve_network(r.network, &info, &spec, net_name, sizeof net_name, e) == 0 &&
             !(cfg = build_config(&r, abs_dir, &info, net_name, spec)))
        api_fail(e, 500, "internal", "out of memory building the job config");
    ds_info_free(&info);
    return cfg;
}
