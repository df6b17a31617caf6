/* engine/net_step.c: running a net: forward, the loss, backward and the
 * update (net_train_step, net_eval, net_predict), and the two halves of a
 * training step that every replica runs (net_step_grads, net_step_update).
 *
 * Training and inference differ in dropout (a mask in training, the identity
 * otherwise) and batch norm (batch statistics, which also update the running
 * ones, in training; the running statistics otherwise), and inference runs
 * convolutions with what follows them folded in where it can
 * (engine/net_fuse.c: the same for net_eval and net_predict, so validation
 * during training and an evaluation afterwards agree). Dropout masks come
 * from a stream derived from the seed, the layer's name and the step count,
 * so runs repeat and a restored step count (net_set_step) resumes them.
 *
 * A step allocates nothing here once the plans for its batch size exist:
 * every buffer is made by net_build (a replica without images in a step
 * makes its host zeros once, at the first such step).
 */
#include "engine/net_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/rng.h"       /* rng_splitmix64: dropout streams */

static const be_buf *param_w(const net *n, int i)
{
    return i >= 0 ? n->params[i].w : NULL;
}

/* What a convolution or dense layer multiplies by: the 16-bit copy under AMP. */
static const be_buf *param_mul(const net *n, int i)
{
    return i >= 0 && n->params[i].h ? n->params[i].h : param_w(n, i);
}

static be_buf *param_g(const net *n, int i)
{
    return i >= 0 ? n->params[i].g : NULL;
}

/* The stream of layer l's dropout mask at the current step. */
static uint64_t dropout_seed(const net *n, const layer *l)
{
    uint64_t x = l->seed ^ (n->steps * 0x9e3779b97f4a7c15ULL);
    return rng_splitmix64(&x);
}

static int forward(net *n, plan_set *ps, int bn, bool training, char *err, size_t errlen)
{
    const backend *be = n->be;
    for (int i = 0; i < n->nlayers; i++) {
        const layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        be_plan *p = ps->plans[i];
        const be_buf *x = n->act[s->inputs[0]];
        be_buf *y = n->act[i + 1];
        const be_buf *xs[SPEC_MAX_INPUTS];
        size_t count = (size_t)bn * net_act_elems(n, i + 1);
        int rc = training ? 0 : net_fuse_layer(n, ps, i, err, errlen);
        if (rc < 0)
            return -1;                  /* (the message names the layer) */
        if (rc > 0)
            continue;                   /* run, or skipped, as part of a fuse group */
        if (s->kind == LAYER_RELU && l->relu_pair >= 0)
            continue;                   /* the batch norm or add before it ran it */
        switch (s->kind) {
        case LAYER_CONV2D:
            rc = be->conv_fwd(n->ctx, p, x, param_mul(n, l->w), param_w(n, l->b), y, err,
                              errlen);
            break;
        case LAYER_DENSE:
            rc = be->dense_fwd(n->ctx, p, x, param_mul(n, l->w), param_w(n, l->b), y, err,
                               errlen);
            break;
        case LAYER_MAXPOOL:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL:
            rc = be->pool_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
        case LAYER_SIGMOID:
        case LAYER_TANH:
            rc = be->act_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_DROPOUT:
            rc = be->dropout_fwd(n->ctx, &(be_dropout_desc){ .count = count, .rate = s->u.rate,
                                 .layout = n->layout[i + 1], .c = s->in.c,
                                 .hw = (size_t)s->in.h * s->in.w, .dtype = n->dtype[i + 1] },
                                 training, x, l->mask, y, dropout_seed(n, l), err, errlen);
            break;
        case LAYER_BATCHNORM:
            if (training) {             /* the running statistics follow an applied step */
                rc = be->bn_fwd(n->ctx, p, true, x, param_w(n, l->w), param_w(n, l->b),
                                l->mean, l->var, y, err, errlen);
            } else {
                rc = be->bn_fwd(n->ctx, p, false, x, param_w(n, l->w), param_w(n, l->b),
                                n->stats[l->rm].w, n->stats[l->rv].w, y, err, errlen);
            }
            break;
        case LAYER_ADD:
        case LAYER_CONCAT:
            for (int k = 0; k < s->ninputs; k++)
                xs[k] = n->act[s->inputs[k]];
            rc = s->kind == LAYER_ADD ? be->add_fwd(n->ctx, p, xs, y, err, errlen)
                                      : be->concat_fwd(n->ctx, p, xs, y, err, errlen);
            break;
        case LAYER_FLATTEN:
            break;
        }
        if (rc < 0)
            return net_layer_fail(l, err, errlen);
    }
    return 0;
}

