/* jobs/sweep.c: hyper-parameter sweeps, the pure part (contract in sweep.h). */
#include "jobs/sweep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/jobcfg.h"   /* jobcfg_from_json: the trial requests' rules */
#include "jobs/jobreq.h"   /* jobreq_set */

/* The metrics a sweep may rank by: the tags recorded once an epoch or more. */
static const char *const metric_tags[] = {
    "val/accuracy", "val/loss", "train/epoch_accuracy", "train/epoch_loss", "train/accuracy",
    "train/loss", NULL,
};

static const char *const method_names[] = { "grid", "random", "asha" };
static const char *const dist_names[] = { "values", "uniform", "log_uniform", "int_uniform" };
static const char *const tstate_names[] = { "running", "waiting", "done", "stopped", "failed",
                                            "cancelled" };

/* The request's top-level fields. */
static const char *const fields[] = {
    "name", "base", "space", "method", "trials", "parallel", "metric", "mode", "seed",
    "min_epochs", "max_epochs", "eta", NULL,
};

const char *sweep_method_name(sweep_method m) { return method_names[m]; }
const char *sweep_tstate_name(sweep_tstate t) { return tstate_names[t]; }

int sweep_tstate_parse(const char *name, sweep_tstate *out)
{
    for (int i = 0; i < (int)(sizeof tstate_names / sizeof *tstate_names); i++)
        if (!strcmp(name, tstate_names[i])) {
            *out = (sweep_tstate)i;
            return 0;
        }
    return -1;
}

void sweep_spec_free(sweep_spec *s)
{
    if (!s)
        return;
    cJSON_Delete(s->base);
    for (int i = 0; i < s->nparams; i++)
        cJSON_Delete(s->params[i].values);
    memset(s, 0, sizeof *s);
}

/* ---- parsing ---------------------------------------------------------------- */

static bool is_int(const cJSON *x, double lo, double hi)
{
    return cJSON_IsNumber(x) && x->valuedouble == floor(x->valuedouble) && x->valuedouble >= lo &&
           x->valuedouble <= hi;
}

/* An integer field: absent leaves *out; else [lo, hi]. */
static int opt_int(const cJSON *body, const char *key, int lo, int hi, int *out, bool *given, api_error *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(body, key);
    if (given)
        *given = x != NULL;
    if (!x)
        return 0;
    if (!is_int(x, lo, hi))
        return api_fail(e, 400, "invalid_field", "%s must be an integer from %d to %d", key, lo, hi);
    *out = (int)x->valuedouble;
    return 0;
}

/* A path: parts of [a-z0-9_] joined by dots, none empty. */
static bool path_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > SWEEP_PATH_MAX || p[0] == '.' || p[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        if (!ok || (c == '.' && p[i + 1] == '.'))
            return false;
    }
    return true;
}

