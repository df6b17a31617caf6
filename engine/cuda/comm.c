/* engine/cuda/comm.c: data parallelism across GPUs with NCCL
 * (engine/backend.h, the data-parallelism slots; engine/net_dp.c runs one
 * replica per GPU, each from its own host thread).
 *
 * One NCCL communicator per rank, made together by ncclCommInitAll from the
 * replicas' GPUs. Each rank has a stream of its own for its allreduces: an
 * allreduce waits (an event, not the host) for what the compute stream has
 * queued so far, that is the backward pass up to the last gradient of its
 * bucket, and then runs beside the rest of the backward pass; allreduce_wait
 * makes the compute stream wait for the last one queued before the
 * optimizer reads the gradients. A bucket's tensors go in one NCCL group,
 * which NCCL fuses into one operation.
 *
 * Between processes (cuda_comm_create_world, one GPU per process): rank 0
 * makes NCCL's unique id and writes it to <world dir>/nccl-id (a temporary
 * name, then rename, so that no rank reads half of it); the others wait for
 * the file up to the world's timeout and read it; every rank then joins with
 * ncclCommInitRank. The communicator is non-blocking (NCCL's config
 * blocking = 0), so that no host wait is unbounded: where the host waits
 * for NCCL (allreduce_wait, comm_gather) it polls the stream and
 * ncclCommGetAsyncError, and after the world's timeout, or at once on an
 * error NCCL reports (a peer's process gone), it aborts the communicator
 * and fails. */
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/cuda/internal.h"
#include "base/err.h"

struct be_comm {
    bool world;                     /* between processes: n 1, rank world_rank of world_size */
    int world_rank, world_size, timeout_ms;
    void *gather;                   /* world: device scratch for comm_gather */
    size_t gather_bytes;
    int n;
    ncclComm_t *comm;               /* n */
    cudaStream_t *stream;           /* n: each rank's allreduce stream */
    cudaEvent_t *ready, *done;      /* n each */
};

static int nccl_err(ncclResult_t r, const char *what, char *err, size_t errlen)
{
    return set_err(err, errlen, "cuda backend: NCCL %s: %s", what, ncclGetErrorString(r));
}

static int world_sync(be_comm *c, char *err, size_t errlen);
static int world_enqueued(be_comm *c, ncclResult_t r, const char *what, char *err,
                          size_t errlen);

void cuda_comm_free(be_comm *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        if (c->comm && c->comm[i])
            ncclCommDestroy(c->comm[i]);
        if (c->stream && c->stream[i])
            cudaStreamDestroy(c->stream[i]);
        if (c->ready && c->ready[i])
            cudaEventDestroy(c->ready[i]);
        if (c->done && c->done[i])
            cudaEventDestroy(c->done[i]);
    }
    if (c->gather)
        cudaFree(c->gather);
    free(c->comm);
    free(c->stream);
    free(c->ready);
    free(c->done);
    free(c);
}

int cuda_comm_create(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen)
{
    *out = NULL;
    be_comm *c = calloc(1, sizeof *c);
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    int rc = -1;
    if (!c || !devs || !(c->comm = calloc((size_t)n, sizeof *c->comm)) ||
        !(c->stream = calloc((size_t)n, sizeof *c->stream)) ||
        !(c->ready = calloc((size_t)n, sizeof *c->ready)) ||
        !(c->done = calloc((size_t)n, sizeof *c->done))) {
        set_err(err, errlen, "cuda backend: out of memory");
        goto out;
    }
    c->n = n;
    for (int i = 0; i < n; i++) {
        devs[i] = ctxs[i]->device;
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i]) {
                set_err(err, errlen, "cuda backend: GPU %d is listed twice (one replica per GPU)",
                        devs[i]);
                goto out;
            }
    }
    ncclResult_t r = ncclCommInitAll(c->comm, n, devs);
    if (r != ncclSuccess) {
        nccl_err(r, "setting up the GPUs' communicator", err, errlen);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        cudaError_t e;
        if ((e = cudaSetDevice(devs[i])) != cudaSuccess ||
            (e = cudaStreamCreateWithFlags(&c->stream[i], cudaStreamNonBlocking)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&c->ready[i], cudaEventDisableTiming)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming)) != cudaSuccess) {
            cu_err(e, "making the allreduce streams", err, errlen);
            goto out;
        }
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    cuda_comm_free(c);
    free(devs);
    return rc;
}

/* Called by the thread of a rank that failed, while the others may be
 * blocked on their GPUs behind collectives that will never complete: aborting
 * every rank's communicator stops those kernels, so the others' waits return
 * (with an error) and engine/net_dp.c can collect their threads and fail the step.
 * A rank still inside ncclAllReduce's enqueue at that moment races with the
 * abort; NCCL's non-blocking communicators (ncclCommGetAsyncError) would close
 * that window and are the next step if it is ever seen on hardware. */
void cuda_comm_abort(be_comm *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->comm[i]) {
            ncclCommAbort(c->comm[i]);
            c->comm[i] = NULL;
        }
}

