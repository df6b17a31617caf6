/* engine/cpu/comm.c: data parallelism between replicas on the CPU.
 *
 * The CPU gains nothing from several replicas of a net (oneDNN already uses
 * every core for one); this communicator exists so that the data-parallel
 * code of engine/net_dp.c (the batch split, the gradient buckets, the averaged
 * batch-norm statistics, the shared overflow decision) runs and is tested on
 * machines without GPUs, against the same net trained whole. It is the
 * contract NCCL keeps on GPUs: every rank calls the same collectives in the
 * same order from its own thread, and gets the same bits.
 *
 * An allreduce is a reduce-scatter and an all-gather in one: the ranks meet
 * at a barrier with their buffers posted, rank r adds up slice r of every
 * rank's buffer (in rank order, so the sum does not depend on timing) and
 * writes it back into all of them, and they meet again before anyone
 * touches the buffers. The barrier can be aborted (comm_abort), so that a
 * rank that failed does not leave the others waiting forever.
 */
#include <pthread.h>
#include <stdlib.h>

#include "engine/cpu/cpu.h"
#include "engine/cpu/comm_gloo.h"   /* gloo_comm_create, gloo_comm_sum, gloo_comm_allgather */
#include "base/err.h"

struct be_comm {
    gloo_comm *world;               /* between processes (then none of the below is used);
                                     * NULL after an abort */
    bool world_made;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long gen;              /* barriers passed */
    int arrived;
    bool aborted;
    float **slot;                   /* n: each rank's buffer of the current allreduce */
};

int cpu_comm_create(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen)
{
    (void)ctxs;
    *out = NULL;
    if (n < 1)
        return set_err(err, errlen, "cpu backend: a communicator needs at least one rank");
    be_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->slot = calloc((size_t)n, sizeof *c->slot))) {
        free(c);
        return set_err(err, errlen, "cpu backend: out of memory");
    }
    c->n = n;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return 0;
}

int cpu_comm_create_world(be_ctx *ctx, const net_world *w, be_comm **out, char *err,
                          size_t errlen)
{
    (void)ctx;
    *out = NULL;
    be_comm *c = calloc(1, sizeof *c);
    if (!c)
        return set_err(err, errlen, "cpu backend: out of memory");
    if (gloo_comm_create(w->rank, w->size, w->dir, w->host,
                         w->timeout_ms > 0 ? w->timeout_ms : NET_WORLD_TIMEOUT_MS, &c->world,
                         err, errlen) < 0) {
        free(c);
        return -1;
    }
    c->world_made = true;
    c->n = w->size;
    *out = c;
    return 0;
}

int cpu_comm_gather(be_ctx *ctx, be_comm *c, const void *in, size_t bytes, void *out,
                    char *err, size_t errlen)
{
    (void)ctx;
    if (!c->world_made)
        return set_err(err, errlen, "cpu backend: a gather needs a communicator between "
                       "processes");
    if (!c->world)
        return set_err(err, errlen, "cpu backend: the communicator was abandoned (a rank "
                       "failed)");
    return gloo_comm_allgather(c->world, in, bytes, out, err, errlen);
}

void cpu_comm_free(be_comm *c)
{
    if (!c)
        return;
    if (c->world_made) {
        gloo_comm_free(c->world);
        free(c);
        return;
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->slot);
    free(c);
}

/* Between processes: the connections closed, so that the other ranks' next
 * collective fails at once instead of at its timeout. */
void cpu_comm_abort(be_comm *c)
{
    if (c->world_made) {
        gloo_comm_free(c->world);
        c->world = NULL;
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->aborted = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until every rank has arrived; 0, or -1 when the communicator was
 * aborted. */
static int barrier(be_comm *c)
{
    pthread_mutex_lock(&c->mu);
    unsigned long gen = c->gen;
    if (!c->aborted && ++c->arrived == c->n) {
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    }
    while (!c->aborted && c->gen == gen)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->aborted ? -1 : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cpu_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                  int k, char *err, size_t errlen)
{
    (void)ctx;
    if (rank < 0 || rank >= c->n)
        return set_err(err, errlen, "cpu backend: rank %d of a communicator of %d", rank, c->n);
    if (c->world_made) {
        for (int j = 0; j < k; j++) {
            if (counts[j] * sizeof(float) > bufs[j]->bytes)
                return set_err(err, errlen, "cpu backend: allreduce of %zu floats in a buffer "
                               "of %zu bytes", counts[j], bufs[j]->bytes);
            if (!c->world)
                return set_err(err, errlen, "cpu backend: the allreduce was abandoned (a rank "
                               "failed)");
            if (gloo_comm_sum(c->world, bufs[j]->p, counts[j], err, errlen) < 0)
                return -1;
        }
        return 0;
    }
    for (int j = 0; j < k; j++) {
        size_t count = counts[j];
        if (count * sizeof(float) > bufs[j]->bytes)
            return set_err(err, errlen, "cpu backend: allreduce of %zu floats in a buffer of "
                           "%zu bytes", count, bufs[j]->bytes);
        c->slot[rank] = bufs[j]->p;
        if (barrier(c) < 0)
            goto aborted;
        size_t lo = count * (size_t)rank / (size_t)c->n;
        size_t hi = count * (size_t)(rank + 1) / (size_t)c->n;
        for (size_t e = lo; e < hi; e++) {
            float s = c->slot[0][e];
            for (int q = 1; q < c->n; q++)
                s += c->slot[q][e];
            for (int q = 0; q < c->n; q++)
                c->slot[q][e] = s;
        }
        if (barrier(c) < 0)
            goto aborted;
    }
    return 0;
aborted:
    return set_err(err, errlen, "cpu backend: the allreduce was abandoned (another replica "
                   "failed)");
}

int cpu_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen)
{
    (void)ctx, (void)c, (void)rank, (void)err, (void)errlen;
    return 0;                       /* the allreduce above has finished when it returns */
}