/* One space entry: exactly one key of dist_names. */
static int parse_param(const cJSON *entry, sweep_method method, sweep_param *p, api_error *e)
{
    const char *path = entry->string;
    if (!path_ok(path))
        return api_fail(e, 400, "invalid_field", "space.%.96s: a parameter is a job field's path, "
                        "like \"solver.lr\" (lower-case names joined by dots)", path);
    snprintf(p->path, sizeof p->path, "%s", path);
    if (!cJSON_IsObject(entry) || cJSON_GetArraySize(entry) != 1)
        return api_fail(e, 400, "invalid_field", "space.%s must be one of {\"values\": [...]}, "
                        "{\"uniform\": [lo, hi]}, {\"log_uniform\": [lo, hi]}, {\"int_uniform\": [lo, hi]}",
                        path);
    const cJSON *d = entry->child;
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(d->string, dist_names[i]))
            k = i;
    if (k < 0)
        return api_fail(e, 400, "unknown_field", "space.%s.%.32s: a parameter takes values, uniform, "
                        "log_uniform or int_uniform", path, d->string);
    p->dist = (sweep_dist)k;
    if (p->dist == DIST_VALUES) {
        int n = cJSON_GetArraySize(d);
        if (!cJSON_IsArray(d) || n < 1 || n > SWEEP_MAX_VALUES)
            return api_fail(e, 400, "invalid_field", "space.%s.values must be a list of 1 to %d values",
                            path, SWEEP_MAX_VALUES);
        if (!(p->values = cJSON_Duplicate(d, 1)))
            return api_fail(e, 500, "internal", "out of memory");
        return 0;
    }
    if (method == SWEEP_GRID)
        return api_fail(e, 400, "invalid_field", "space.%s: a grid takes only value lists "
                        "({\"values\": [...]}), not a %s range; use method random or asha for ranges",
                        path, dist_names[k]);
    const cJSON *lo = cJSON_GetArrayItem(d, 0), *hi = cJSON_GetArrayItem(d, 1);
    if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) != 2 || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) ||
        !isfinite(lo->valuedouble) || !isfinite(hi->valuedouble) || lo->valuedouble > hi->valuedouble)
        return api_fail(e, 400, "invalid_field", "space.%s.%s must be [lo, hi], two numbers with lo <= hi",
                        path, dist_names[k]);
    p->lo = lo->valuedouble;
    p->hi = hi->valuedouble;
    if (p->dist == DIST_LOG_UNIFORM && p->lo <= 0)
        return api_fail(e, 400, "invalid_field", "space.%s.log_uniform: lo must be above 0", path);
    if (p->dist == DIST_INT_UNIFORM && (p->lo != floor(p->lo) || p->hi != floor(p->hi) ||
                                        fabs(p->lo) > 1e9 || fabs(p->hi) > 1e9))
        return api_fail(e, 400, "invalid_field", "space.%s.int_uniform: lo and hi must be integers", path);
    return 0;
}

static int parse_space(const cJSON *space, sweep_spec *s, api_error *e)
{
    if (!cJSON_IsObject(space) || !space->child)
        return api_fail(e, 400, "invalid_field", "space must be an object of one or more parameters, "
                        "like {\"solver.lr\": {\"log_uniform\": [0.0001, 0.1]}}");
    const cJSON *p;
    cJSON_ArrayForEach(p, space) {
        if (s->nparams == SWEEP_MAX_PARAMS)
            return api_fail(e, 400, "invalid_field", "space has more than %d parameters", SWEEP_MAX_PARAMS);
        for (int i = 0; i < s->nparams; i++)
            if (!strcmp(s->params[i].path, p->string))
                return api_fail(e, 400, "invalid_field", "space.%.96s is given twice", p->string);
        if (parse_param(p, s->method, &s->params[s->nparams], e) != 0) {
            cJSON_Delete(s->params[s->nparams].values);
            return -1;
        }
        s->nparams++;
        if (s->method == SWEEP_ASHA && !strcmp(p->string, "epochs"))
            return api_fail(e, 400, "invalid_field", "space.epochs: asha sets each trial's epochs "
                            "(its rungs from min_epochs to max_epochs); remove epochs from the space");
    }
    return 0;
}

static int parse_method(const cJSON *body, sweep_spec *s, api_error *e)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "method");
    if (!m)
        return api_fail(e, 400, "missing_field", "method is required: grid, random or asha");
    for (int i = 0; i < 3; i++)
        if (cJSON_IsString(m) && !strcmp(m->valuestring, method_names[i])) {
            s->method = (sweep_method)i;
            return 0;
        }
    return api_fail(e, 400, "invalid_field", "method must be grid, random or asha");
}

