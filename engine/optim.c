/* engine/optim.c: SGD, Adam and AdamW with weight decay, global-norm clipping
 * and LARC over a list of parameters (contract and order of a step in
 * engine/optim.h). */
#include "engine/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"       /* be_optim, optim_update, sgd_update, sumsq */
#include "engine/elementwise.h"   /* ew_larc_factor */
#include "base/err.h"

#define CLIP_EPS 1e-6              /* torch.nn.utils.clip_grad_norm_ */

struct optim {
    net_solver s;                  /* defaults resolved (optim_check) */
    const backend *be;
    be_ctx *ctx;
    size_t np;
    net_param *params;
    be_buf **second;               /* Adam's exp_avg_sq per parameter; NULL for sgd */
    double *sq;                    /* per-parameter sums of squares (scratch) */
    uint64_t t;
};

static bool finite_in(float x, float lo, bool lo_open, float hi, bool hi_open)
{
    return isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

int optim_check(const net_solver *s, net_solver *out, char *err, size_t errlen)
{
    net_solver r = *s;
    solver_type k = r.type;
    char names[64];                /* the names a message offers (engine/settings.h) */
    if ((unsigned)k >= SOLVER_COUNT) {
        settings_join(solver_type_names(), names, sizeof names);
        return set_err(err, errlen, "solver type %d is unknown (use %s)", (int)k, names);
    }
    if (!finite_in(r.lr, 0, false, INFINITY, false))
        return set_err(err, errlen, "solver lr must be a finite number >= 0");
    if (!finite_in(r.momentum, 0, false, 1, true))
        return set_err(err, errlen, "solver momentum must be in [0, 1)");
    if (!finite_in(r.weight_decay, 0, false, INFINITY, false))
        return set_err(err, errlen, "solver weight_decay must be a finite number >= 0");
    if (!finite_in(r.clip_norm, 0, false, INFINITY, false))
        return set_err(err, errlen, "solver clip_norm must be a finite number >= 0 (0: off)");
    if (!finite_in(r.label_smoothing, 0, false, 1, true))
        return set_err(err, errlen, "label_smoothing must be in [0, 1) (0: off)");
    if ((unsigned)r.precision >= PREC_COUNT) {
        settings_join(precision_names(), names, sizeof names);
        return set_err(err, errlen, "precision %d is unknown (use %s)", (int)r.precision, names);
    }
    if (r.loss_scaling < -1 || r.loss_scaling > 1)
        return set_err(err, errlen, "loss_scaling must be -1 (off), 0 (the precision's default) "
                       "or 1 (on)");
    if (r.loss_scaling == 1 && r.precision == PREC_FP32)
        return set_err(err, errlen, "loss scaling is for mixed precision (amp-bf16, amp-fp16), "
                       "not fp32");
    if (k == SOLVER_SGD) {
        if (r.nesterov && r.momentum <= 0)
            return set_err(err, errlen, "solver nesterov needs a momentum above 0");
    } else {
        if (r.nesterov || r.momentum != 0)
            return set_err(err, errlen, "solver %s takes beta1 and beta2, not momentum or "
                           "nesterov", solver_type_name(k));
        if (r.beta1 == 0 && r.beta2 == 0 && r.eps == 0) {
            r.beta1 = (float)OPTIM_ADAM_BETA1;
            r.beta2 = (float)OPTIM_ADAM_BETA2;
            r.eps = (float)OPTIM_ADAM_EPS;
        }
        if (!finite_in(r.beta1, 0, false, 1, true) || !finite_in(r.beta2, 0, false, 1, true))
            return set_err(err, errlen, "solver beta1 and beta2 must be in [0, 1)");
        if (!finite_in(r.eps, 0, true, INFINITY, false))
            return set_err(err, errlen, "solver eps must be a finite number > 0");
    }
    if (r.larc != LARC_NONE) {
        if ((unsigned)r.larc >= LARC_COUNT) {
            settings_join(larc_policy_names(), names, sizeof names);
            return set_err(err, errlen, "solver larc policy %d is unknown (use %s)", (int)r.larc,
                           names);
        }
        if (k != SOLVER_SGD)
            return set_err(err, errlen, "solver larc works with type sgd only");
        if (r.larc_eta == 0)
            r.larc_eta = (float)OPTIM_LARC_ETA;
        if (!finite_in(r.larc_eta, 0, true, INFINITY, false))
            return set_err(err, errlen, "solver larc eta must be a finite number > 0");
    } else {
        r.larc_eta = 0;
    }
    *out = r;
    return 0;
}

optim *optim_create(const backend *be, be_ctx *ctx, const net_param *params, size_t nparams,
                    const net_solver *s, char *err, size_t errlen)
{
    optim *o = calloc(1, sizeof *o);
    optim *ret = NULL;
    if (!o) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    o->s = *s;
    if ((unsigned)s->type >= SOLVER_COUNT) {
        set_err(err, errlen, "solver type %d is unknown", (int)s->type);
        goto out;
    }
    o->be = be;
    o->ctx = ctx;
    o->np = nparams;
    if (o->np) {
        o->params = calloc(o->np, sizeof *o->params);
        o->sq = calloc(o->np, sizeof *o->sq);
        if (!o->params || !o->sq) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        memcpy(o->params, params, o->np * sizeof *o->params);
    }
    if (s->type != SOLVER_SGD && o->np) {
        if (!(o->second = calloc(o->np, sizeof *o->second))) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < o->np; i++) {
            size_t count = o->params[i].count;
            if (count > SIZE_MAX / sizeof(float)) {
                set_err(err, errlen, "%s is too large", o->params[i].name);
                goto out;
            }
            if (!(o->second[i] = o->be->buf_alloc(o->ctx, count * sizeof(float), err, errlen)))
                goto out;
        }
    }
    ret = o;
    o = NULL;
out:
    optim_free(o);
    return ret;
}

