/* engine/lr.c: learning-rate policies (formulas in engine/lr.h). */
#include "engine/lr.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

#define LR_PI 3.14159265358979323846
#define WARMUP_EPOCHS_MAX 100000

static const char *const kind_names[] = {
    [LR_FIXED] = "fixed",
    [LR_STEP] = "step",
    [LR_MULTISTEP] = "multistep",
    [LR_EXPONENTIAL] = "exponential",
    [LR_POLYNOMIAL] = "polynomial",
    [LR_COSINE] = "cosine",
};
#define NKINDS (sizeof kind_names / sizeof kind_names[0])

/* Which keys each kind takes, with their defaults and ranges: lr_check
 * applies the ranges, lr_fixed the defaults, lr_schema publishes both. */
typedef struct lr_key {
    const char *key;
    unsigned kinds;               /* bit per lr_kind */
    const char *type;             /* its JSON schema type */
    bool has_def;
    double def;
    double lo, hi;                /* hi 0: none */
    bool lo_open, hi_open;
} lr_key;

static const lr_key keys[] = {
    { "step_size", 1u << LR_STEP, "integer", false, 0, 1, 0, false, false },
    { "gamma", 1u << LR_STEP | 1u << LR_MULTISTEP | 1u << LR_EXPONENTIAL, "number", true, 0.1,
      0, 1, true, false },
    { "milestones", 1u << LR_MULTISTEP, "array", false, 0, 1, 0, false, false },
    { "power", 1u << LR_POLYNOMIAL, "number", true, 1, 0, 0, true, false },
    { "min_lr", 1u << LR_COSINE, "number", true, 0, 0, 0, false, false },      /* and at most the lr */
    { "type", ~0u, "string", false, 0, 0, 0, false, false },
    { "warmup_steps", ~0u, "integer", true, 0, 0, 0, false, false },
    { "warmup_epochs", ~0u, "integer", true, 0, 0, WARMUP_EPOCHS_MAX, false, false },
};

static const lr_key *key_of(const char *name)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(keys[i].key, name))
            return &keys[i];
    return NULL;
}

/* Whether v is in the range of key `name`. */
static bool key_ok(const char *name, double v)
{
    const lr_key *k = key_of(name);
    return isfinite(v) && (k->lo_open ? v > k->lo : v >= k->lo) &&
           (k->hi == 0 || (k->hi_open ? v < k->hi : v <= k->hi));
}

const char *lr_kind_name(lr_kind k)
{
    return (size_t)k < NKINDS ? kind_names[k] : "?";
}

int lr_kind_parse(const char *name, lr_kind *out)
{
    for (size_t i = 0; i < NKINDS; i++) {
        if (!strcmp(kind_names[i], name)) {
            *out = (lr_kind)i;
            return 0;
        }
    }
    return -1;
}

lr_policy lr_fixed(double base)
{
    lr_policy p;
    memset(&p, 0, sizeof p);
    p.kind = LR_FIXED;
    p.base = base;
    p.gamma = key_of("gamma")->def;
    p.power = key_of("power")->def;
    return p;
}

int lr_check(const lr_policy *p, char *err, size_t errlen)
{
    if ((size_t)p->kind >= NKINDS)
        return set_err(err, errlen, "lr_policy.type is unknown");
    if (!isfinite(p->base) || p->base < 0)
        return set_err(err, errlen, "lr must be a finite number >= 0");
    if (!key_ok("warmup_steps", (double)p->warmup_steps))
        return set_err(err, errlen, "lr_policy warm-up must be >= 0 steps");
    switch (p->kind) {
    case LR_STEP:
        if (!key_ok("step_size", (double)p->step_size))
            return set_err(err, errlen, "lr_policy.step_size must be an integer >= 1");
        /* fall through */
    case LR_MULTISTEP:
    case LR_EXPONENTIAL:
        if (!key_ok("gamma", p->gamma))
            return set_err(err, errlen, "lr_policy.gamma must be a number above 0 and at most 1");
        break;
    case LR_POLYNOMIAL:
        if (!key_ok("power", p->power))
            return set_err(err, errlen, "lr_policy.power must be a number above 0");
        break;
    case LR_COSINE:
        if (!key_ok("min_lr", p->min_lr) || p->min_lr > p->base)
            return set_err(err, errlen, "lr_policy.min_lr must be a number from 0 to lr");
        break;
    case LR_FIXED:
        break;
    }
    if (p->kind == LR_MULTISTEP) {
        if (p->nmilestones < 1 || p->nmilestones > LR_MAX_MILESTONES)
            return set_err(err, errlen, "lr_policy.milestones must list 1 to %d steps",
                           LR_MAX_MILESTONES);
        for (int i = 0; i < p->nmilestones; i++)
            if (p->milestones[i] < 1 || (i > 0 && p->milestones[i] <= p->milestones[i - 1]))
                return set_err(err, errlen, "lr_policy.milestones must be increasing integers "
                               ">= 1");
    }
    if ((p->kind == LR_POLYNOMIAL || p->kind == LR_COSINE) && p->max_steps < 1)
        return set_err(err, errlen, "lr_policy %s needs the run's step count", lr_kind_name(p->kind));
    return 0;
}

