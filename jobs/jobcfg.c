/* jobs/jobcfg.c: a job's configuration, read and written (contract in jobcfg.h).
 *
 * The table `rules` holds every scalar setting of a job: where it sits in the
 * JSON ("solver.lr", "augmentation.crop"), its kind, default and range, the
 * solver types it goes with, and where it lands in the struct. One reader per kind applies a rule;
 * the schema endpoint prints the same rows. Fields that are not scalars
 * (dataset_id, network, name, devices, lr_policy, and the resolved form's
 * dataset and device fields) have their own readers below the table.
 *
 * Order of checks, so that the first problem a user sees is the cheapest to
 * fix: the body's shape, unknown fields (400 unknown_field), required fields
 * (400 missing_field), each field's type and range in table order (400
 * invalid_field), fields that depend on others, then what this machine cannot
 * do (422 no_gpu, unknown_device).
 */
#include "jobs/jobcfg.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"      /* LAYOUT_JOB_JSON */
#include "engine/fileio.h"    /* fio_read_file */
#include "engine/lr.h"        /* lr_from_json */
#include "engine/optim.h"     /* OPTIM_ADAM_*, OPTIM_LARC_ETA: the defaults */


/* ---- the table -------------------------------------------------------------- */

typedef enum rule_kind { R_INT, R_NUM, R_BOOL, R_CHOICE } rule_kind;
typedef enum rule_store { S_INT, S_U64, S_DOUBLE, S_BOOL } rule_store;   /* enums are S_INT */

#define ALL_SOLVERS 0u
#define SGD_ONLY (1u << SOLVER_SGD)
#define ADAM_ONLY (1u << SOLVER_ADAM | 1u << SOLVER_ADAMW)

static const char *const *loss_scaling_names(void)
{
    static const char *const names[] = { "dynamic", "off", NULL };
    return names;
}
static const int loss_scaling_values[] = { 1, 0 };              /* dynamic_scaling */
static const int larc_values[] = { LARC_CLIP, LARC_SCALE };     /* the names leave out none */

/* The validation metrics of snap_metric (jobs/snapshots.h), the first in
 * its enum order, so a choice's index is the metric. Filled once from
 * snap_metric_name, the one table. Only validation metrics: every epoch's
 * are whole after a resume, where a training mean of an epoch resumed
 * part-way covers only the steps after the resume. */
static const char *metric_names_[SNAP_METRIC_COUNT + 1];
static void fill_metric_names(void)
{
    for (int m = 0, n = 0; m < SNAP_METRIC_COUNT; m++)
        if (!strncmp(snap_metric_name((snap_metric)m), "val/", 4) && n == m)
            metric_names_[n++] = snap_metric_name((snap_metric)m);
}
static const char *const *snap_metric_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_metric_names);
    return metric_names_;
}

typedef struct rule {
    const char *obj;                   /* "" top level, "solver", "solver.larc" */
    const char *key;
    rule_kind kind;
    double def;                        /* R_CHOICE: the index of the default name; -1: see doc */
    double lo, hi;
    bool lo_open, hi_open;
    const char *const *(*names)(void); /* R_CHOICE */
    const int *values;                 /* R_CHOICE: what name i stores; NULL: i itself */
    unsigned solvers;                  /* the solver types it goes with; 0: all */
    rule_store store;
    size_t off;                        /* in jobcfg */
    const char *doc;
} rule;

#define AT(field) offsetof(jobcfg, field)
#define SOLVER(field) (offsetof(jobcfg, solver) + offsetof(jobcfg_solver, field))
#define AUG(field) (offsetof(jobcfg, augment) + offsetof(jobcfg_augment, field))
#define EARLY(field) (offsetof(jobcfg, early_stop) + offsetof(jobcfg_early_stop, field))
#define EPOCHS_MAX 10000

_Static_assert(sizeof(precision_mode) == sizeof(int) && sizeof(solver_type) == sizeof(int) &&
               sizeof(larc_policy) == sizeof(int) && sizeof(snap_metric) == sizeof(int),
               "enums are stored as int");