void optim_free(optim *o)
{
    if (!o)
        return;
    for (size_t i = 0; o->second && i < o->np; i++)
        o->be->buf_free(o->ctx, o->second[i]);
    free(o->second);
    free(o->params);
    free(o->sq);
    free(o);
}

/* The factor that clips to the global norm (1 when not clipping), and
 * *norm, from the per-parameter sums of squares in o->sq. */
static double clip_factor(const optim *o, double *norm)
{
    double total = 0;
    for (size_t i = 0; i < o->np; i++)
        total += o->sq[i];
    *norm = sqrt(total);
    if (o->s.clip_norm > 0 && *norm > o->s.clip_norm)
        return o->s.clip_norm / (*norm + CLIP_EPS);
    return 1.0;
}

int optim_step(optim *o, float lr, double *grad_norm, char *err, size_t errlen)
{
    const net_solver *s = &o->s;
    bool larc = s->larc != LARC_NONE;
    bool norms = s->clip_norm > 0 || larc;
    double clip = 1.0, norm = -1;
    if (norms) {
        for (size_t i = 0; i < o->np; i++)
            if (o->be->sumsq(o->ctx, o->params[i].grad, o->params[i].count, &o->sq[i],
                             err, errlen) < 0)
                return -1;
        clip = clip_factor(o, &norm);
    }
    if (grad_norm)
        *grad_norm = norm;
    o->t++;
    double bc1 = 1.0 - pow((double)s->beta1, (double)o->t);
    double sbc2 = sqrt(1.0 - pow((double)s->beta2, (double)o->t));
    for (size_t i = 0; i < o->np; i++) {
        net_param *p = &o->params[i];
        float wd = p->decay || s->decay_bias ? s->weight_decay : 0.0f;
        double gs = clip;
        if (larc) {
            double wsq;
            if (o->be->sumsq(o->ctx, p->value, p->count, &wsq, err, errlen) < 0)
                return -1;
            double f = ew_larc_factor(sqrt(wsq), sqrt(o->sq[i]) * clip, lr, wd, s->larc_eta,
                                      s->larc == LARC_CLIP);
            gs *= f;
            wd = (float)(wd * f);
        }
        int rc;
        if (s->type == SOLVER_SGD && !s->nesterov && gs == 1.0) {
            be_sgd hp = { .lr = lr, .momentum = s->momentum, .weight_decay = wd };
            rc = o->be->sgd_update(o->ctx, p->value, p->momentum, p->grad, p->count, &hp,
                                   err, errlen);
        } else {
            be_optim hp = { .kind = s->type == SOLVER_SGD ? BE_OPT_SGD : BE_OPT_ADAM,
                            .lr = lr, .grad_scale = (float)gs, .weight_decay = wd,
                            .momentum = s->momentum, .nesterov = s->nesterov,
                            .beta1 = s->beta1, .beta2 = s->beta2, .eps = s->eps,
                            .bc1 = (float)bc1, .sbc2 = (float)sbc2 };
            if (s->type == SOLVER_ADAMW) {
                hp.decoupled_wd = wd;
                hp.weight_decay = 0;
            }
            rc = o->be->optim_update(o->ctx, &hp, p->value, p->momentum,
                                     o->second ? o->second[i] : NULL, p->grad, p->count,
                                     err, errlen);
        }
        if (rc < 0) {
            set_err_prefix(err, errlen, p->name);
            return -1;
        }
    }
    return 0;
}

uint64_t optim_steps(const optim *o)
{
    return o->t;
}

void optim_set_steps(optim *o, uint64_t t)
{
    o->t = t;
}

const net_solver *optim_solver(const optim *o)
{
    return &o->s;
}

size_t optim_state_tensors(const optim *o, optim_state *out, size_t max)
{
    size_t per = o->s.type == SOLVER_SGD ? 1 : 2, k = 0;
    for (size_t i = 0; i < o->np; i++) {
        for (size_t j = 0; j < per; j++, k++) {
            if (k >= max)
                continue;
            const net_param *p = &o->params[i];
            out[k] = (optim_state){ .param = p->name, .ndim = p->ndim, .count = p->count };
            memcpy(out[k].shape, p->shape, sizeof p->shape);
            if (o->s.type == SOLVER_SGD) {
                out[k].slot = "momentum";
                out[k].buf = p->momentum;
            } else {
                out[k].slot = j == 0 ? "exp_avg" : "exp_avg_sq";
                out[k].buf = j == 0 ? p->momentum : o->second[i];
            }
        }
    }
    return k;
}