double lr_at(const lr_policy *p, int64_t t)
{
    double lr = p->base, frac;
    if (t < 0)
        t = 0;
    switch (p->kind) {
    case LR_FIXED:
        break;
    case LR_STEP:
        lr = p->base * pow(p->gamma, (double)(t / p->step_size));
        break;
    case LR_MULTISTEP: {
        int k = 0;
        while (k < p->nmilestones && p->milestones[k] <= t)
            k++;
        lr = p->base * pow(p->gamma, k);
        break;
    }
    case LR_EXPONENTIAL:
        lr = p->base * pow(p->gamma, (double)t);
        break;
    case LR_POLYNOMIAL:
        frac = t >= p->max_steps ? 1.0 : (double)t / (double)p->max_steps;
        lr = p->base * pow(1.0 - frac, p->power);
        break;
    case LR_COSINE:
        frac = t >= p->max_steps ? 1.0 : (double)t / (double)p->max_steps;
        lr = p->min_lr + (p->base - p->min_lr) * (1.0 + cos(LR_PI * frac)) / 2.0;
        break;
    }
    if (t < p->warmup_steps)
        lr *= (double)(t + 1) / (double)p->warmup_steps;
    return lr;
}

/* ---- JSON ----------------------------------------------------------------- */

static bool get_count(const cJSON *v, int64_t lo, int64_t *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble ||
        v->valuedouble < (double)lo || v->valuedouble > 1e15)
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

int lr_from_json(const cJSON *obj, double base, int64_t max_steps, int64_t steps_per_epoch,
                 lr_policy *out, bool *unknown, char *err, size_t errlen)
{
    lr_policy p = lr_fixed(base);
    p.max_steps = max_steps;
    if (unknown)
        *unknown = false;
    if (!obj || cJSON_IsNull(obj)) {
        *out = p;
        return 0;
    }
    if (!cJSON_IsObject(obj))
        return set_err(err, errlen, "lr_policy must be an object such as {\"type\": \"step\", "
                       "\"step_size\": 1000, \"gamma\": 0.1}");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(ty) || lr_kind_parse(ty->valuestring, &p.kind) < 0)
        return set_err(err, errlen, "lr_policy.type must be one of fixed, step, multistep, "
                       "exponential, polynomial, cosine");
    for (const cJSON *c = obj->child; c; c = c->next) {
        const lr_key *k = key_of(c->string ? c->string : "");
        if (!k || !(k->kinds & (1u << p.kind))) {
            if (unknown)
                *unknown = true;
            return set_err(err, errlen, "unknown field \"lr_policy.%.64s\" for lr_policy type %s",
                           c->string ? c->string : "", lr_kind_name(p.kind));
        }
    }
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(obj, "step_size")) && !get_count(v, 1, &p.step_size))
        return set_err(err, errlen, "lr_policy.step_size must be an integer >= 1 (steps)");
    if ((v = cJSON_GetObjectItemCaseSensitive(obj, "gamma"))) {
        if (!cJSON_IsNumber(v))
            return set_err(err, errlen, "lr_policy.gamma must be a number");
        p.gamma = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(obj, "power"))) {
        if (!cJSON_IsNumber(v))
            return set_err(err, errlen, "lr_policy.power must be a number");
        p.power = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(obj, "min_lr"))) {
        if (!cJSON_IsNumber(v))
            return set_err(err, errlen, "lr_policy.min_lr must be a number");
        p.min_lr = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(obj, "milestones"))) {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 1 || n > LR_MAX_MILESTONES)
            return set_err(err, errlen, "lr_policy.milestones must be an array of 1 to %d steps",
                           LR_MAX_MILESTONES);
        const cJSON *m;
        p.nmilestones = 0;
        cJSON_ArrayForEach(m, v) {
            if (!get_count(m, 1, &p.milestones[p.nmilestones]))
                return set_err(err, errlen, "lr_policy.milestones must hold integers >= 1 (steps)");
            p.nmilestones++;
        }
    }
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(obj, "warmup_steps");
    const cJSON *we = cJSON_GetObjectItemCaseSensitive(obj, "warmup_epochs");
    if (ws && we)
        return set_err(err, errlen, "lr_policy: give warmup_steps or warmup_epochs, not both");
    if (ws && !get_count(ws, 0, &p.warmup_steps))
        return set_err(err, errlen, "lr_policy.warmup_steps must be an integer >= 0");
    if (we) {
        int64_t e;
        if (!get_count(we, 0, &e) || !key_ok("warmup_epochs", (double)e))
            return set_err(err, errlen, "lr_policy.warmup_epochs must be an integer from 0 to %d",
                           WARMUP_EPOCHS_MAX);
        p.warmup_steps = e * (steps_per_epoch > 0 ? steps_per_epoch : 1);
    }
    if (lr_check(&p, err, errlen) < 0)
        return -1;
    *out = p;
    return 0;
}