static int parse_metric(const cJSON *body, sweep_spec *s, api_error *e)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "metric");
    const char *tag = "val/accuracy";
    if (m) {
        bool known = false;
        for (const char *const *t = metric_tags; cJSON_IsString(m) && *t; t++)
            known = known || !strcmp(*t, m->valuestring);
        if (!known)
            return api_fail(e, 400, "invalid_field", "metric must be one of val/accuracy, val/loss, "
                            "train/epoch_accuracy, train/epoch_loss, train/accuracy, train/loss");
        tag = m->valuestring;
    }
    snprintf(s->metric, sizeof s->metric, "%s", tag);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(body, "mode");
    s->maximize = strstr(tag, "loss") == NULL;     /* the "best" rule: min for losses */
    if (mode) {
        if (!cJSON_IsString(mode) || (strcmp(mode->valuestring, "max") && strcmp(mode->valuestring, "min")))
            return api_fail(e, 400, "invalid_field", "mode must be \"max\" or \"min\"");
        s->maximize = !strcmp(mode->valuestring, "max");
    }
    return 0;
}

/* Grid: the product of the lists, at most SWEEP_MAX_TRIALS. */
static int grid_size(sweep_spec *s, api_error *e)
{
    double n = 1;
    for (int i = 0; i < s->nparams; i++)
        n *= cJSON_GetArraySize(s->params[i].values);
    if (n > SWEEP_MAX_TRIALS)
        return api_fail(e, 400, "invalid_field", "space: the grid has %.0f points, more than %d; "
                        "use fewer values or method random", n, SWEEP_MAX_TRIALS);
    s->trials = (int)n;
    return 0;
}

/* asha: the rungs as Determined makes them, from the top down: max_epochs,
 * then max_epochs / eta^k rounded while at least min_epochs (1/3/9 for 9
 * epochs and eta 3; 1/3/10 for 10). */
static int asha_rungs(const cJSON *body, sweep_spec *s, api_error *e)
{
    bool have_min, have_max;
    s->min_epochs = 1;
    s->eta = SWEEP_DEFAULT_ETA;
    if (opt_int(body, "min_epochs", 1, 10000, &s->min_epochs, &have_min, e) ||
        opt_int(body, "max_epochs", 1, 10000, &s->max_epochs, &have_max, e) ||
        opt_int(body, "eta", 2, 100, &s->eta, NULL, e))
        return -1;
    if (!have_max)
        return api_fail(e, 400, "missing_field", "max_epochs is required with method asha");
    if (s->max_epochs < s->min_epochs)
        return api_fail(e, 400, "invalid_field", "max_epochs (%d) must be at least min_epochs (%d)",
                        s->max_epochs, s->min_epochs);
    int down[SWEEP_MAX_RUNGS], n = 0;
    down[n++] = s->max_epochs;
    for (double r = s->max_epochs / (double)s->eta; lround(r) >= s->min_epochs; r /= s->eta) {
        if (lround(r) == down[n - 1])
            continue;
        if (n == SWEEP_MAX_RUNGS)
            return api_fail(e, 400, "invalid_field", "asha: more than %d rungs; raise min_epochs or eta",
                            SWEEP_MAX_RUNGS);
        down[n++] = (int)lround(r);
    }
    s->nrungs = n;
    for (int i = 0; i < n; i++)
        s->rungs[i] = down[n - 1 - i];
    return 0;
}

/* Fields that belong to one method only. */
static int method_fields(const cJSON *body, sweep_spec *s, api_error *e)
{
    static const char *const asha_only[] = { "min_epochs", "max_epochs", "eta", NULL };
    for (const char *const *f = asha_only; s->method != SWEEP_ASHA && *f; f++)
        if (cJSON_GetObjectItemCaseSensitive(body, *f))
            return api_fail(e, 400, "invalid_field", "%s goes with method asha only", *f);
    const cJSON *trials = cJSON_GetObjectItemCaseSensitive(body, "trials");
    if (s->method == SWEEP_GRID) {
        if (trials)
            return api_fail(e, 400, "invalid_field", "trials: a grid runs every point of its space; "
                            "leave trials out");
        if (cJSON_GetObjectItemCaseSensitive(body, "seed"))
            return api_fail(e, 400, "invalid_field", "seed: a grid samples nothing; leave seed out");
        return grid_size(s, e);
    }
    if (!trials)
        return api_fail(e, 400, "missing_field", "trials is required with method %s: how many "
                        "configurations to sample", method_names[s->method]);
    if (opt_int(body, "trials", 1, SWEEP_MAX_TRIALS, &s->trials, NULL, e) != 0)
        return -1;
    int seed = 1;
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(body, "seed");
    if (sd && !is_int(sd, 0, 4294967295.0))
        return api_fail(e, 400, "invalid_field", "seed must be an integer from 0 to 4294967295");
    s->seed = sd ? (uint64_t)sd->valuedouble : (uint64_t)seed;
    return s->method == SWEEP_ASHA ? asha_rungs(body, s, e) : 0;
}