static const rule rules[] = {
    { "", "epochs", R_INT, 10, 1, EPOCHS_MAX, .store = S_INT, .off = AT(epochs),
      .doc = "passes over the training split" },
    { "", "batch_size", R_INT, 64, 1, 4096, .store = S_INT, .off = AT(batch_size),
      .doc = "images per step (the global batch, split across GPUs)" },
    { "", "seed", R_INT, 1, 0, 4294967295.0, .store = S_U64, .off = AT(seed),
      .doc = "initialisation, shuffling and dropout" },
    { "", "priority", R_INT, 0, JOBCFG_PRIORITY_MIN, JOBCFG_PRIORITY_MAX, .store = S_INT,
      .off = AT(priority), .doc = "the queue's order: higher starts first, then the oldest; "
      "the owner or an admin may change it while the job waits" },
    { "", "nodes", R_INT, 1, 1, KILN_MAX_NODES, .store = S_INT, .off = AT(nodes),
      .doc = "nodes the job spans, each running its share of the ranks (data parallel across "
      "processes); more than 1 needs kiln serve --dispatcher slurm" },
    { "", "tasks_per_node", R_INT, 1, 1, KILN_MAX_DEVICES, .store = S_INT, .off = AT(tasks_per_node),
      .doc = "CPU jobs: worker processes (ranks) on each node, each training its share of every "
      "batch; more than 1 needs kiln serve --dispatcher slurm (a GPU job runs one rank per GPU)" },
    { "", "snapshot_interval", R_INT, 1, 1, 10000, .store = S_INT, .off = AT(snapshot_interval),
      .doc = "a checkpoint every this many epochs" },
    { "", "checkpoint_metric", R_CHOICE, SNAP_VAL_ACCURACY, .names = snap_metric_names,
      .store = S_INT, .off = AT(checkpoint_metric),
      .doc = "the metric that picks a job's best snapshot (GET .../snapshots, epoch=best): "
      "higher accuracy or lower loss is better; ties go to the earlier epoch" },
    { "", "keep_checkpoints", R_INT, -1, 1, EPOCHS_MAX, .store = S_INT, .off = AT(keep_checkpoints),
      .doc = "keep only the last N snapshots plus the best (the others' files are deleted as "
      "training goes); null or absent: keep every snapshot" },
    { "early_stopping", "metric", R_CHOICE, SNAP_VAL_LOSS, .names = snap_metric_names,
      .store = S_INT, .off = EARLY(metric),
      .doc = "early stopping's metric; the \"early_stopping\" object absent: no early stopping" },
    { "early_stopping", "patience", R_INT, 5, 1, EPOCHS_MAX, .store = S_INT, .off = EARLY(patience),
      .doc = "stop (as done) after this many epochs in a row without an improvement" },
    { "early_stopping", "min_delta", R_NUM, 0, 0, 1e6, .store = S_DOUBLE, .off = EARLY(min_delta),
      .doc = "an improvement is a change over the best value so far by more than this" },
    { "", "loader_threads", R_INT, 0, 0, LOADER_THREADS_MAX, .store = S_INT, .off = AT(loader_threads),
      .doc = "threads that decode and augment the images ahead of the step; 0: what fits the "
      "machine (up to 4); the batches are the same for any number" },
    { "augmentation", "crop", R_INT, 0, 0, 65535, .store = S_INT, .off = AUG(crop),
      .doc = "a random crop x crop window of each training image, the centre one at validation; "
      "the network's input is this size; 0: the stored size (no crop, or with pad CIFAR's crop "
      "back to it); at most the dataset's width and height" },
    { "augmentation", "pad", R_INT, 0, 0, DS_AUGMENT_PAD_MAX, .store = S_INT, .off = AUG(pad),
      .doc = "black pixels around each side of the image before the random crop (CIFAR: 4)" },
    { "augmentation", "mirror", R_BOOL, 0, .store = S_BOOL, .off = AUG(mirror),
      .doc = "flip training images left to right with probability 1/2" },
    { "", "precision", R_CHOICE, PREC_FP32, .names = precision_names, .store = S_INT,
      .off = AT(precision), .doc = "fp32, or mixed precision in bfloat16 or FP16" },
    { "", "loss_scaling", R_CHOICE, -1, .names = loss_scaling_names,
      .values = loss_scaling_values, .store = S_BOOL,
      .off = AT(dynamic_scaling), .doc = "dynamic loss scaling; default dynamic for amp-fp16, "
      "else off (dynamic is for mixed precision only)" },
    { "solver", "type", R_CHOICE, SOLVER_SGD, .names = solver_type_names, .store = S_INT,
      .off = SOLVER(type), .doc = "the optimizer (PyTorch's update rules)" },
    { "solver", "lr", R_NUM, 0.01, 0, 10, true, false, .store = S_DOUBLE, .off = SOLVER(lr),
      .doc = "the base learning rate" },
    { "solver", "momentum", R_NUM, 0.9, 0, 1, false, true, .solvers = SGD_ONLY,
      .store = S_DOUBLE, .off = SOLVER(momentum) },
    { "solver", "nesterov", R_BOOL, 0, .solvers = SGD_ONLY, .store = S_BOOL,
      .off = SOLVER(nesterov), .doc = "Nesterov momentum (needs a momentum above 0)" },
    { "solver", "beta1", R_NUM, OPTIM_ADAM_BETA1, 0, 1, false, true, .solvers = ADAM_ONLY, .store = S_DOUBLE,
      .off = SOLVER(beta1) },
    { "solver", "beta2", R_NUM, OPTIM_ADAM_BETA2, 0, 1, false, true, .solvers = ADAM_ONLY,
      .store = S_DOUBLE, .off = SOLVER(beta2) },
    { "solver", "eps", R_NUM, OPTIM_ADAM_EPS, 0, 1, true, false, .solvers = ADAM_ONLY, .store = S_DOUBLE,
      .off = SOLVER(eps) },
    { "solver", "weight_decay", R_NUM, 0, 0, 1, .store = S_DOUBLE, .off = SOLVER(weight_decay),
      .doc = "L2 for sgd and adam, decoupled for adamw" },
    { "solver", "decay_bias", R_BOOL, 0, .store = S_BOOL, .off = SOLVER(decay_bias),
      .doc = "weight decay on biases and batch-norm parameters too" },
    { "solver", "clip_norm", R_NUM, 0, 0, 1e6, .store = S_DOUBLE, .off = SOLVER(clip_norm),
      .doc = "clip gradients to this global L2 norm; 0: off" },
    { "solver", "label_smoothing", R_NUM, 0, 0, 1, false, true, .store = S_DOUBLE,
      .off = SOLVER(label_smoothing), .doc = "the loss's eps; training steps only" },
    { "solver.larc", "policy", R_CHOICE, 0, .names = larc_policy_names, .values = larc_values,
      .solvers = SGD_ONLY,
      .store = S_INT, .off = SOLVER(larc), .doc = "LARC (seeds/000); solver.larc absent: none" },
    { "solver.larc", "eta", R_NUM, OPTIM_LARC_ETA, 0, 1, true, false, .solvers = SGD_ONLY,
      .store = S_DOUBLE, .off = SOLVER(larc_eta), .doc = "LARC's trust coefficient" },
};

#define NRULES (sizeof rules / sizeof rules[0])

/* Fields that are not scalars, per object and form, for the unknown-field check. */
static const char *const request_fields[] = {
    "dataset_id", "network", "name", "devices", "solver", "lr_policy", "augmentation",
    "early_stopping", NULL,
};
static const char *const resolved_fields[] = {
    "id", "dataset_id", "dataset_dir", "network_name", "network", "input", "classes", "name",
    "backend", "gpus", "gpu_count", "gpu", "replicas", "solver", "lr_policy", "augmentation",
    "early_stopping", NULL,
};
static const char *const solver_fields[] = { "larc", NULL };

/* ---- small helpers ------------------------------------------------------------- */

static bool in_list(const char *const *list, const char *s)
{
    for (size_t i = 0; list[i]; i++)
        if (!strcmp(list[i], s))
            return true;
    return false;
}