/* Where an op writing input k's gradient overwrite-style should put it: the
 * gradient itself for the first contribution, else the scratch buffer that
 * add_tmp then adds in. */
static be_buf *dx_target(const net *n, const layer *l, int k)
{
    return l->first[k] ? n->grad[l->s->inputs[k]] : n->tmp;
}

static int add_tmp(net *n, const layer *l, int k, int bn, char *err, size_t errlen)
{
    int a = l->s->inputs[k];
    if (l->first[k])
        return 0;
    size_t count = (size_t)bn * net_act_elems(n, a);
    return n->be->acc(n->ctx, n->grad[a], n->tmp, count, n->dtype[a], 1.0f, err, errlen);
}

/* The backward pass of an add of two with the ReLU after it in its pass
 * (plan_relu_pairs): the ReLU's gradient, from its output y (the add's
 * buffers), written straight into the gradient of an input that takes it
 * first, then copied or added to the other's. */
static int add_relu_bwd(net *n, plan_set *ps, int i, int bn, char *err, size_t errlen)
{
    const layer *l = &n->layers[i];
    const int *in = l->s->inputs;
    const size_t count = (size_t)bn * net_act_elems(n, i + 1);
    const int k0 = l->dx[0] && l->first[0] ? 0 : 1;
    if (!l->dx[k0] || !l->first[k0])
        return set_err(err, errlen, "an add with a ReLU and no input that takes its gradient "
                       "first");
    be_buf *m = n->grad[in[k0]];
    if (n->be->act_bwd(n->ctx, ps->plans[l->relu_pair], n->act[i + 1], n->grad[i + 1], m, err,
                       errlen) < 0)
        return -1;
    const int k1 = 1 - k0;
    if (!l->dx[k1])
        return 0;
    return n->be->acc(n->ctx, n->grad[in[k1]], m, count, n->dtype[i + 1],
                      l->first[k1] ? 0.0f : 1.0f, err, errlen);
}