int lr_to_json(const lr_policy *p, cJSON *obj)
{
    bool ok = cJSON_AddStringToObject(obj, "type", lr_kind_name(p->kind)) != NULL;
    if (p->kind == LR_STEP)
        ok = ok && cJSON_AddNumberToObject(obj, "step_size", (double)p->step_size);
    if (p->kind == LR_STEP || p->kind == LR_MULTISTEP || p->kind == LR_EXPONENTIAL)
        ok = ok && cJSON_AddNumberToObject(obj, "gamma", p->gamma);
    if (p->kind == LR_MULTISTEP) {
        cJSON *a = cJSON_AddArrayToObject(obj, "milestones");
        for (int i = 0; ok && a && i < p->nmilestones; i++)
            ok = cJSON_AddItemToArray(a, cJSON_CreateNumber((double)p->milestones[i]));
        ok = ok && a;
    }
    if (p->kind == LR_POLYNOMIAL)
        ok = ok && cJSON_AddNumberToObject(obj, "power", p->power);
    if (p->kind == LR_COSINE)
        ok = ok && cJSON_AddNumberToObject(obj, "min_lr", p->min_lr);
    ok = ok && cJSON_AddNumberToObject(obj, "warmup_steps", (double)p->warmup_steps);
    return ok ? 0 : -1;
}

cJSON *lr_schema(void)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    for (size_t i = 0; ok && i < sizeof keys / sizeof keys[0]; i++) {
        const lr_key *k = &keys[i];
        char path[48];
        snprintf(path, sizeof path, "lr_policy.%s", k->key);
        cJSON *f = cJSON_AddObjectToObject(o, path);
        ok = f && cJSON_AddStringToObject(f, "type", k->type);
        if (ok && !strcmp(k->key, "type")) {
            ok = cJSON_AddItemToObject(f, "enum", cJSON_CreateStringArray(kind_names, NKINDS)) &&
                 cJSON_AddStringToObject(f, "default", kind_names[LR_FIXED]);
            continue;
        }
        if (ok && k->has_def)
            ok = cJSON_AddNumberToObject(f, "default", k->def) != NULL;
        if (ok && !strcmp(k->type, "array")) {           /* milestones: steps */
            cJSON *items = cJSON_AddObjectToObject(f, "items");
            ok = items && cJSON_AddStringToObject(items, "type", "integer") &&
                 cJSON_AddNumberToObject(items, "minimum", k->lo) &&
                 cJSON_AddNumberToObject(f, "minItems", 1) &&
                 cJSON_AddNumberToObject(f, "maxItems", LR_MAX_MILESTONES);
        }
        if (ok && strcmp(k->type, "array") != 0)
            ok = cJSON_AddNumberToObject(f, k->lo_open ? "exclusiveMinimum" : "minimum", k->lo) &&
                 (k->hi == 0 ||
                  cJSON_AddNumberToObject(f, k->hi_open ? "exclusiveMaximum" : "maximum", k->hi));
        if (ok && k->kinds != ~0u) {
            cJSON *kinds = cJSON_AddArrayToObject(f, "policies");
            for (size_t j = 0; ok && kinds && j < NKINDS; j++)
                if (k->kinds & (1u << j))
                    ok = cJSON_AddItemToArray(kinds, cJSON_CreateString(kind_names[j]));
            ok = ok && kinds;
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