static int parse_all(const cJSON *body, sweep_spec *s, api_error *e)
{
    if (!cJSON_IsObject(body))
        return api_fail(e, 400, "invalid_json", "a sweep request is a JSON object");
    const cJSON *f;
    cJSON_ArrayForEach(f, body) {
        bool known = false;
        for (const char *const *k = fields; *k; k++)
            known = known || !strcmp(*k, f->string);
        if (!known)
            return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\": a sweep takes name, base, "
                            "space, method, trials, parallel, metric, mode, seed, min_epochs, max_epochs, "
                            "eta", f->string);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(body, "name");
    if (name && (!cJSON_IsString(name) || strlen(name->valuestring) > SWEEP_NAME_MAX))
        return api_fail(e, 400, "invalid_field", "name must be a string of at most %d bytes", SWEEP_NAME_MAX);
    if (name)
        snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(body, "base");
    if (!base)
        return api_fail(e, 400, "missing_field", "base is required: a job request as POST /api/v1/jobs "
                        "takes it");
    if (!cJSON_IsObject(base))
        return api_fail(e, 400, "invalid_field", "base must be a job request object");
    if (!(s->base = cJSON_Duplicate(base, 1)))
        return api_fail(e, 500, "internal", "out of memory");
    s->parallel = SWEEP_DEFAULT_PARALLEL;
    if (parse_method(body, s, e) || parse_space(cJSON_GetObjectItemCaseSensitive(body, "space"), s, e) ||
        parse_metric(body, s, e) ||
        opt_int(body, "parallel", 1, SWEEP_MAX_PARALLEL, &s->parallel, NULL, e) ||
        method_fields(body, s, e))
        return -1;
    return 0;
}

int sweep_spec_parse(const cJSON *body, sweep_spec *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    if (parse_all(body, out, e) != 0) {
        sweep_spec_free(out);
        return -1;
    }
    return 0;
}