/* The index of rank in c's arrays: itself, or 0 for this process's rank of a world. */
static int local_index(const be_comm *c, int rank)
{
    if (c->world)
        return rank == c->world_rank ? 0 : -1;
    return rank >= 0 && rank < c->n ? rank : -1;
}

int cuda_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                   int k, char *err, size_t errlen)
{
    rank = local_index(c, rank);
    if (rank < 0 || !c->comm[rank])
        return set_err(err, errlen, "cuda backend: the allreduce was abandoned (another "
                       "replica failed)");
    CU_TRY(cudaEventRecord(c->ready[rank], ctx->stream), "ordering an allreduce");
    CU_TRY(cudaStreamWaitEvent(c->stream[rank], c->ready[rank], 0), "ordering an allreduce");
    ncclResult_t r = ncclGroupStart();
    for (int j = 0; j < k && r == ncclSuccess; j++)
        r = ncclAllReduce(bufs[j]->p, bufs[j]->p, counts[j], ncclFloat, ncclSum, c->comm[rank],
                          c->stream[rank]);
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess)
        r = r2;
    if (c->world)                           /* non-blocking: queued, world_sync waits */
        return world_enqueued(c, r, "allreduce of the gradients", err, errlen);
    if (r != ncclSuccess)
        return nccl_err(r, "allreduce of the gradients", err, errlen);
    return 0;
}

int cuda_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen)
{
    int i = local_index(c, rank);
    if (i < 0)
        return set_err(err, errlen, "cuda backend: rank %d of a communicator of %d", rank, c->n);
    if (c->world && world_sync(c, err, errlen) < 0)     /* bounded: the host waits here */
        return -1;
    CU_TRY(cudaEventRecord(c->done[i], c->stream[i]), "waiting for the allreduce");
    CU_TRY(cudaStreamWaitEvent(ctx->stream, c->done[i], 0), "waiting for the allreduce");
    return 0;
}

/* ---- between processes ---------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* A world communicator's operations queued on its stream finished: polls the
 * stream and NCCL's error state until they have, NCCL reports an error, or
 * the timeout passes (then the communicator is aborted). 0, or -1 with err. */
static int world_sync(be_comm *c, char *err, size_t errlen)
{
    double deadline = now_ms() + c->timeout_ms;
    for (;;) {
        if (!c->comm[0])
            return set_err(err, errlen, "cuda backend: the communicator was abandoned (a rank "
                           "failed)");
        cudaError_t e = cudaStreamQuery(c->stream[0]);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cu_err(e, "waiting for the other processes' GPUs", err, errlen);
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm[0], &async);
        if (r == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            cuda_comm_abort(c);
            return set_err(err, errlen, "cuda backend: rank %d of %d: the allreduce failed "
                           "(another rank failed or is gone): NCCL: %s", c->world_rank,
                           c->world_size, ncclGetErrorString(async));
        }
        if (now_ms() > deadline) {
            cuda_comm_abort(c);
            return set_err(err, errlen, "cuda backend: rank %d of %d: the allreduce failed "
                           "(another rank failed or is gone): no progress in %d s",
                           c->world_rank, c->world_size, c->timeout_ms / 1000);
        }
        usleep(200);
    }
}

/* After a call on a non-blocking communicator that returned r: waits (up to
 * the timeout) until NCCL has queued it, which it must before the next call.
 * 0, or -1 with err set. */
static int world_enqueued(be_comm *c, ncclResult_t r, const char *what, char *err,
                          size_t errlen)
{
    double deadline = now_ms() + c->timeout_ms;
    while (r == ncclInProgress) {
        ncclResult_t state = ncclSuccess;
        r = ncclCommGetAsyncError(c->comm[0], &state);
        if (r == ncclSuccess)
            r = state;
        if (r == ncclInProgress && now_ms() > deadline)
            break;
        if (r == ncclInProgress)
            usleep(100);
    }
    if (r == ncclSuccess)
        return 0;
    cuda_comm_abort(c);
    if (r == ncclInProgress)
        return set_err(err, errlen, "cuda backend: rank %d of %d: NCCL %s was not queued in %d "
                       "s (another rank failed or is gone)", c->world_rank, c->world_size, what,
                       c->timeout_ms / 1000);
    return set_err(err, errlen, "cuda backend: rank %d of %d: NCCL %s: %s (another rank failed "
                   "or is gone)", c->world_rank, c->world_size, what, ncclGetErrorString(r));
}

/* The unique id: rank 0 makes it and writes dir/nccl-id (temporary name,
 * rename); the others wait for the file (up to timeout_ms) and read it. */