/* "\"a\", \"b\" or \"c\"" into buf: the choices as a message names them. */
static void join_quoted(const char *const *list, char *buf, size_t n)
{
    size_t used = 0, count = 0;
    while (list[count])
        count++;
    buf[0] = '\0';
    for (size_t i = 0; i < count && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s\"%s\"", i == 0 ? "" : i + 1 == count ? " or " : ", ",
                         list[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
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

/* "solver." for obj "solver", "" for the top level. */
static void prefix_of(const rule *r, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s", r->obj, r->obj[0] ? "." : "");
}

static const rule *rule_at(const char *path)
{
    for (size_t i = 0; i < NRULES; i++) {
        char full[64];
        snprintf(full, sizeof full, "%s%s%s", rules[i].obj, rules[i].obj[0] ? "." : "",
                 rules[i].key);
        if (!strcmp(full, path))
            return &rules[i];
    }
    return NULL;
}

/* ---- one rule's reader ------------------------------------------------------------ */

/* 400 invalid_field stating rule r: what its value must be. */
static int refuse(const rule *r, api_error *e)
{
    char where[32];
    prefix_of(r, where, sizeof where);
    switch (r->kind) {
    case R_INT:
        return api_fail(e, 400, "invalid_field", "%s%s must be an integer from %.0f to %.0f",
                        where, r->key, r->lo, r->hi);
    case R_NUM:
        return api_fail(e, 400, "invalid_field", "%s%s must be a number %s %g and %s %g", where,
                        r->key, r->lo_open ? "greater than" : "at least", r->lo,
                        r->hi_open ? "below" : "at most", r->hi);
    case R_BOOL:
        return api_fail(e, 400, "invalid_field", "%s%s must be true or false", where, r->key);
    case R_CHOICE: {
        char all[160];
        join_quoted(r->names(), all, sizeof all);
        return api_fail(e, 400, "invalid_field", "%s%s must be %s", where, r->key, all);
    }
    }
    return api_fail(e, 500, "internal", "rule %s has no reader", r->key);
}

/* What a choice rule stores for its name i. */
static int choice_value(const rule *r, int i)
{
    return r->values ? r->values[i] : i;
}

/* The value of rule r in obj (the rule's own object), or its default, as a
 * double (R_CHOICE: what the chosen name stores; a default that depends on
 * other fields, def < 0, stays -1). */
static int read_rule(const rule *r, const cJSON *obj, double *out, api_error *e)
{
    const cJSON *v = obj ? opt_field(obj, r->key) : NULL;
    if (!v) {
        *out = r->kind == R_CHOICE && r->def >= 0 ? choice_value(r, (int)r->def) : r->def;
        return 0;
    }
    switch (r->kind) {
    case R_INT:
        if (!is_integer(v) || v->valuedouble < r->lo || v->valuedouble > r->hi)
            return refuse(r, e);
        *out = v->valuedouble;
        return 0;
    case R_NUM: {
        double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(isfinite(x) && (r->lo_open ? x > r->lo : x >= r->lo) &&
              (r->hi_open ? x < r->hi : x <= r->hi)))
            return refuse(r, e);
        *out = x;
        return 0;
    }
    case R_BOOL:
        if (!cJSON_IsBool(v))
            return refuse(r, e);
        *out = cJSON_IsTrue(v);
        return 0;
    case R_CHOICE: {
        const char *const *names = r->names();
        for (int i = 0; cJSON_IsString(v) && names[i]; i++)
            if (!strcmp(names[i], v->valuestring)) {
                *out = choice_value(r, i);
                return 0;
            }
        return refuse(r, e);
    }
    }
    return refuse(r, e);
}

static void store_rule(const rule *r, jobcfg *c, double v)
{
    char *at = (char *)c + r->off;
    switch (r->store) {
    case S_INT: { int x = (int)v; memcpy(at, &x, sizeof x); break; }
    case S_U64: { uint64_t x = (uint64_t)v; memcpy(at, &x, sizeof x); break; }
    case S_DOUBLE: memcpy(at, &v, sizeof v); break;
    case S_BOOL: { bool x = v != 0; memcpy(at, &x, sizeof x); break; }
    }
}

static double load_rule(const rule *r, const jobcfg *c)
{
    const char *at = (const char *)c + r->off;
    switch (r->store) {
    case S_INT: { int x; memcpy(&x, at, sizeof x); return x; }
    case S_U64: { uint64_t x; memcpy(&x, at, sizeof x); return (double)x; }
    case S_DOUBLE: { double x; memcpy(&x, at, sizeof x); return x; }
    case S_BOOL: { bool x; memcpy(&x, at, sizeof x); return x; }
    }
    return 0;
}

int jobcfg_refuse(const char *path, api_error *e)
{
    const rule *r = rule_at(path);
    return r ? refuse(r, e) : api_fail(e, 500, "internal", "%s is not a setting", path);
}

/* Rule `path` of the given kind read from obj, as read_rule gives it. */
static int read_path(const cJSON *obj, const char *path, rule_kind kind, double *out, api_error *e)
{
    const rule *r = rule_at(path);
    if (!r || r->kind != kind)
        return api_fail(e, 500, "internal", "%s is not a setting of that kind", path);
    return read_rule(r, obj, out, e);
}

int jobcfg_read_int(const cJSON *obj, const char *path, int *out, api_error *e)
{
    double v;
    if (read_path(obj, path, R_INT, &v, e) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

int jobcfg_read_num(const cJSON *obj, const char *path, double *out, api_error *e)
{
    return read_path(obj, path, R_NUM, out, e);
}

int jobcfg_read_choice(const cJSON *obj, const char *path, int *out, api_error *e)
{
    double v;
    if (read_path(obj, path, R_CHOICE, &v, e) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* ---- objects and their fields --------------------------------------------------- */

/* 400 unknown_field for the first key of obj that neither a rule of `where`
 * nor `extra` names; 400 invalid_field for a key given twice. */
static int check_fields(const cJSON *obj, const char *where, const char *const *extra,
                        const char *what, api_error *e)
{
    const char *names[64];
    size_t n = 0;
    for (size_t i = 0; i < NRULES && n < 48; i++)
        if (!strcmp(rules[i].obj, where))
            names[n++] = rules[i].key;
    for (size_t i = 0; extra[i] && n < 63; i++)
        names[n++] = extra[i];
    names[n] = NULL;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s%s", where, where[0] ? "." : "");
    for (const cJSON *c = obj->child; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        if (!in_list(names, key)) {
            char all[400];
            settings_join(names, all, sizeof all);
            return api_fail(e, 400, "unknown_field", "unknown field \"%s%.64s\": %s takes %s",
                            prefix, key, what, all);
        }
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (d->string && !strcmp(d->string, key))
                return api_fail(e, 400, "invalid_field", "field \"%s%.64s\" is given twice",
                                prefix, key);
    }
    return 0;
}

/* The solver's type, read first: which fields the others may be depends on it. */
static int solver_kind(const cJSON *solver, solver_type *out, api_error *e)
{
    double v;
    if (read_rule(rule_at("solver.type"), solver, &v, e) != 0)
        return -1;
    *out = (solver_type)(int)v;
    return 0;
}

/* Fields given for another solver type: "solver.beta1 is for types adam and adamw". */
static int check_solver_fields(const cJSON *solver, solver_type t, api_error *e)
{
    for (size_t i = 0; i < NRULES; i++) {
        const rule *r = &rules[i];
        if (!r->solvers || (r->solvers & (1u << t)) || strcmp(r->obj, "solver") != 0 ||
            !opt_field(solver, r->key))
            continue;
        if (r->solvers == SGD_ONLY)
            return api_fail(e, 400, "invalid_field", "solver.%s is for type sgd; %s takes beta1, "
                            "beta2 and eps", r->key, solver_type_name(t));
        return api_fail(e, 400, "invalid_field", "solver.%s is for types adam and adamw", r->key);
    }
    if (t != SOLVER_SGD && opt_field(solver, "larc"))
        return api_fail(e, 400, "invalid_field", "solver.larc is for type sgd; %s takes beta1, "
                        "beta2 and eps", solver_type_name(t));
    return 0;
}

/* The objects of a request that hold rules (NULL: absent). */
typedef struct rule_objects {
    const cJSON *body, *solver, *larc, *augmentation, *early_stopping;
} rule_objects;

static const cJSON *object_of(const rule *r, const rule_objects *o)
{
    return !strcmp(r->obj, "") ? o->body : !strcmp(r->obj, "solver") ? o->solver :
           !strcmp(r->obj, "solver.larc") ? o->larc :
           !strcmp(r->obj, "early_stopping") ? o->early_stopping : o->augmentation;
}

/* Every rule, in table order, from its object in body. Rules of another
 * solver type are left at zero (the engine's "not used"). */
static int read_rules(const rule_objects *objs, jobcfg *c, api_error *e)
{
    solver_type t = c->solver.type;
    for (size_t i = 0; i < NRULES; i++) {
        const rule *r = &rules[i];
        const cJSON *obj = object_of(r, objs);
        if (r->solvers && !(r->solvers & (1u << t)))
            continue;
        if (!strcmp(r->obj, "solver.larc") && !objs->larc)
            continue;                              /* no LARC: policy none, eta 0 */
        if (!strcmp(r->obj, "early_stopping") && !objs->early_stopping)
            continue;                              /* no early stopping: all zero */
        double v;
        if (read_rule(r, obj, &v, e) != 0)
            return -1;
        if (r->def < 0 && !opt_field(obj, r->key))
            continue;                              /* a default that depends: resolved below */
        store_rule(r, c, v);
    }
    return 0;
}

/* "loss_scaling": 1 dynamic, -1 off; dynamic by default where FP16's range
 * needs it (DESIGN.md, AMP), and only under mixed precision. */
static int resolve_loss_scaling(const cJSON *body, jobcfg *c, api_error *e)
{
    const cJSON *v = opt_field(body, "loss_scaling");
    if (!v)
        c->dynamic_scaling = c->precision == PREC_AMP_FP16;
    if (v && c->precision == PREC_FP32 && c->dynamic_scaling)
        return api_fail(e, 400, "invalid_field", "loss_scaling \"dynamic\" is for mixed precision "
                        "(precision amp-bf16 or amp-fp16), not fp32");
    return 0;
}

/* ---- the non-scalar fields -------------------------------------------------------- */

static int read_name(const cJSON *body, jobcfg *c, api_error *e)
{
    const cJSON *name = opt_field(body, "name");
    if (!name)
        return 0;
    if (!cJSON_IsString(name) || strlen(name->valuestring) > JOBCFG_NAME_MAX)
        return api_fail(e, 400, "invalid_field", "name must be a string of at most %d bytes",
                        JOBCFG_NAME_MAX);
    snprintf(c->name, sizeof c->name, "%s", name->valuestring);
    return 0;
}

static int read_network(const cJSON *body, jobcfg_form form, jobcfg *c, api_error *e)
{
    const cJSON *nv = opt_field(body, "network");
    if (!nv)
        return api_fail(e, 400, "missing_field", "network is required: a built-in network name "
                        "(e.g. \"lenet\") or a spec object");
    if (form == JOBCFG_RESOLVED ? !cJSON_IsObject(nv) : !cJSON_IsString(nv) && !cJSON_IsObject(nv))
        return api_fail(e, 400, "invalid_field", form == JOBCFG_RESOLVED ?
                        "network must be the resolved spec object" :
                        "network must be a built-in network name (a string) or a spec object");
    if (!(c->network = cJSON_Duplicate(nv, 1)))
        return api_fail(e, 500, "internal", "out of memory copying the network");
    return 0;
}

/* The policy's fields; step counts are checked again once the dataset gives
 * the run's length (jobspec). */
static int read_lr_policy(const cJSON *body, jobcfg *c, api_error *e)
{
    const cJSON *p = opt_field(body, "lr_policy");
    if (!p)
        return 0;
    char err[256];
    bool unknown = false;
    lr_policy lp;
    if (lr_from_json(p, c->solver.lr, 1, 1, &lp, &unknown, err, sizeof err) != 0)
        return api_fail(e, 400, unknown ? "unknown_field" : "invalid_field", "%s", err);
    if (!(c->lr_policy = cJSON_Duplicate(p, 1)))
        return api_fail(e, 500, "internal", "out of memory copying lr_policy");
    return 0;
}

/* A GPU's number in a request or job.json. */
static bool gpu_number(const cJSON *x)
{
    return is_integer(x) && x->valuedouble >= 0 && x->valuedouble <= NET_DEVICE_NUMBER_MAX;
}

/* A list of distinct GPU numbers into d (what devices names, or job.json's gpus). */
static int read_gpu_list(const cJSON *list, const char *field, jobcfg_devices *d, api_error *e)
{
    const cJSON *x;
    d->count = 0;
    cJSON_ArrayForEach(x, list) {
        if (!gpu_number(x))
            return api_fail(e, 400, "invalid_field", "%s must list GPU numbers, such as [0, 1]",
                            field);
        if (d->count == KILN_MAX_DEVICES)
            return api_fail(e, 400, "invalid_field", "%s lists more than %d GPUs", field,
                            KILN_MAX_DEVICES);
        for (int k = 0; k < d->count; k++)
            if (d->ids[k] == (int)x->valuedouble)
                return api_fail(e, 400, "invalid_field", "%s lists GPU %d twice", field, d->ids[k]);
        d->ids[d->count++] = (int)x->valuedouble;
    }
    d->listed = d->count > 0;
    return 0;
}

/* GPUs on this machine (engine_devices lists the CPU first). */
static int machine_gpus(void)
{
    engine_device d[KILN_MAX_DEVICES + 1];
    int n = engine_devices(d, KILN_MAX_DEVICES + 1);
    return (n > KILN_MAX_DEVICES + 1 ? KILN_MAX_DEVICES + 1 : n) - 1;
}

static bool on_cluster;       /* jobcfg_set_cluster */

void jobcfg_set_cluster(bool cluster)
{
    on_cluster = cluster;
}

bool jobcfg_cluster(void)
{
    return on_cluster;
}

/* A request's "devices": absent, one GPU when the machine has one (any free
 * one), else the CPU; 0 or [] the CPU; N any N GPUs, chosen by the scheduler
 * when the job starts; [i, j, ...] those GPUs. Several GPUs train data
 * parallel (engine/net.h), so the batch must have an image for each. On a
 * cluster (jobcfg_set_cluster): absent is the CPU, N is N GPUs of a node,
 * which Slurm checks and picks, and a list is refused. */
static int read_devices(const cJSON *body, jobcfg *c, api_error *e)
{
    const cJSON *v = opt_field(body, "devices");
    jobcfg_devices *d = &c->devices;
    int gpus = on_cluster ? KILN_MAX_DEVICES : machine_gpus();
    memset(d, 0, sizeof *d);
    if (on_cluster && cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0)
        return api_fail(e, 400, "invalid_field", "devices must be a GPU count under --dispatcher "
                        "slurm (Slurm picks a node's GPUs), not a list");
    if (!v) {
        d->count = !on_cluster && gpus > 0;
    } else if (cJSON_IsNumber(v)) {
        if (!gpu_number(v))
            return api_fail(e, 400, "invalid_field", "devices must be a GPU count (0: the CPU) or "
                            "a list of GPU numbers, such as 2 or [0, 1]");
        d->count = (int)v->valuedouble;
    } else if (cJSON_IsArray(v)) {
        if (read_gpu_list(v, "devices", d, e) != 0)
            return -1;
    } else {
        return api_fail(e, 400, "invalid_field", "devices must be a GPU count (0: the CPU) or a "
                        "list of GPU numbers, such as 2 or [0, 1]");
    }
    d->kind = d->count ? BACKEND_CUDA : BACKEND_CPU;
    if (d->count == 0) {
        d->count = 1;
        return 0;
    }
    if (d->count > c->batch_size)
        return api_fail(e, 400, "invalid_field", "batch_size %d is smaller than the %d GPUs in "
                        "devices: each GPU needs at least one image of every batch",
                        c->batch_size, d->count);
    if (gpus == 0)
        return api_fail(e, 422, "no_gpu", "devices asks for a GPU, but this machine has none (or "
                        "this kiln was built without CUDA); leave devices out or give 0 to train "
                        "on the CPU");
    for (int k = 0; d->listed && k < d->count; k++)
        if (d->ids[k] >= gpus)
            return api_fail(e, 422, "unknown_device", "there is no GPU %d (this machine has %d: 0 "
                            "to %d)", d->ids[k], gpus, gpus - 1);
    if (d->count > gpus)
        return api_fail(e, 422, "unknown_device", "devices asks for %d GPUs, but this machine has "
                        "%d", d->count, gpus);
    return 0;
}

/* job.json's devices: "backend" "cpu" (or absent) or "cuda"; a CUDA job's
 * "gpu_count" and "gpus" ([] any free ones). Jobs written before several GPUs
 * have "gpu", one GPU's number or -1 for any (and kept it, -1, on the CPU).
 * Not checked against this machine: the scheduler does that when it starts
 * the job. */
static int read_resolved_devices(const cJSON *j, jobcfg *c, api_error *e)
{
    const cJSON *be = opt_field(j, "backend");
    const cJSON *count = opt_field(j, "gpu_count"), *list = opt_field(j, "gpus");
    const cJSON *one = opt_field(j, "gpu");
    jobcfg_devices *d = &c->devices;
    memset(d, 0, sizeof *d);
    const cJSON *replicas = opt_field(j, "replicas");
    if (be && (!cJSON_IsString(be) || backend_kind_parse(be->valuestring, &d->kind) != 0))
        return api_fail(e, 400, "invalid_field", "backend must be \"cpu\" or \"cuda\"");
    if (d->kind == BACKEND_CPU) {
        if (count || list)
            return api_fail(e, 400, "invalid_field", "a CPU job takes no gpus or gpu_count");
        d->count = 1;
        if (replicas && (!is_integer(replicas) || replicas->valuedouble < 1 ||
                         replicas->valuedouble > KILN_MAX_DEVICES ||
                         replicas->valuedouble > c->batch_size))
            return api_fail(e, 400, "invalid_field", "replicas must be an integer from 1 to %d, "
                            "and at most batch_size", KILN_MAX_DEVICES);
        if (replicas)
            d->count = (int)replicas->valuedouble;
        return 0;
    }
    if (replicas)
        return api_fail(e, 400, "invalid_field", "replicas is for CPU jobs; a GPU job names "
                        "gpus or gpu_count");
    if (!count) {                                  /* written before multi-GPU jobs */
        d->count = 1;
        d->listed = one && gpu_number(one);
        d->ids[0] = d->listed ? (int)one->valuedouble : 0;
        return 0;
    }
    if (!is_integer(count) || count->valuedouble < 1 || count->valuedouble > KILN_MAX_DEVICES)
        return api_fail(e, 400, "invalid_field", "gpu_count must be an integer from 1 to %d",
                        KILN_MAX_DEVICES);
    if (list && !cJSON_IsArray(list))
        return api_fail(e, 400, "invalid_field", "gpus must be a list of GPU numbers");
    if (list && read_gpu_list(list, "gpus", d, e) != 0)
        return -1;
    if (d->listed && d->count != (int)count->valuedouble)
        return api_fail(e, 400, "invalid_field", "gpus lists %d GPUs but gpu_count is %.0f",
                        d->count, count->valuedouble);
    d->count = (int)count->valuedouble;
    if (d->count > c->batch_size)
        return api_fail(e, 400, "invalid_field", "batch_size %d is smaller than the %d GPUs: each "
                        "GPU needs at least one image of every batch", c->batch_size, d->count);
    return 0;
}

/* job.json's dataset: its folder, the input shape and the class names. */
static int read_resolved_data(const cJSON *j, jobcfg *c, api_error *e)
{
    const cJSON *id = opt_field(j, "id"), *dir = opt_field(j, "dataset_dir");
    const cJSON *nn = opt_field(j, "network_name"), *in = opt_field(j, "input");
    const cJSON *classes = opt_field(j, "classes");
    if (!id || !is_integer(id) || id->valuedouble < 0 || id->valuedouble > JOBCFG_ID_MAX)
        return api_fail(e, 400, "invalid_field", "id must be an integer from 0 to %.0f",
                        JOBCFG_ID_MAX);
    c->id = (int64_t)id->valuedouble;
    if (!dir || !cJSON_IsString(dir) || !dir->valuestring[0] ||
        strlen(dir->valuestring) >= sizeof c->dataset_dir)
        return api_fail(e, 400, "invalid_field", "dataset_dir must be the dataset's folder");
    snprintf(c->network_name, sizeof c->network_name, "%s",
             nn && cJSON_IsString(nn) ? nn->valuestring : "custom");
    int shape[3], k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, in) {
        if (k == 3 || !is_integer(x) || x->valuedouble < 1 || x->valuedouble > 1 << 20)
            break;
        shape[k++] = (int)x->valuedouble;
    }
    if (!in || !cJSON_IsArray(in) || k != 3 || cJSON_GetArraySize(in) != 3)
        return api_fail(e, 400, "invalid_field", "input must be [C, H, W], three positive integers");
    int n = classes && cJSON_IsArray(classes) ? cJSON_GetArraySize(classes) : 0;
    if (n < 1)
        return api_fail(e, 400, "invalid_field", "classes must list the dataset's class names");
    const char **names = calloc((size_t)n, sizeof *names);
    if (!names)
        return api_fail(e, 500, "internal", "out of memory");
    k = 0;
    cJSON_ArrayForEach(x, classes) {
        if (!cJSON_IsString(x)) {
            free(names);
            return api_fail(e, 400, "invalid_field", "classes must list names (strings)");
        }
        names[k++] = x->valuestring;
    }
    int rc = jobcfg_set_data(c, dir->valuestring, (net_shape){ shape[0], shape[1], shape[2] },
                             names, n, e);
    free(names);
    return rc;
}

int jobcfg_set_data(jobcfg *c, const char *dataset_dir, net_shape input, const char *const *classes,
                    int nclasses, api_error *e)
{
    if (snprintf(c->dataset_dir, sizeof c->dataset_dir, "%s", dataset_dir) >=
        (int)sizeof c->dataset_dir)
        return api_fail(e, 400, "invalid_field", "dataset_dir is too long");
    ds_augment aug = jobcfg_ds_augment(c);
    char why[256];
    if (ds_augment_check(&aug, input.h, input.w, why, sizeof why) != 0)
        return api_fail(e, 400, "invalid_field", "%s", why);
    c->input = input;
    if (!(c->classes = calloc((size_t)nclasses, sizeof *c->classes)))
        return api_fail(e, 500, "internal", "out of memory");
    for (c->nclasses = 0; c->nclasses < nclasses; c->nclasses++)
        if (!(c->classes[c->nclasses] = strdup(classes[c->nclasses])))
            return api_fail(e, 500, "internal", "out of memory");
    return 0;
}

static int read_dataset_id(const cJSON *body, jobcfg_form form, jobcfg *c, api_error *e)
{
    const cJSON *ds = opt_field(body, "dataset_id");
    if (form == JOBCFG_LOCAL_REQUEST && ds)
        return api_fail(e, 400, "invalid_field", "dataset_id is not used with a dataset folder");
    if (form == JOBCFG_REQUEST && !ds)
        return api_fail(e, 400, "missing_field", "dataset_id is required (the id of a ready "
                        "dataset)");
    if (!ds)
        return 0;
    double lo = form == JOBCFG_RESOLVED ? 0 : 1;     /* kiln train's job.json has 0 */
    if (!is_integer(ds) || ds->valuedouble < lo || ds->valuedouble > JOBCFG_ID_MAX)
        return api_fail(e, 400, "invalid_field", "dataset_id must be an integer from %.0f to %.0f",
                        lo, JOBCFG_ID_MAX);
    c->dataset_id = (int64_t)ds->valuedouble;
    return 0;
}

/* ---- ranks: several worker processes -------------------------------------------- */

bool jobcfg_multi_process(const jobcfg *c)
{
    return c->nodes > 1 || c->tasks_per_node > 1;
}

int jobcfg_ranks(const jobcfg *c)
{
    return c->nodes * (c->devices.kind == BACKEND_CPU ? c->tasks_per_node : c->devices.count);
}

/* nodes and tasks_per_node against the devices and the batch (every form),
 * and (requests) against what this service's dispatcher can run. */
static int check_ranks(const jobcfg *c, jobcfg_form form, api_error *e)
{
    if (c->devices.kind == BACKEND_CUDA && c->tasks_per_node != 1)
        return api_fail(e, 400, "invalid_field", "tasks_per_node is for CPU jobs: a GPU job runs "
                        "one rank per GPU on each node (devices)");
    if (c->devices.kind == BACKEND_CPU && c->devices.count > 1 && jobcfg_multi_process(c))
        return api_fail(e, 400, "invalid_field", "replicas (in one process) and several ranks "
                        "(nodes, tasks_per_node) do not go together");
    if (jobcfg_ranks(c) > c->batch_size)
        return api_fail(e, 400, "invalid_field", "batch_size %d is smaller than the job's %d ranks "
                        "(nodes x %s): each needs at least one image of every batch",
                        c->batch_size, jobcfg_ranks(c),
                        c->devices.kind == BACKEND_CPU ? "tasks_per_node" : "GPUs");
    if (form != JOBCFG_RESOLVED && jobcfg_multi_process(c) && !on_cluster)
        return api_fail(e, 400, "invalid_field", "this job asks for %d ranks (nodes %d, "
                        "tasks_per_node %d) but this kiln runs jobs as one local process each: "
                        "several nodes or tasks need kiln serve --dispatcher slurm",
                        jobcfg_ranks(c), c->nodes, c->tasks_per_node);
    return 0;
}

/* ---- the whole object ------------------------------------------------------------ */

static int read_all(const cJSON *j, jobcfg_form form, jobcfg *c, api_error *e)
{
    if (!cJSON_IsObject(j))
        return api_fail(e, 400, "invalid_request", "the request body must be a JSON object");
    bool resolved = form == JOBCFG_RESOLVED;
    if (check_fields(j, "", resolved ? resolved_fields : request_fields, "a job", e) != 0 ||
        read_dataset_id(j, form, c, e) != 0 || read_network(j, form, c, e) != 0)
        return -1;

    const cJSON *solver = opt_field(j, "solver");
    static const cJSON empty = { .type = cJSON_Object };
    if (!solver)
        solver = &empty;
    if (!cJSON_IsObject(solver))
        return api_fail(e, 400, "invalid_field", "solver must be an object: {\"type\": \"sgd\", "
                        "\"lr\": 0.01, \"momentum\": 0.9, \"weight_decay\": 0}");
    if (check_fields(solver, "solver", solver_fields, "solver", e) != 0)
        return -1;
    const cJSON *larc = opt_field(solver, "larc");
    if (larc && !cJSON_IsObject(larc))
        return api_fail(e, 400, "invalid_field", "solver.larc must be an object: {\"policy\": "
                        "\"clip\" or \"scale\", \"eta\": 0.001}");
    static const char *const none[] = { NULL };
    if (larc && check_fields(larc, "solver.larc", none, "solver.larc", e) != 0)
        return -1;
    const cJSON *aug = opt_field(j, "augmentation");
    if (aug && !cJSON_IsObject(aug))
        return api_fail(e, 400, "invalid_field", "augmentation must be an object: {\"crop\": 28, "
                        "\"pad\": 0, \"mirror\": true}");
    if (aug && check_fields(aug, "augmentation", none, "augmentation", e) != 0)
        return -1;
    const cJSON *early = opt_field(j, "early_stopping");
    if (early && !cJSON_IsObject(early))
        return api_fail(e, 400, "invalid_field", "early_stopping must be an object: {\"metric\": "
                        "\"val/loss\", \"patience\": 5, \"min_delta\": 0}, or null for none");
    if (early && check_fields(early, "early_stopping", none, "early_stopping", e) != 0)
        return -1;
    c->early_stop.enabled = early != NULL;
    rule_objects objs = { .body = j, .solver = solver, .larc = larc, .augmentation = aug,
                          .early_stopping = early };
    if (solver_kind(solver, &c->solver.type, e) != 0 ||
        check_solver_fields(solver, c->solver.type, e) != 0 ||
        read_rules(&objs, c, e) != 0 || read_name(j, c, e) != 0)
        return -1;
    if (c->solver.nesterov && c->solver.momentum <= 0)
        return api_fail(e, 400, "invalid_field", "solver.nesterov needs a momentum above 0");
    if (read_lr_policy(j, c, e) != 0 || resolve_loss_scaling(j, c, e) != 0)
        return -1;
    if (resolved)
        return read_resolved_data(j, c, e) != 0 || read_resolved_devices(j, c, e) != 0 ||
               check_ranks(c, form, e) != 0 ? -1 : 0;
    if (opt_field(j, "network") && cJSON_IsString(opt_field(j, "network")))
        snprintf(c->network_name, sizeof c->network_name, "%s",
                 opt_field(j, "network")->valuestring);
    return read_devices(j, c, e) != 0 || check_ranks(c, form, e) != 0 ? -1 : 0;
}

int jobcfg_from_json(const cJSON *j, jobcfg_form form, jobcfg *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    memset(e, 0, sizeof *e);
    if (read_all(j, form, out, e) == 0)
        return 0;
    jobcfg_free(out);
    return -1;
}

int jobcfg_load(const char *dir, jobcfg *out, api_error *e)
{
    char path[PATH_MAX], err[512];
    size_t len = 0;
    memset(out, 0, sizeof *out);
    if (layout_file(path, sizeof path, dir, LAYOUT_JOB_JSON) != 0)
        return api_fail(e, 500, "internal", "the path of %s's job.json is too long", dir);
    char *text = fio_read_file(path, JOBCFG_JSON_MAX, &len, err, sizeof err);
    if (!text)
        return api_fail(e, 500, "unreadable", "%s", err);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = jobcfg_from_json(j, JOBCFG_RESOLVED, out, e);
    cJSON_Delete(j);
    if (rc != 0) {
        char msg[sizeof e->message];
        snprintf(msg, sizeof msg, "%s", e->message);
        snprintf(e->message, sizeof e->message, "%.200s: %.300s", path, msg);
    }
    return rc;
}

void jobcfg_free(jobcfg *c)
{
    if (!c)
        return;
    cJSON_Delete(c->network);
    cJSON_Delete(c->lr_policy);
    for (int i = 0; i < c->nclasses; i++)
        free(c->classes[i]);
    free(c->classes);
    c->network = c->lr_policy = NULL;
    c->classes = NULL;
    c->nclasses = 0;
}

/* ---- writing ---------------------------------------------------------------------- */

/* The value of rule r in c as JSON. */
static cJSON *rule_json(const rule *r, const jobcfg *c)
{
    double v = load_rule(r, c);
    switch (r->kind) {
    case R_INT: case R_NUM:
        return cJSON_CreateNumber(v);
    case R_BOOL:
        return cJSON_CreateBool(v != 0);
    case R_CHOICE: {
        const char *const *names = r->names();
        for (int i = 0; names[i]; i++)
            if (choice_value(r, i) == (int)v)
                return cJSON_CreateString(names[i]);
        return NULL;
    }
    }
    return NULL;
}

static bool add(cJSON *o, const char *key, cJSON *v)
{
    if (v && cJSON_AddItemToObject(o, key, v))
        return true;
    cJSON_Delete(v);
    return false;
}

static bool add_devices(cJSON *o, const jobcfg *c)
{
    const jobcfg_devices *d = &c->devices;
    if (!add(o, "backend", cJSON_CreateString(backend_kind_name(d->kind))))
        return false;
    if (d->kind == BACKEND_CPU)
        return d->count <= 1 || add(o, "replicas", cJSON_CreateNumber(d->count));
    return add(o, "gpus", cJSON_CreateIntArray(d->ids, d->listed ? d->count : 0)) &&
           add(o, "gpu_count", cJSON_CreateNumber(d->count));
}

cJSON *jobcfg_to_json(const jobcfg *c)
{
    cJSON *o = cJSON_CreateObject(), *solver = cJSON_CreateObject(), *larc = NULL;
    cJSON *aug = cJSON_CreateObject(), *early = NULL;
    bool ok = o && solver && aug;
    int shape[3] = { c->input.c, c->input.h, c->input.w };
    ok = ok && add(o, "id", cJSON_CreateNumber((double)c->id)) &&
         add(o, "dataset_id", cJSON_CreateNumber((double)c->dataset_id)) &&
         add(o, "dataset_dir", cJSON_CreateString(c->dataset_dir)) &&
         add(o, "network_name", cJSON_CreateString(c->network_name)) &&
         add(o, "network", cJSON_Duplicate(c->network, 1)) &&
         add(o, "input", cJSON_CreateIntArray(shape, 3)) &&
         add(o, "classes", cJSON_CreateStringArray((const char *const *)c->classes, c->nclasses));
    for (size_t i = 0; ok && i < NRULES; i++) {
        const rule *r = &rules[i];
        if (r->solvers && !(r->solvers & (1u << c->solver.type)))
            continue;
        if (!strcmp(r->obj, "solver.larc")) {
            if (c->solver.larc == LARC_NONE)
                continue;
            if (!larc && !(larc = cJSON_AddObjectToObject(solver, "larc")))
                ok = false;
        }
        if (!strcmp(r->obj, "early_stopping")) {
            if (!c->early_stop.enabled)
                continue;
            if (!early && !(early = cJSON_CreateObject()))
                ok = false;
        }
        cJSON *into = !strcmp(r->obj, "") ? o : !strcmp(r->obj, "solver") ? solver :
                      !strcmp(r->obj, "augmentation") ? aug :
                      !strcmp(r->obj, "early_stopping") ? early : larc;
        if (!strcmp(r->key, "keep_checkpoints") && c->keep_checkpoints == 0)
            ok = ok && add(into, r->key, cJSON_CreateNull());      /* every snapshot */
        else
            ok = ok && add(into, r->key, rule_json(r, c));
        if (ok && !strcmp(r->key, "loss_scaling"))
            ok = add_devices(o, c);                /* where job.json has always had them */
    }
    if (ok && add(o, "solver", solver))
        solver = NULL;
    else
        ok = false;
    if (ok && add(o, "augmentation", aug))
        aug = NULL;
    else
        ok = false;
    if (ok && early) {
        ok = add(o, "early_stopping", early);      /* add frees it when it fails */
        early = NULL;
    }
    ok = ok && (!c->lr_policy || add(o, "lr_policy", cJSON_Duplicate(c->lr_policy, 1))) &&
         (!c->name[0] || add(o, "name", cJSON_CreateString(c->name)));
    cJSON_Delete(solver);
    cJSON_Delete(aug);
    cJSON_Delete(early);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int64_t jobcfg_steps(const jobcfg *c, int64_t train_count)
{
    size_t n = train_count > 0 ? (size_t)train_count : 0;
    return (int64_t)loader_batch_count(n, c->batch_size, true) * c->epochs;
}

net_shape jobcfg_net_input(const jobcfg *c)
{
    net_shape in = c->input;
    if (c->augment.crop > 0)
        in.h = in.w = c->augment.crop;
    return in;
}

ds_augment jobcfg_ds_augment(const jobcfg *c)
{
    return (ds_augment){ .crop_h = c->augment.crop, .crop_w = c->augment.crop,
                         .pad = c->augment.pad, .mirror = c->augment.mirror };
}

net_solver jobcfg_net_solver(const jobcfg *c)
{
    const jobcfg_solver *s = &c->solver;
    return (net_solver){
        .type = s->type, .lr = (float)s->lr, .momentum = (float)s->momentum,
        .weight_decay = (float)s->weight_decay, .nesterov = s->nesterov,
        .decay_bias = s->decay_bias, .beta1 = (float)s->beta1, .beta2 = (float)s->beta2,
        .eps = (float)s->eps, .clip_norm = (float)s->clip_norm, .larc = s->larc,
        .larc_eta = (float)s->larc_eta, .label_smoothing = (float)s->label_smoothing,
        .precision = c->precision, .loss_scaling = c->dynamic_scaling ? 1 : -1,
    };
}

net_devices jobcfg_net_devices(const jobcfg *c)
{
    if (c->devices.count < 1)
        return net_devices_cpu();
    net_devices d = { .kind = c->devices.kind, .count = c->devices.count };
    for (int k = 0; k < d.count; k++)
        d.ids[k] = c->devices.listed ? c->devices.ids[k] : k;
    return d;
}

/* ---- the schema ------------------------------------------------------------------- */

static cJSON *rule_schema(const rule *r)
{
    static const char *const types[] = { [R_INT] = "integer", [R_NUM] = "number",
                                         [R_BOOL] = "boolean", [R_CHOICE] = "string" };
    cJSON *f = cJSON_CreateObject();
    bool ok = f && cJSON_AddStringToObject(f, "type", types[r->kind]);
    if (ok && (r->kind == R_INT || r->kind == R_NUM))
        ok = (r->def < 0 ? cJSON_AddNullToObject(f, "default") != NULL
                         : cJSON_AddNumberToObject(f, "default", r->def) != NULL) &&
             cJSON_AddNumberToObject(f, r->lo_open ? "exclusiveMinimum" : "minimum", r->lo) &&
             cJSON_AddNumberToObject(f, r->hi_open ? "exclusiveMaximum" : "maximum", r->hi);
    if (ok && r->kind == R_BOOL)
        ok = cJSON_AddBoolToObject(f, "default", r->def != 0);
    if (ok && r->kind == R_CHOICE) {
        const char *const *names = r->names();
        int n = 0;
        while (names[n])
            n++;
        ok = add(f, "enum", cJSON_CreateStringArray(names, n)) &&
             (r->def < 0 ? cJSON_AddNullToObject(f, "default") != NULL
                         : cJSON_AddStringToObject(f, "default", names[(int)r->def]) != NULL);
    }
    if (ok && r->solvers) {
        cJSON *s = cJSON_AddArrayToObject(f, "solvers");
        for (int t = 0; ok && t < SOLVER_COUNT; t++)
            if (r->solvers & (1u << t))
                ok = s && add(s, "", cJSON_CreateString(solver_type_name((solver_type)t)));
        ok = ok && s;
    }
    if (ok && r->doc)
        ok = cJSON_AddStringToObject(f, "description", r->doc) != NULL;
    if (!ok) {
        cJSON_Delete(f);
        return NULL;
    }
    return f;
}

cJSON *jobcfg_schema(void)
{
    cJSON *fields = cJSON_CreateObject();
    bool ok = fields != NULL;
    for (size_t i = 0; ok && i < NRULES; i++) {
        char path[64];
        snprintf(path, sizeof path, "%s%s%s", rules[i].obj, rules[i].obj[0] ? "." : "",
                 rules[i].key);
        ok = add(fields, path, rule_schema(&rules[i]));
    }
    cJSON *name = ok ? cJSON_AddObjectToObject(fields, "name") : NULL;
    ok = name && cJSON_AddStringToObject(name, "type", "string") &&
         cJSON_AddNumberToObject(name, "maxLength", JOBCFG_NAME_MAX);
    cJSON *lr = ok ? lr_schema() : NULL;
    for (cJSON *f = lr ? lr->child : NULL, *next; f; f = next) {
        next = f->next;
        cJSON_AddItemToObject(fields, f->string, cJSON_DetachItemViaPointer(lr, f));
    }
    ok = ok && lr;
    cJSON_Delete(lr);
    cJSON *devices = ok ? cJSON_AddObjectToObject(fields, "devices") : NULL;
    ok = devices && cJSON_AddNumberToObject(devices, "maximum", KILN_MAX_DEVICES) &&
         cJSON_AddStringToObject(devices, "description", "0 or []: the CPU; N: any N GPUs; "
                                 "[i, j]: those GPUs; absent: a GPU when the machine has one");
    if (!ok) {
        cJSON_Delete(fields);
        return NULL;
    }
    return fields;
}
