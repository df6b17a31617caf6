/* engine/net_dp.c: data parallelism (engine/net.h, net_create).
 *
 * A net on several devices is a primary (rank 0) and nrep - 1 replicas,
 * each a whole net on its own device built from the same seed. A step splits
 * the batch over them (share), runs its first half (net_step_grads) on all
 * at once, one thread each, the gradients summed across them in buckets as
 * the backward pass goes, then its second half (net_step_update) alike:
 * every replica makes the same update from the same bits. The threads are
 * started with the replicas and wait between phases, so that a step starts
 * none. A replica that fails aborts the communicator, so that the others do
 * not wait for it, and marks the net broken until its parameters are
 * broadcast again (net_params_changed).
 */
#include "engine/net_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Data parallelism: the parameters' gradients in buckets of about this many
 * bytes, each sent as soon as the backward pass has finished it (the last
 * layers' first), so that the transfer overlaps the rest of the pass. */
#define BUCKET_BYTES ((size_t)8 << 20)

/* Tensors handed to one call of the backend's allreduce (a bucket of more
 * takes several calls). */
#define ALLREDUCE_TENSORS 64

void net_dp_plan_buckets(net *n)
{
    int hi = n->nparams, first = -1;
    size_t bytes = 0, cap = BUCKET_BYTES;
    /* KILN_BUCKET_BYTES=1: a bucket per layer (the tests' way to exercise
     * several buckets with small nets) */
    const char *env = getenv("KILN_BUCKET_BYTES");
    if (env && atol(env) > 0)
        cap = (size_t)atol(env);
    for (int i = n->nlayers - 1; i >= 0; i--) {
        layer *l = &n->layers[i];
        l->bucket_lo = l->bucket_hi = 0;
        if (l->w < 0)
            continue;
        first = i;
        for (int k = l->w; k < hi; k++)
            bytes += n->params[k].count * sizeof(float);
        if (bytes >= cap) {
            l->bucket_lo = l->w;
            l->bucket_hi = hi;
            hi = l->w;
            bytes = 0;
        }
    }
    if (first >= 0 && hi > 0) {             /* the rest goes with the first layer's */
        n->layers[first].bucket_lo = 0;
        n->layers[first].bucket_hi = hi;
    }
}

/* Makes the calling thread ready to run n's operations (a GPU's replica). */
static void bind(const net *n)
{
    if (n->be->ctx_bind)
        n->be->ctx_bind(n->ctx);
}

/* Data parallelism: sums tensors [lo, hi) of ps over the replicas, their
 * gradients or (grads false) their values (engine/backend.h, allreduce).
 * Nothing when lo == hi. */
int net_dp_allreduce(net *n, const param *ps, int lo, int hi, bool grads, char *err,
                     size_t errlen)
{
    be_buf *bufs[ALLREDUCE_TENSORS];
    size_t counts[ALLREDUCE_TENSORS];
    while (lo < hi) {
        int k = 0;
        for (; lo < hi && k < ALLREDUCE_TENSORS; lo++, k++) {
            bufs[k] = grads ? ps[lo].g : ps[lo].w;
            counts[k] = ps[lo].count;
        }
        if (n->be->allreduce(n->ctx, n->comm, n->rank, bufs, counts, k, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* Replica r's share of count images split over nrep (the first ones take
 * the remainder, one each). */
int net_dp_share(int count, int nrep, int r)
{
    return count / nrep + (r < count % nrep);
}

int net_dp_offset(int count, int nrep, int r)
{
    return r * (count / nrep) + (r < count % nrep ? r : count % nrep);
}


/* What one replica's thread does in a phase: a training step's first half
 * (net_step_grads) or second (net_step_update), or an evaluation
 * (net_eval_chunks, which has no collectives). */
typedef enum rep_phase_kind { REP_GRADS, REP_UPDATE, REP_EVAL } rep_phase_kind;

typedef struct rep_work {
    net *n;
    rep_phase_kind phase;
    const float *x;
    const int32_t *labels;
    int count, total, active;
    float lr;
    bool loss_finite;
    double mean_loss;
    double loss_sum;                /* out */
    int correct;
    bool skipped;
    int rc;
    char err[512];
} rep_work;

static void rep_run(rep_work *w)
{
    bind(w->n);
    switch (w->phase) {
    case REP_GRADS:
        w->rc = net_step_grads(w->n, w->x, w->labels, w->count, w->total, &w->loss_sum,
                               &w->correct, w->err, sizeof w->err);
        break;
    case REP_UPDATE:
        w->rc = net_step_update(w->n, w->lr, w->loss_finite, w->mean_loss, w->active,
                                &w->skipped, w->err, sizeof w->err);
        break;
    case REP_EVAL:
        w->rc = net_eval_chunks(w->n, w->x, w->labels, w->count, &w->loss_sum, &w->correct,
                                w->err, sizeof w->err);
        break;
    }
    if (w->rc < 0 && w->n->comm && w->phase != REP_EVAL)   /* the others must not wait for it */
        w->n->be->comm_abort(w->n->comm);
}

/* The threads that run replicas 1..nrep - 1, one each, started with the
 * replicas and parked between phases (the calling thread runs the
 * primary's share). A phase is published under the mutex with its work and
 * a new phase number; each thread runs its replica's entry and counts
 * itself out; the caller waits until the count is 0, so that a phase's work
 * (on the caller's stack) is never read after rep_phase returns. */
typedef struct rep_thread {
    struct rep_pool *pool;
    int r;                          /* the replica it runs */
    pthread_t th;
} rep_thread;

typedef struct rep_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long phase;            /* bumped for every phase */
    int running;                    /* threads still in the current phase */
    bool quit;
    rep_work *work;                 /* the current phase's, one per replica */
    int nthreads;                   /* started: th[1..nthreads] */
    rep_thread th[KILN_MAX_DEVICES];
} rep_pool;

static void *rep_thread_main(void *arg)
{
    rep_thread *t = arg;
    rep_pool *p = t->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->phase == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->phase;
        rep_work *w = &p->work[t->r];
        pthread_mutex_unlock(&p->mu);
        rep_run(w);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Stops and joins the threads and frees the pool. NULL is a no-op. */
static void pool_stop(rep_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int r = 1; r <= p->nthreads; r++)
        pthread_join(p->th[r].th, NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A thread for each of the nrep - 1 replicas. Returns 0, or -1 with err set
 * (n->pool then holds what was started, for net_dp_free to stop). */
static int pool_start(net *n, char *err, size_t errlen)
{
    rep_pool *p = calloc(1, sizeof *p);
    if (!p)
        return set_err(err, errlen, "out of memory");
    bool mu = pthread_mutex_init(&p->mu, NULL) == 0;
    bool go = mu && pthread_cond_init(&p->go, NULL) == 0;
    if (!go || pthread_cond_init(&p->done, NULL) != 0) {
        if (go)
            pthread_cond_destroy(&p->go);
        if (mu)
            pthread_mutex_destroy(&p->mu);
        free(p);
        return set_err(err, errlen, "could not make the replicas' lock");
    }
    n->pool = p;
    for (int r = 1; r < n->nrep; r++) {
        p->th[r] = (rep_thread){ .pool = p, .r = r };
        if (pthread_create(&p->th[r].th, NULL, rep_thread_main, &p->th[r]) != 0)
            return set_err(err, errlen, "could not start a thread for replica %d", r);
        p->nthreads = r;
    }
    return 0;
}

/* Runs one phase on every replica at once, one thread each (the calling
 * thread runs the primary's). Returns 0, or -1 with the first failure's
 * message (a replica's own failure, before the aborts it caused). */
static int rep_phase(net *n, rep_work *w, char *err, size_t errlen)
{
    rep_pool *p = n->pool;
    pthread_mutex_lock(&p->mu);
    p->work = w;
    p->running = n->nrep - 1;
    p->phase++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    rep_run(&w[0]);
    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->done, &p->mu);
    p->work = NULL;
    pthread_mutex_unlock(&p->mu);
    bind(n);
    /* a replica's own failure, not the abandoned collectives it caused */
    int first = -1;
    for (int r = 0; r < n->nrep; r++)
        if (w[r].rc < 0 && (first < 0 || (strstr(w[first].err, "abandoned") &&
                                          !strstr(w[r].err, "abandoned"))))
            first = r;
    if (first < 0)
        return 0;
    n->broken = true;
    if (first == 0)
        return set_err(err, errlen, "%s", w[first].err);
    return set_err(err, errlen, "replica %d: %s", first, w[first].err);
}

/* A data-parallel step: the batch split over the replicas in order. */
int net_dp_train_step(net *n, const float *x, const int32_t *labels, int count, float lr,
                      net_stats *out, char *err, size_t errlen)
{
    rep_work w[KILN_MAX_DEVICES];
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    const float scale = n->scaler.scale;
    int done = 0, active = 0;
    if (n->broken)
        return set_err(err, errlen, "an earlier step failed on one of the devices; the "
                       "replicas may differ, so training cannot go on (resume from the last "
                       "checkpoint)");
    memset(w, 0, sizeof w[0] * (size_t)n->nrep);
    for (int r = 0; r < n->nrep; r++) {
        net *m = n->rep[r];
        int part = net_dp_share(count, n->nrep, r);
        /* the primary's counters are the ones checkpoints restore */
        m->steps = n->steps;
        m->scaler = n->scaler;
        optim_set_steps(m->opt, optim_steps(n->opt));
        w[r] = (rep_work){ .n = m, .phase = REP_GRADS, .x = x + (size_t)done * in_size,
                           .labels = labels + done, .count = part, .total = count, .lr = lr };
        done += part;
        active += part > 0;
    }
    if (rep_phase(n, w, err, errlen) < 0)
        return -1;
    double loss_sum = 0;
    int correct = 0;
    for (int r = 0; r < n->nrep; r++) {
        loss_sum += w[r].loss_sum;
        correct += w[r].correct;
    }
    for (int r = 0; r < n->nrep; r++) {
        w[r].phase = REP_UPDATE;
        w[r].loss_finite = isfinite(loss_sum);
        w[r].mean_loss = loss_sum / count;
        w[r].active = active;
    }
    if (rep_phase(n, w, err, errlen) < 0)
        return -1;
    if (out)
        *out = (net_stats){ .loss = loss_sum / count, .correct = correct, .count = count,
                            .loss_scale = scale, .skipped = w[0].skipped };
    return 0;
}

/* Evaluation on replicas: the images split over them as a training batch
 * is, each replica's share in chunks of its batch. No collectives, so a
 * failure leaves the replicas as they were (not broken). */
int net_dp_eval(net *n, const float *x, const int32_t *labels, int count, double *total,
                int *correct, char *err, size_t errlen)
{
    rep_work w[KILN_MAX_DEVICES];
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    int done = 0;
    memset(w, 0, sizeof w[0] * (size_t)n->nrep);
    for (int r = 0; r < n->nrep; r++) {
        int part = net_dp_share(count, n->nrep, r);
        w[r] = (rep_work){ .n = n->rep[r], .phase = REP_EVAL, .x = x + (size_t)done * in_size,
                           .labels = labels + done, .count = part };
        done += part;
    }
    bool broken = n->broken;
    int rc = rep_phase(n, w, err, errlen);
    n->broken = broken;
    *total = 0;
    *correct = 0;
    for (int r = 0; r < n->nrep; r++) {
        *total += w[r].loss_sum;
        *correct += w[r].correct;
    }
    return rc;
}

/* Data parallelism: count floats of src (on the primary) into dst on
 * replica m, through the host. */
static int copy_to_replica(net *n, const be_buf *src, net *m, be_buf *dst, size_t count,
                           float *host, char *err, size_t errlen)
{
    bind(n);
    if (n->be->buf_download(n->ctx, src, 0, host, count * sizeof *host, err, errlen) < 0)
        return -1;
    bind(m);
    return m->be->buf_upload(m->ctx, dst, 0, host, count * sizeof *host, err, errlen);
}

/* The primary's parameters, statistics and optimizer state copied to every
 * replica (after a checkpoint or a file was loaded into the primary). */
static int broadcast(net *n, char *err, size_t errlen)
{
    size_t most = 0, nos = optim_state_tensors(n->opt, NULL, 0);
    optim_state *os = calloc(nos ? nos : 1, sizeof *os), *ms = calloc(nos ? nos : 1, sizeof *ms);
    float *host = NULL;
    int rc = -1;
    if (!os || !ms)
        goto oom;
    optim_state_tensors(n->opt, os, nos);
    for (int i = 0; i < net_saved_count(n); i++)
        most = net_saved_at(n, i)->count > most ? net_saved_at(n, i)->count : most;
    for (size_t i = 0; i < nos; i++)
        most = os[i].count > most ? os[i].count : most;
    if (!(host = malloc((most ? most : 1) * sizeof *host)))
        goto oom;
    for (int r = 1; r < n->nrep; r++) {
        net *m = n->rep[r];
        if (optim_state_tensors(m->opt, ms, nos) != nos) {
            set_err(err, errlen, "replica %d has another optimizer state", r);
            goto out;
        }
        for (int i = 0; i < net_saved_count(n); i++)
            if (copy_to_replica(n, net_saved_at(n, i)->w, m, net_saved_at(m, i)->w,
                                net_saved_at(n, i)->count, host, err, errlen) < 0)
                goto out;
        for (size_t i = 0; i < nos; i++)
            if (copy_to_replica(n, os[i].buf, m, ms[i].buf, os[i].count, host, err, errlen) < 0)
                goto out;
        bind(m);
        if (net_refresh_copies(m, err, errlen) < 0)
            goto out;
    }
    rc = 0;
    goto out;
oom:
    set_err(err, errlen, "out of memory");
out:
    bind(n);
    free(host);
    free(os);
    free(ms);
    return rc;
}

int net_params_changed(net *n, char *err, size_t errlen)
{
    bind(n);
    if (net_refresh_copies(n, err, errlen) < 0 || (n->rep && broadcast(n, err, errlen) < 0))
        return -1;
    n->broken = false;          /* the replicas agree again */
    return 0;
}

/* ---- making and freeing ----------------------------------------------------- */

net *net_dp_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                   const backend *be, const net_devices *d, const net_solver *solver,
                   uint64_t seed, char *err, size_t errlen)
{
    const int nd = d->count;
    if (!be->comm_create) {
        set_err(err, errlen, "backend \"%s\" cannot train on several devices", be->name);
        return NULL;
    }
    if (max_batch < nd) {
        set_err(err, errlen, "batch size %d is smaller than the %d devices it is split across",
                max_batch, nd);
        return NULL;
    }
    /* Each replica takes its share of the global batch. */
    int per = (max_batch + nd - 1) / nd;
    net *n = net_build(spec, in, classes, per, be, d->ids[0], 0, nd, solver, seed, err, errlen);
    if (!n)
        return NULL;
    be_ctx *ctxs[KILN_MAX_DEVICES];
    if (!(n->rep = calloc((size_t)nd, sizeof *n->rep))) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    n->rep[0] = n;
    n->nrep = nd;
    n->global_batch = max_batch;
    ctxs[0] = n->ctx;
    net_dp_plan_buckets(n);
    for (int r = 1; r < nd; r++) {
        char where[48];
        if (!(n->rep[r] = net_build(spec, in, classes, per, be, d->ids[r], r, nd, solver, seed,
                                    err, errlen))) {
            snprintf(where, sizeof where, "%s device %d", be->name, d->ids[r]);
            set_err_prefix(err, errlen, where);
            goto fail;
        }
        net_dp_plan_buckets(n->rep[r]);
        ctxs[r] = n->rep[r]->ctx;
    }
    if (be->comm_create(ctxs, nd, &n->comm, err, errlen) < 0)
        goto fail;
    for (int r = 1; r < nd; r++)
        n->rep[r]->comm = n->comm;
    if (pool_start(n, err, errlen) < 0)
        goto fail;
    bind(n);
    return n;
fail:
    net_free(n);
    return NULL;
}

void net_dp_free(net *n)
{
    pool_stop(n->pool);                 /* before the replicas its threads run */
    n->pool = NULL;
    if (n->comm)
        n->be->comm_free(n->comm);
    n->comm = NULL;
    for (int r = 1; r < n->nrep; r++)
        net_free(n->rep[r]);
    free(n->rep);
    n->rep = NULL;
    bind(n);
}