static int backward_layer(net *n, plan_set *ps, int i, int bn, char *err, size_t errlen)
{
    const backend *be = n->be;
    const layer *l = &n->layers[i];
    const layer_spec *s = l->s;
    be_plan *p = ps->plans[i];
    const be_buf *x = n->act[s->inputs[0]], *y = n->act[i + 1], *dy = n->grad[i + 1];
    size_t count = (size_t)bn * net_act_elems(n, i + 1);
    int rc = 0;
    switch (s->kind) {
    case LAYER_CONV2D:
        rc = be->conv_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                  err, errlen);
        if (rc == 0 && l->dx[0])
            rc = be->conv_bwd_data(n->ctx, p, dy, param_mul(n, l->w), dx_target(n, l, 0),
                                   err, errlen);
        break;
    case LAYER_DENSE:
        rc = be->dense_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                   err, errlen);
        if (rc == 0 && l->dx[0])
            rc = be->dense_bwd_data(n->ctx, p, dy, param_mul(n, l->w), dx_target(n, l, 0),
                                    err, errlen);
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
    case LAYER_GLOBAL_AVGPOOL:
        if (l->dx[0])
            rc = be->pool_bwd(n->ctx, p, dy, dx_target(n, l, 0), err, errlen);
        break;
    case LAYER_RELU:
    case LAYER_LEAKY_RELU:
    case LAYER_SIGMOID:
    case LAYER_TANH:
        if (s->kind == LAYER_RELU && l->relu_pair >= 0 &&
            net_relu_bwd_hosted(&n->layers[l->relu_pair]))
            return 0;                   /* in the batch norm's or add's backward pass */
        if (l->dx[0])
            rc = be->act_bwd(n->ctx, p, y, dy, dx_target(n, l, 0), err, errlen);
        break;
    case LAYER_BATCHNORM:
        rc = be->bn_bwd(n->ctx, p, x, dy, param_w(n, l->w), param_w(n, l->b), l->mean, l->var,
                        l->dx[0] ? dx_target(n, l, 0) : NULL, param_g(n, l->w),
                        param_g(n, l->b), err, errlen);
        break;
    case LAYER_DROPOUT:
        if (l->dx[0])
            return be->dropout_bwd(n->ctx, &(be_dropout_desc){ .count = count,
                                   .dtype = n->dtype[i + 1] }, l->mask, dy, n->grad[s->inputs[0]],
                                   l->first[0] ? 0.0f : 1.0f, err, errlen);
        return 0;
    case LAYER_ADD:
        if (l->relu_pair >= 0)
            return add_relu_bwd(n, ps, i, bn, err, errlen);
        for (int k = 0; k < s->ninputs && rc == 0; k++)
            if (l->dx[k])
                rc = be->acc(n->ctx, n->grad[s->inputs[k]], dy, count, n->dtype[i + 1],
                             l->first[k] ? 0.0f : 1.0f, err, errlen);
        return rc;
    case LAYER_CONCAT:
        for (int k = 0; k < s->ninputs && rc == 0; k++)
            if (l->dx[k])
                rc = be->concat_bwd(n->ctx, p, dy, k, n->grad[s->inputs[k]],
                                    l->first[k] ? 0.0f : 1.0f, err, errlen);
        return rc;
    case LAYER_FLATTEN:
        if (l->dx[0] && !l->grad_alias)
            return be->acc(n->ctx, n->grad[s->inputs[0]], dy, count, n->dtype[i + 1],
                           l->first[0] ? 0.0f : 1.0f,
                           err, errlen);
        return 0;
    }
    if (rc == 0 && l->dx[0])
        rc = add_tmp(n, l, 0, bn, err, errlen);
    return rc;
}

static int backward(net *n, plan_set *ps, int bn, char *err, size_t errlen)
{
    for (int i = n->nlayers - 1; i >= 0; i--) {
        const layer *l = &n->layers[i];
        if (!n->need_grad[i + 1])
            continue;                       /* nothing before this layer learns */
        if (backward_layer(n, ps, i, bn, err, errlen) < 0)
            return net_layer_fail(l, err, errlen);
        if (n->comm && net_dp_allreduce(n, n->params, l->bucket_lo, l->bucket_hi, true, err,
                                         errlen) < 0)
            return -1;
    }
    return 0;
}

/* count >= 1 images with labels (when not NULL) in [0, classes). Any count:
 * evaluation and prediction run it in chunks of max_batch, and a training
 * step checks its own bound. */
static int check_batch(const net *n, const int32_t *labels, int count, char *err, size_t errlen)
{
    if (count < 1)
        return set_err(err, errlen, "batch of %d images: must be 1 to %d", count, n->max_batch);
    for (int i = 0; labels && i < count; i++)
        if (labels[i] < 0 || labels[i] >= n->classes)
            return set_err(err, errlen, "label %d of image %d is outside [0, %d)",
                           (int)labels[i], i, n->classes);
    return 0;
}

