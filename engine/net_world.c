/* engine/net_world.c: data parallelism across processes (engine/net.h,
 * net_create with a net_world of several ranks).
 *
 * Each process is one rank with one device and one whole net, built from
 * the same seed as every other rank's (so their parameters start equal).
 * Every rank is handed the whole global batch (the same data order: the
 * same seed) and trains on its rows of it, the same rows that replica r of
 * engine/net_dp.c takes (net_dp_share: the first count % size ranks take
 * one image more); the rest is the in-process step: the gradients summed in
 * buckets during the backward pass, the batch-norm statistics averaged over
 * the ranks that had images, and the update (with mixed precision's
 * overflow decision) made by every rank from the same summed bits. What the
 * threads of net_dp.c add up in memory (the ranks' loss sums, hits, and
 * which ranks had images) is gathered here through the communicator
 * (backend comm_gather) and added in rank order, so that a run of W
 * processes reports and does what W replicas in one process do, bit for bit
 * on the CPU.
 *
 * Every rank must make the same calls in the same order: net_train_step,
 * net_eval and net_any are collectives; net_predict, net_save and the rest
 * are not. A rank that fails closes its communicator (comm_abort), so that
 * the others fail at their next collective instead of waiting for their
 * timeout; the net is then broken (no more training steps).
 */
#include "engine/net_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

net *net_world_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                      const backend *be, const net_devices *d, const net_solver *solver,
                      uint64_t seed, char *err, size_t errlen)
{
    const net_world *w = &d->world;
    if (d->count != 1) {
        set_err(err, errlen, "a rank of a multi-process net trains on one device, not %d",
                d->count);
        return NULL;
    }
    if (w->rank < 0 || w->rank >= w->size) {
        set_err(err, errlen, "rank %d of %d processes", w->rank, w->size);
        return NULL;
    }
    if (!be->comm_create_world || !be->comm_gather) {
        set_err(err, errlen, "backend \"%s\" cannot train across processes", be->name);
        return NULL;
    }
    if (max_batch < w->size) {
        set_err(err, errlen, "batch size %d is smaller than the %d processes it is split across",
                max_batch, w->size);
        return NULL;
    }
    /* Each rank takes its share of the global batch (the first ones one more). */
    int per = (max_batch + w->size - 1) / w->size;
    net *n = net_build(spec, in, classes, per, be, d->ids[0], w->rank, w->size, solver, seed,
                       err, errlen);
    if (!n)
        return NULL;
    n->world = true;
    n->global_batch = max_batch;
    net_dp_plan_buckets(n);
    if (be->comm_create_world(n->ctx, w, &n->comm, err, errlen) < 0) {
        net_free(n);
        return NULL;
    }
    return n;
}

void net_world_free(net *n)
{
    if (n->comm)
        n->be->comm_free(n->comm);
    n->comm = NULL;
}

/* What a rank adds to a step's or an evaluation's totals, gathered from
 * every rank (doubles: the hits and flags are small integers, exact). */
typedef struct world_part {
    double loss_sum;
    double correct;
    double active;          /* a training step: the rank had images */
    double ok;              /* 0: this rank failed (its message is its own) */
} world_part;

/* Gathers mine from every rank into the totals (added in rank order, as
 * net_dp.c adds its replicas'). Returns 0; -1 with err set when the gather
 * failed or another rank reported a failure. */
static int gather(net *n, const world_part *mine, world_part *sum, char *err, size_t errlen)
{
    const int W = n->nrep;
    *sum = (world_part){ .ok = 1 };
    world_part *all = calloc((size_t)W, sizeof *all);
    if (!all)
        return set_err(err, errlen, "out of memory");
    int rc = n->be->comm_gather(n->ctx, n->comm, mine, sizeof *mine, all, err, errlen);
    for (int q = 0; q < W && rc == 0; q++) {
        if (!all[q].ok) {
            rc = set_err(err, errlen, "rank %d of %d failed (its log says why)", q, W);
            break;
        }
        sum->loss_sum += all[q].loss_sum;
        sum->correct += all[q].correct;
        sum->active += all[q].active;
    }
    free(all);
    return rc;
}

/* After a failure of this rank or of the collectives: the others are not
 * left waiting, and no further step is made. Returns -1. */
static int fail(net *n)
{
    n->broken = true;
    if (n->comm)
        n->be->comm_abort(n->comm);
    return -1;
}

int net_world_train_step(net *n, const float *x, const int32_t *labels, int count, float lr,
                         net_stats *out, char *err, size_t errlen)
{
    const int W = n->nrep, r = n->rank;
    const float scale = n->scaler.scale;
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    if (n->broken)
        return set_err(err, errlen, "an earlier step failed on one of the processes; training "
                       "cannot go on (resume from the last checkpoint)");
    int part = net_dp_share(count, W, r), at = net_dp_offset(count, W, r);
    world_part mine = { .active = part > 0, .ok = 1 }, sum;
    int correct = 0;
    if (net_step_grads(n, x + (size_t)at * in_size, labels + at, part, count, &mine.loss_sum,
                       &correct, err, errlen) < 0)
        return fail(n);
    mine.correct = correct;
    if (gather(n, &mine, &sum, err, errlen) < 0)
        return fail(n);
    bool skipped = false;
    if (net_step_update(n, lr, isfinite(sum.loss_sum), sum.loss_sum / count, (int)sum.active,
                        &skipped, err, errlen) < 0)
        return fail(n);
    if (out)
        *out = (net_stats){ .loss = sum.loss_sum / count, .correct = (int)sum.correct,
                            .count = count, .loss_scale = scale, .skipped = skipped };
    return 0;
}

int net_world_eval(net *n, const float *x, const int32_t *labels, int count, double *total,
                   int *correct, char *err, size_t errlen)
{
    const int W = n->nrep, r = n->rank;
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    int part = net_dp_share(count, W, r), at = net_dp_offset(count, W, r);
    world_part mine = { .ok = 1 }, sum;
    int hits = 0;
    char own[512] = "";
    if (part > 0 && net_eval_chunks(n, x + (size_t)at * in_size, labels + at, part,
                                    &mine.loss_sum, &hits, own, sizeof own) < 0)
        mine = (world_part){ .ok = 0 };
    mine.correct = hits;
    /* the others learn of a failure here through the gather, and stop with it */
    if (gather(n, &mine, &sum, err, errlen) < 0 && mine.ok)
        return fail(n);
    if (!mine.ok)
        return set_err(err, errlen, "%s", own);
    *total = sum.loss_sum;
    *correct = (int)sum.correct;
    return 0;
}

int net_any(net *n, bool mine, bool *any, char *err, size_t errlen)
{
    *any = mine;
    if (!n->world)
        return 0;
    world_part p = { .active = mine, .ok = 1 }, sum;
    if (gather(n, &p, &sum, err, errlen) < 0)
        return fail(n);
    *any = sum.active > 0;
    return 0;
}

int net_world_rank(const net *n)
{
    return n->world ? n->rank : 0;
}