static int share_id(const net_world *w, int timeout_ms, ncclUniqueId *id, char *err,
                    size_t errlen)
{
    char path[NET_WORLD_DIR_MAX + 16], tmp[NET_WORLD_DIR_MAX + 48];
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST)
        return set_err(err, errlen, "cuda backend: cannot make the rendezvous folder %s: %s",
                       w->dir, strerror(errno));
    snprintf(path, sizeof path, "%s/nccl-id", w->dir);
    if (w->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            return nccl_err(r, "making the unique id", err, errlen);
        snprintf(tmp, sizeof tmp, "%s/nccl-id.tmp.%ld", w->dir, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        bool ok = f && fwrite(id, sizeof *id, 1, f) == 1;
        ok = f && fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok || rename(tmp, path) != 0) {
            unlink(tmp);
            return set_err(err, errlen, "cuda backend: cannot write %s: %s", path,
                           strerror(errno));
        }
        return 0;
    }
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1)
                return 0;
            return set_err(err, errlen, "cuda backend: %s is not an NCCL id", path);
        }
        if (now_ms() > deadline)
            return set_err(err, errlen, "cuda backend: rank %d of %d: rank 0 wrote no %s within "
                           "%d s", w->rank, w->size, path, timeout_ms / 1000);
        usleep(20 * 1000);
    }
}

int cuda_comm_create_world(be_ctx *ctx, const net_world *w, be_comm **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    int timeout = w->timeout_ms > 0 ? w->timeout_ms : NET_WORLD_TIMEOUT_MS;
    ncclUniqueId id;
    if (share_id(w, timeout, &id, err, errlen) < 0)
        return -1;
    be_comm *c = calloc(1, sizeof *c);
    int rc = -1;
    if (!c || !(c->comm = calloc(1, sizeof *c->comm)) ||
        !(c->stream = calloc(1, sizeof *c->stream)) || !(c->ready = calloc(1, sizeof *c->ready)) ||
        !(c->done = calloc(1, sizeof *c->done))) {
        set_err(err, errlen, "cuda backend: out of memory");
        goto out;
    }
    c->n = 1;
    c->world = true;
    c->world_rank = w->rank;
    c->world_size = w->size;
    c->timeout_ms = timeout;
    cudaError_t e;
    if ((e = cudaSetDevice(ctx->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream[0], cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->ready[0], cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->done[0], cudaEventDisableTiming)) != cudaSuccess) {
        cu_err(e, "making the allreduce stream", err, errlen);
        goto out;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->comm[0], w->size, id, w->rank, &config);
    double deadline = now_ms() + timeout;
    ncclResult_t state = r;
    while (r == ncclInProgress || (r == ncclSuccess && state == ncclInProgress)) {
        r = ncclCommGetAsyncError(c->comm[0], &state);
        if (r == ncclSuccess && state == ncclSuccess)
            break;
        if (now_ms() > deadline) {
            set_err(err, errlen, "cuda backend: rank %d of %d could not connect to the others "
                    "within %d s", w->rank, w->size, timeout / 1000);
            goto out;
        }
        usleep(1000);
    }
    if (r == ncclSuccess && state != ncclSuccess)
        r = state;
    if (r != ncclSuccess) {
        nccl_err(r, "joining the other processes (ncclCommInitRank)", err, errlen);
        goto out;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    if (c && c->comm && c->comm[0]) {
        ncclCommAbort(c->comm[0]);
        c->comm[0] = NULL;
    }
    cuda_comm_free(c);
    return rc;
}

int cuda_comm_gather(be_ctx *ctx, be_comm *c, const void *in, size_t bytes, void *out,
                     char *err, size_t errlen)
{
    if (!c->world)
        return set_err(err, errlen, "cuda backend: a gather needs a communicator between "
                       "processes");
    if (!c->comm[0])
        return set_err(err, errlen, "cuda backend: the communicator was abandoned (a rank "
                       "failed)");
    size_t need = bytes * (size_t)(c->world_size + 1);
    if (need > c->gather_bytes) {
        if (c->gather)
            cudaFree(c->gather);
        c->gather = NULL;
        c->gather_bytes = 0;
        CU_TRY(cudaMalloc(&c->gather, need), "allocating the gather's buffer");
        c->gather_bytes = need;
    }
    char *dev = c->gather;
    /* the host's bytes after what the compute stream queued, gathered in rank order */
    CU_TRY(cudaMemcpyAsync(dev, in, bytes, cudaMemcpyHostToDevice, ctx->stream), "a gather");
    CU_TRY(cudaEventRecord(c->ready[0], ctx->stream), "a gather");
    CU_TRY(cudaStreamWaitEvent(c->stream[0], c->ready[0], 0), "a gather");
    ncclResult_t r = ncclAllGather(dev, dev + bytes, bytes, ncclChar, c->comm[0], c->stream[0]);
    if (world_enqueued(c, r, "gather", err, errlen) < 0 || world_sync(c, err, errlen) < 0)
        return -1;
    CU_TRY(cudaMemcpy(out, dev + bytes, bytes * (size_t)c->world_size, cudaMemcpyDeviceToHost),
           "a gather");
    return 0;
}

void cuda_ctx_bind(be_ctx *ctx)
{
    cudaSetDevice(ctx->device);
}