/* Uploads count images (and labels when not NULL) and runs the forward pass. */
static plan_set *load_and_forward(net *n, const float *x, const int32_t *labels, int count,
                                  bool training, char *err, size_t errlen)
{
    plan_set *ps = net_plans_for(n, count, err, errlen);
    size_t in_bytes = (size_t)count * (size_t)spec_shape_size(n->spec.in) * sizeof(float);
    if (!ps ||
        n->be->buf_upload(n->ctx, n->act[0], 0, x, in_bytes, err, errlen) < 0 ||
        (labels && n->be->buf_upload(n->ctx, n->labels, 0, labels,
                                     (size_t)count * sizeof *labels, err, errlen) < 0) ||
        forward(n, ps, count, training, err, errlen) < 0)
        return NULL;
    if (n->logits32 && n->be->cast(n->ctx, n->act[n->nlayers], n->dtype[n->nlayers], n->logits32,
                                   BE_F32, (size_t)count * (size_t)n->classes, err, errlen) < 0)
        return NULL;
    return ps;
}

/* The FP32 logits the loss reads (engine/net_build.c, plan_dtypes). */
static const be_buf *logits_f32(const net *n)
{
    return n->logits32 ? n->logits32 : n->act[n->nlayers];
}

/* Unscales every weight gradient by 1 / the loss scale (when scaling) and
 * checks them for NaN and infinity; *bad names the first parameter found. */
static int check_grads(net *n, const param **bad, char *err, size_t errlen)
{
    float factor = 1.0f / n->scaler.scale;
    *bad = NULL;
    for (int i = 0; i < n->nparams; i++) {
        bool found = false;
        if ((n->scaler.scale != 1.0f ?
             n->be->unscale(n->ctx, n->params[i].g, n->params[i].count, factor, &found, err,
                            errlen) :
             n->be->nonfinite(n->ctx, n->params[i].g, n->params[i].count, &found, err,
                              errlen)) < 0)
            return -1;
        if (found && !*bad)
            *bad = &n->params[i];
    }
    return 0;
}

/* Host zeros for count floats (a replica without images in a step). */
static const float *zeros(net *n, size_t count, char *err, size_t errlen)
{
    if (count > n->zeros_count) {
        free(n->zeros);
        n->zeros_count = 0;
        if (!(n->zeros = calloc(count, sizeof *n->zeros))) {
            set_err(err, errlen, "out of memory");
            return NULL;
        }
        n->zeros_count = count;
    }
    return n->zeros;
}

/* The first half of a training step on one replica: forward, loss and
 * backward on its count images, the loss's gradient divided by the total
 * images of the step over all replicas, so that the gradients summed over
 * the replicas are those of the whole batch. A replica without images
 * contributes zeros. Leaves the gradients summed (allreduced) over the
 * replicas, and this replica's loss sum and hits in *loss_sum, *correct. */
int net_step_grads(net *n, const float *x, const int32_t *labels, int count, int total,
                   double *loss_sum, int *correct, char *err, size_t errlen)
{
    const int L = n->nlayers;
    *loss_sum = 0;
    *correct = 0;
    n->last_batch = count;
    if (count == 0) {
        n->steps++;
        for (int i = 0; i < n->nparams; i++) {
            const float *z = zeros(n, n->params[i].count, err, errlen);
            if (!z || n->be->buf_upload(n->ctx, n->params[i].g, 0, z,
                                        n->params[i].count * sizeof *z, err, errlen) < 0)
                return -1;
        }
        for (int i = L - 1; i >= 0; i--)    /* the buckets in backward's order */
            if (net_dp_allreduce(n, n->params, n->layers[i].bucket_lo, n->layers[i].bucket_hi,
                                 true, err, errlen) < 0)
                return -1;
        return n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen);
    }
    plan_set *ps = load_and_forward(n, x, labels, count, true, err, errlen);
    if (!ps)
        return -1;
    n->steps++;
    /* The loss's gradient carries the loss scale (1 without scaling) and the
     * mean over the batch. */
    be_buf *dl = n->dlogits32 ? n->dlogits32 : n->grad[L];
    if (n->be->xent(n->ctx, ps->plans[L], logits_f32(n), n->labels, n->solver.label_smoothing,
                    n->scaler.scale / (float)total, dl, NULL, loss_sum, correct, err,
                    errlen) < 0)
        return -1;
    /* Under dynamic scaling a non-finite loss is an overflow like any other
     * (the gradients will show it); without, the run has diverged. */
    if (!isfinite(*loss_sum) && !n->scaler.dynamic)
        return set_err(err, errlen, "training diverged: the loss is %s (try a smaller "
                       "learning rate)", isnan(*loss_sum) ? "NaN" : "infinite");
    if ((n->dlogits32 && n->be->cast(n->ctx, n->dlogits32, BE_F32, n->grad[L], n->dtype[L],
                                     (size_t)count * (size_t)n->classes, err, errlen) < 0) ||
        backward(n, ps, count, err, errlen) < 0)
        return -1;
    return n->comm ? n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen) : 0;
}