cJSON *sweep_spec_to_json(const sweep_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *space = o ? cJSON_AddObjectToObject(o, "space") : NULL;
    bool ok = space && (!s->name[0] || cJSON_AddStringToObject(o, "name", s->name)) &&
              cJSON_AddItemToObject(o, "base", cJSON_Duplicate(s->base, 1)) &&
              cJSON_AddStringToObject(o, "method", method_names[s->method]) &&
              cJSON_AddNumberToObject(o, "parallel", s->parallel) &&
              cJSON_AddStringToObject(o, "metric", s->metric) &&
              cJSON_AddStringToObject(o, "mode", s->maximize ? "max" : "min");
    for (int i = 0; ok && i < s->nparams; i++) {
        const sweep_param *p = &s->params[i];
        cJSON *entry = cJSON_AddObjectToObject(space, p->path);
        if (p->dist == DIST_VALUES) {
            ok = entry && cJSON_AddItemToObject(entry, "values", cJSON_Duplicate(p->values, 1));
        } else {
            double r[2] = { p->lo, p->hi };
            ok = entry && cJSON_AddItemToObject(entry, dist_names[p->dist], cJSON_CreateDoubleArray(r, 2));
        }
    }
    if (ok && s->method != SWEEP_GRID)
        ok = cJSON_AddNumberToObject(o, "trials", s->trials) &&
             cJSON_AddNumberToObject(o, "seed", (double)s->seed);
    if (ok && s->method == SWEEP_ASHA)
        ok = cJSON_AddNumberToObject(o, "min_epochs", s->min_epochs) &&
             cJSON_AddNumberToObject(o, "max_epochs", s->max_epochs) &&
             cJSON_AddNumberToObject(o, "eta", s->eta);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- trials' values ------------------------------------------------------------ */

/* splitmix64: a well-mixed 64-bit value for each input. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A uniform number in [0, 1) for (seed, trial, parameter). */
static double unit(uint64_t seed, int trial, int param)
{
    uint64_t h = mix64(mix64(mix64(seed) ^ (uint64_t)trial) ^ ((uint64_t)param << 32));
    return (double)(h >> 11) * 0x1.0p-53;
}

/* Parameter p's value for trial i: u in [0, 1) picks it. */
static cJSON *sample(const sweep_param *p, double u)
{
    switch (p->dist) {
    case DIST_VALUES: {
        int n = cJSON_GetArraySize(p->values);
        int k = (int)(u * n);
        return cJSON_Duplicate(cJSON_GetArrayItem(p->values, k < n ? k : n - 1), 1);
    }
    case DIST_UNIFORM:
        return cJSON_CreateNumber(p->lo + u * (p->hi - p->lo));
    case DIST_LOG_UNIFORM: {
        double v = exp(log(p->lo) + u * (log(p->hi) - log(p->lo)));
        return cJSON_CreateNumber(v < p->lo ? p->lo : v > p->hi ? p->hi : v);
    }
    case DIST_INT_UNIFORM: {
        double v = floor(p->lo + u * (p->hi - p->lo + 1));
        return cJSON_CreateNumber(v > p->hi ? p->hi : v);
    }
    }
    return NULL;
}

/* The grid's size when every parameter is a list (else 0). */
static long finite_points(const sweep_spec *s)
{
    long n = 1;
    for (int k = 0; k < s->nparams; k++) {
        if (s->params[k].dist != DIST_VALUES)
            return 0;
        n *= cJSON_GetArraySize(s->params[k].values);
        if (n > SWEEP_MAX_TRIALS)
            return 0;
    }
    return n;
}

/* random and asha over lists alone, with no more trials than points: trial i
 * is point perm[i] of a permutation seeded by the sweep's seed (Fisher-Yates
 * on (seed, j) alone), so no point is tried twice. */
static int permuted_point(const sweep_spec *s, long points, int i)
{
    int perm[SWEEP_MAX_TRIALS];
    for (int j = 0; j < points; j++)
        perm[j] = j;
    for (long j = points - 1; j > 0; j--) {
        long k = (long)(unit(s->seed, (int)j, SWEEP_MAX_PARAMS) * (double)(j + 1));
        int t = perm[j];
        perm[j] = perm[k];
        perm[k] = t;
    }
    return perm[i];
}

cJSON *sweep_trial_values(const sweep_spec *s, int i)
{
    if (i < 0 || i >= s->trials)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    long points = s->method == SWEEP_GRID ? 0 : finite_points(s);
    bool as_grid = s->method == SWEEP_GRID || (points > 0 && s->trials <= points);
    int rest = s->method == SWEEP_GRID || !as_grid ? i : permuted_point(s, points, i);
    cJSON *vals[SWEEP_MAX_PARAMS] = { 0 };
    /* a grid: mixed radix, the last parameter fastest */
    for (int k = s->nparams - 1; o && k >= 0; k--) {
        const sweep_param *p = &s->params[k];
        if (as_grid) {
            int n = cJSON_GetArraySize(p->values);
            vals[k] = cJSON_Duplicate(cJSON_GetArrayItem(p->values, rest % n), 1);
            rest /= n;
        } else {
            vals[k] = sample(p, unit(s->seed, i, k));
        }
    }
    bool ok = o != NULL;
    for (int k = 0; k < s->nparams; k++) {
        if (ok && vals[k] && cJSON_AddItemToObject(o, s->params[k].path, vals[k]))
            continue;
        ok = false;
        cJSON_Delete(vals[k]);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The largest divisor of every rung (so each rung ends on a snapshot). */
static int rung_gcd(const sweep_spec *s)
{
    int g = 0;
    for (int i = 0; i < s->nrungs; i++) {
        int a = s->rungs[i], b = g;
        while (b) {
            int t = a % b;
            a = b;
            b = t;
        }
        g = a;
    }
    return g > 0 ? g : 1;
}

cJSON *sweep_trial_request(const sweep_spec *s, const cJSON *values, int epochs, api_error *e)
{
    cJSON *req = cJSON_Duplicate(s->base, 1);
    if (!req) {
        api_fail(e, 500, "internal", "out of memory");
        return NULL;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, values) {
        if (jobreq_set(req, v->string, v, e) != 0)
            goto fail;
    }
    if (epochs > 0) {
        cJSON *n = cJSON_CreateNumber(epochs);
        int rc = n ? jobreq_set(req, "epochs", n, e) : api_fail(e, 500, "internal", "out of memory");
        cJSON_Delete(n);
        if (rc != 0)
            goto fail;
    }
    if (s->method == SWEEP_ASHA) {
        const cJSON *si = cJSON_GetObjectItemCaseSensitive(req, "snapshot_interval");
        int g = rung_gcd(s);
        if (!cJSON_IsNumber(si) || si->valuedouble < 1 || g % (int)si->valuedouble != 0) {
            cJSON *n = cJSON_CreateNumber(g);
            int rc = n ? jobreq_set(req, "snapshot_interval", n, e) : api_fail(e, 500, "internal", "oom");
            cJSON_Delete(n);
            if (rc != 0)
                goto fail;
        }
    }
    return req;
fail:
    cJSON_Delete(req);
    return NULL;
}

/* ---- checking the trials' requests ------------------------------------------- */

/* "{"solver.lr":0.1}" into buf, cut to fit. */
static void values_text(const cJSON *values, char *buf, size_t n)
{
    char *t = cJSON_PrintUnformatted(values);
    snprintf(buf, n, "%s", t ? t : "?");
    cJSON_free(t);
}

/* The lr policy's kind in req, when its rate depends on the run's length. */
static const char *length_policy(const cJSON *req)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "lr_policy");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (cJSON_IsString(t) && (!strcmp(t->valuestring, "polynomial") || !strcmp(t->valuestring, "cosine")))
        return t->valuestring;
    return NULL;
}

/* One trial's request against the job rules. */
static int check_values(const sweep_spec *s, const cJSON *values, api_error *e)
{
    char vt[200];
    int epochs = s->method == SWEEP_ASHA ? s->rungs[0] : 0;
    cJSON *req = values ? sweep_trial_request(s, values, epochs, e) : NULL;
    if (!values)
        api_fail(e, 500, "internal", "out of memory");
    int rc = req ? 0 : -1;
    jobcfg c;
    if (rc == 0 && s->method == SWEEP_ASHA && cJSON_GetObjectItemCaseSensitive(req, "early_stopping")) {
        rc = api_fail(e, 400, "invalid_field", "base.early_stopping: asha decides when its trials stop; "
                      "leave early_stopping out of an asha sweep");
    } else if (rc == 0 && s->method == SWEEP_ASHA && length_policy(req)) {
        values_text(values, vt, sizeof vt);
        rc = api_fail(e, 400, "invalid_field", "base.lr_policy.type: a %s policy's rate depends on the "
                      "run's length, which asha changes at each promotion; use fixed, step, multistep "
                      "or exponential (trial values %s)", length_policy(req), vt);
    } else if (rc == 0 && jobcfg_from_json(req, JOBCFG_REQUEST, &c, e) != 0) {
        values_text(values, vt, sizeof vt);
        char msg[sizeof e->message];
        snprintf(msg, sizeof msg, "%s", e->message);
        snprintf(e->message, sizeof e->message, "the trial with %.150s: %.340s", vt, msg);
        rc = -1;
    } else if (rc == 0) {
        jobcfg_free(&c);
    }
    cJSON_Delete(req);
    return rc;
}

/* Trial 0's values with parameter k at its range's end. */
static cJSON *corner(const sweep_spec *s, int k, bool high)
{
    cJSON *v = sweep_trial_values(s, 0);
    const sweep_param *p = &s->params[k];
    cJSON *x = cJSON_CreateNumber(high ? p->hi : p->lo);
    if (!v || !x || !cJSON_ReplaceItemInObjectCaseSensitive(v, p->path, x)) {
        cJSON_Delete(v);
        cJSON_Delete(x);
        return NULL;
    }
    return v;
}

int sweep_check_requests(const sweep_spec *s, api_error *e)
{
    int n = s->method == SWEEP_GRID ? s->trials : s->trials < 100 ? s->trials : 100;
    for (int i = 0; i < n; i++) {
        cJSON *v = sweep_trial_values(s, i);
        int rc = check_values(s, v, e);
        cJSON_Delete(v);
        if (rc != 0)
            return -1;
    }
    for (int k = 0; s->method != SWEEP_GRID && k < s->nparams; k++) {
        if (s->params[k].dist == DIST_VALUES)
            continue;
        for (int high = 0; high < 2; high++) {
            cJSON *v = corner(s, k, high);
            int rc = check_values(s, v, e);
            cJSON_Delete(v);
            if (rc != 0)
                return -1;
        }
    }
    return 0;
}

/* ---- decisions --------------------------------------------------------------- */

bool sweep_better(const sweep_spec *s, double a, double b)
{
    if (isnan(a))
        return false;
    if (isnan(b))
        return true;
    return s->maximize ? a > b : a < b;
}

/* Has trial t a result at rung k (completed it, promoted since or not)? */
static bool completed_rung(const sweep_trial *t, int k)
{
    if (t->state == TRIAL_FAILED || t->state == TRIAL_CANCELLED)
        return t->rung > k;            /* its earlier rungs still count */
    return t->rung > k || (t->rung == k && t->state != TRIAL_RUNNING);
}

/* asha: the best trial waiting at rung k among the top floor(n_k / eta) of
 * rung k's results, or -1. */
static int promotable(const sweep_spec *s, const sweep_trial *t, int n, int k)
{
    int idx[SWEEP_MAX_TRIALS], m = 0;
    for (int i = 0; i < n; i++)
        if (completed_rung(&t[i], k))
            idx[m++] = i;
    int top = m / s->eta;
    /* the top `top` by the metric at rung k (ties: the earlier trial), one
     * pass per place: m is small */
    bool taken[SWEEP_MAX_TRIALS] = { false };
    for (int place = 0; place < top; place++) {
        int best = -1;
        for (int j = 0; j < m; j++)
            if (!taken[j] && (best < 0 || sweep_better(s, t[idx[j]].metrics[k], t[idx[best]].metrics[k])))
                best = j;
        taken[best] = true;
        const sweep_trial *b = &t[idx[best]];
        if (b->rung == k && b->state == TRIAL_WAITING)
            return idx[best];
    }
    return -1;
}

sweep_action sweep_next(const sweep_spec *s, const sweep_trial *t, int n, bool slot_free, int *promote)
{
    int running = 0;
    for (int i = 0; i < n; i++)
        running += t[i].state == TRIAL_RUNNING;
    if (slot_free && s->method == SWEEP_ASHA) {
        for (int k = s->nrungs - 2; k >= 0; k--) {
            int p = promotable(s, t, n, k);
            if (p >= 0) {
                *promote = p;
                return SWEEP_PROMOTE;
            }
        }
    }
    if (slot_free && n < s->trials)
        return SWEEP_NEW;
    if (running > 0)
        return SWEEP_WAIT;
    if (n < s->trials)
        return SWEEP_WAIT;             /* no free slot, though none runs: the caller's parallel is 0 */
    if (s->method == SWEEP_ASHA)
        for (int k = s->nrungs - 2; k >= 0; k--)
            if (promotable(s, t, n, k) >= 0)
                return SWEEP_WAIT;     /* a promotion waits for a slot */
    return SWEEP_END;
}
