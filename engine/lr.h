/* engine/lr.h: learning-rate policies, as pure functions of the step.
 *
 * lr_at(p, t) is the rate for the step with 0-based index t (the runner's
 * step t + 1). With base the solver's lr:
 *   fixed        base
 *   step         base * gamma^floor(t / step_size)
 *   multistep    base * gamma^(number of milestones <= t)
 *   exponential  base * gamma^t
 *   polynomial   base * (1 - t / max_steps)^power          (Caffe's "poly")
 *   cosine       min_lr + (base - min_lr) * (1 + cos(pi t / max_steps)) / 2
 * and, with warmup_steps W > 0, for t < W the policy's rate times (t + 1) / W
 * (linear warm-up that reaches the policy's rate at step W).
 * Rates are computed in double; callers round to float once.
 */
#ifndef KILN_ENGINE_LR_H
#define KILN_ENGINE_LR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

typedef enum lr_kind {
    LR_FIXED, LR_STEP, LR_MULTISTEP, LR_EXPONENTIAL, LR_POLYNOMIAL, LR_COSINE,
} lr_kind;

#define LR_MAX_MILESTONES 32

typedef struct lr_policy {
    lr_kind kind;
    double base;                 /* the solver's lr */
    int64_t step_size;           /* step: > 0 */
    double gamma;                /* step, multistep, exponential: in (0, 1] */
    int64_t milestones[LR_MAX_MILESTONES];   /* multistep: ascending, > 0 */
    int nmilestones;
    double power;                /* polynomial: > 0 */
    double min_lr;               /* cosine: >= 0, <= base */
    int64_t max_steps;           /* polynomial, cosine: steps of the whole run, > 0 */
    int64_t warmup_steps;        /* 0: none */
} lr_policy;

/* "fixed", "step", ... for a kind; lr_kind_parse returns 0 or -1. */
const char *lr_kind_name(lr_kind k);
int lr_kind_parse(const char *name, lr_kind *out);

/* A fixed policy at base. */
lr_policy lr_fixed(double base);

/* Checks a policy's fields for its kind. Returns 0, or -1 with err set. */
int lr_check(const lr_policy *p, char *err, size_t errlen);

/* The rate for 0-based step t >= 0. */
double lr_at(const lr_policy *p, int64_t t);

/* Reads an "lr_policy" object of a job request or job.json:
 *   {"type": "step", "step_size": N, "gamma": G, "milestones": [..], "power": P,
 *    "min_lr": L, "warmup_steps": W | "warmup_epochs": E}
 * (each key only for the kinds that use it; gamma defaults to 0.1, power to
 * 1, min_lr to 0). obj may be NULL (fixed). base is the solver's lr, max_steps
 * the run's steps, steps_per_epoch converts warmup_epochs. Returns 0, or -1
 * with err naming the field ("lr_policy.gamma must ...") and *unknown (when
 * not NULL) true if the problem is a key that is not allowed. */
int lr_from_json(const cJSON *obj, double base, int64_t max_steps, int64_t steps_per_epoch,
                 lr_policy *out, bool *unknown, char *err, size_t errlen);

/* The policy's fields for a schema ("lr_policy.gamma": type, default,
 * range, the policies that take it), as GET /api/v1/schema publishes them;
 * owned by the caller, NULL when out of memory. */
cJSON *lr_schema(void);

/* Adds p's fields (type and the kind's keys, warm-up in steps) to obj.
 * Returns 0, or -1 when out of memory. */
int lr_to_json(const lr_policy *p, cJSON *obj);

#endif