/* Batch norm's running statistics after an applied step, from the batch
 * statistics of the step (a replica without images keeps its own). With
 * replicas, averaged over those that had images, so that every replica
 * keeps the same ones (the average of their batches' statistics). */
static int update_running(net *n, int active, char *err, size_t errlen)
{
    for (int i = 0; i < n->nlayers && n->last_batch > 0; i++) {
        const layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        if (s->kind == LAYER_BATCHNORM &&
            n->be->bn_running(n->ctx, n->stats[l->rm].w, n->stats[l->rv].w, l->mean, l->var,
                              s->in.c, s->u.bn.momentum,
                              (int64_t)n->last_batch * s->in.h * s->in.w, err, errlen) < 0)
            return net_layer_fail(l, err, errlen);
    }
    if (!n->comm || n->nstats == 0)
        return 0;
    for (int i = 0; i < n->nstats && n->last_batch == 0; i++) {   /* it adds nothing */
        const float *z = zeros(n, n->stats[i].count, err, errlen);
        if (!z || n->be->buf_upload(n->ctx, n->stats[i].w, 0, z, n->stats[i].count * sizeof *z,
                                    err, errlen) < 0)
            return -1;
    }
    if (net_dp_allreduce(n, n->stats, 0, n->nstats, false, err, errlen) < 0 ||
        n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen) < 0)
        return -1;
    for (int i = 0; i < n->nstats && active > 1; i++) {
        bool found = false;
        if (n->be->unscale(n->ctx, n->stats[i].w, n->stats[i].count, 1.0f / (float)active,
                           &found, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* The second half of a training step, on every replica alike (their
 * gradients are the same bits): unscale and check the gradients, let the
 * loss scaler decide, update. loss_finite: the step's loss over all
 * replicas is finite; mean_loss for the divergence message. */
int net_step_update(net *n, float lr, bool loss_finite, double mean_loss, int active,
                    bool *skipped, char *err, size_t errlen)
{
    /* A NaN can hide from the loss (a ReLU maps it to 0) and still reach a
     * gradient; refuse the update before any weight changes. */
    const param *bad;
    if (check_grads(n, &bad, err, errlen) < 0)
        return -1;
    bool overflow = bad || !loss_finite;
    *skipped = overflow;
    switch (amp_scaler_update(&n->scaler, overflow)) {
    case AMP_DIVERGED:
        if (n->scaler.dynamic)
            return set_err(err, errlen, "training diverged: the gradients overflowed %s %lld "
                           "times until the loss scale fell below %g (the loss is %s; try a "
                           "smaller learning rate)", n->half == BE_F16 ? "FP16" : "bfloat16",
                           (long long)n->scaler.skipped, (double)AMP_SCALE_FLOOR,
                           isnan(mean_loss) ? "NaN" : isinf(mean_loss) ? "infinite" : "finite");
        if (!loss_finite)
            return set_err(err, errlen, "training diverged: the loss is %s (try a smaller "
                           "learning rate)", isnan(mean_loss) ? "NaN" : "infinite");
        return set_err(err, errlen, "training diverged: the gradient of %s is not finite "
                       "(check the data, or try a smaller learning rate)", bad->name);
    case AMP_SKIP:
        return 0;               /* nothing changes, the running statistics included */
    case AMP_APPLY:
        break;
    }
    if (optim_step(n->opt, lr, NULL, err, errlen) < 0 ||
        net_refresh_copies(n, err, errlen) < 0 ||
        update_running(n, active, err, errlen) < 0)
        return -1;
    return 0;
}

/* Forward and loss over count images in chunks of max_batch: the summed
 * loss and hits. */
int net_eval_chunks(net *n, const float *x, const int32_t *labels, int count, double *total,
                    int *correct, char *err, size_t errlen)
{
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    *total = 0;
    *correct = 0;
    for (int done = 0; done < count;) {
        int bn = count - done < n->max_batch ? count - done : n->max_batch;
        double ls = 0;
        int hits = 0;
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, labels + done, bn,
                                        false, err, errlen);
        if (!ps || n->be->xent(n->ctx, ps->plans[n->nlayers], logits_f32(n), n->labels,
                               0.0f, 1.0f, NULL, NULL, &ls, &hits, err, errlen) < 0)
            return -1;
        *total += ls;
        *correct += hits;
        done += bn;
    }
    return 0;
}

int net_train_step(net *n, const float *x, const int32_t *labels, int count,
                   float lr, net_stats *out, char *err, size_t errlen)
{
    double loss_sum = 0;
    int correct = 0;
    bool skipped = false;
    const float scale = n->scaler.scale;
    if (count < 1 || count > n->global_batch)
        return set_err(err, errlen, "batch of %d images: must be 1 to %d", count,
                       n->global_batch);
    if (check_batch(n, labels, count, err, errlen) < 0)
        return -1;
    if (!isfinite(lr) || lr < 0)
        return set_err(err, errlen, "learning rate %g must be a finite number >= 0", lr);
    if (n->world)
        return net_world_train_step(n, x, labels, count, lr, out, err, errlen);
    if (n->nrep > 1)
        return net_dp_train_step(n, x, labels, count, lr, out, err, errlen);
    if (net_step_grads(n, x, labels, count, count, &loss_sum, &correct, err, errlen) < 0 ||
        net_step_update(n, lr, isfinite(loss_sum), loss_sum / count, 1, &skipped, err,
                        errlen) < 0)
        return -1;
    if (out) {
        out->loss = loss_sum / count;
        out->correct = correct;
        out->count = count;
        out->loss_scale = scale;
        out->skipped = skipped;
    }
    return 0;
}

int net_eval(net *n, const float *x, const int32_t *labels, int count,
             net_stats *out, char *err, size_t errlen)
{
    double total = 0;
    int correct = 0;
    if (!labels)
        return set_err(err, errlen, "net_eval needs labels");
    if (check_batch(n, labels, count, err, errlen) < 0)
        return -1;
    /* (replicas that may differ after a failed step: the primary alone) */
    int rc = n->world ? net_world_eval(n, x, labels, count, &total, &correct, err, errlen) :
             n->nrep > 1 && !n->broken ?
             net_dp_eval(n, x, labels, count, &total, &correct, err, errlen) :
             net_eval_chunks(n, x, labels, count, &total, &correct, err, errlen);
    if (rc < 0)
        return -1;
    if (out) {
        out->loss = total / count;
        out->correct = correct;
        out->count = count;
        out->loss_scale = 1.0f;
        out->skipped = false;
    }
    return 0;
}

int net_predict(net *n, const float *x, int count, float *probs, char *err, size_t errlen)
{
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    if (check_batch(n, NULL, count, err, errlen) < 0)
        return -1;
    for (int done = 0; done < count;) {
        int bn = count - done < n->max_batch ? count - done : n->max_batch;
        size_t pbytes = (size_t)bn * (size_t)n->classes * sizeof(float);
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, NULL, bn, false,
                                        err, errlen);
        if (!ps ||
            n->be->xent(n->ctx, ps->plans[n->nlayers], logits_f32(n), NULL, 0.0f, 1.0f, NULL,
                        n->probs, NULL, NULL, err, errlen) < 0 ||
            n->be->buf_download(n->ctx, n->probs, 0, probs + (size_t)done * n->classes, pbytes,
                                err, errlen) < 0)
            return -1;
        done += bn;
    }
    return 0;
}
