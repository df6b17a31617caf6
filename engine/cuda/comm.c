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
 * which NCCL fuses into one operation. */
#include <nccl.h>
#include <stdlib.h>

#include "engine/cuda/internal.h"
#include "base/err.h"

struct be_comm {
    int n;
    ncclComm_t *comm;               /* n */
    cudaStream_t *stream;           /* n: each rank's allreduce stream */
    cudaEvent_t *ready, *done;      /* n each */
};

static int nccl_err(ncclResult_t r, const char *what, char *err, size_t errlen)
{
    return set_err(err, errlen, "cuda backend: NCCL %s: %s", what, ncclGetErrorString(r));
}

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

int cuda_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                   int k, char *err, size_t errlen)
{
    if (rank < 0 || rank >= c->n || !c->comm[rank])
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
    if (r != ncclSuccess)
        return nccl_err(r, "allreduce of the gradients", err, errlen);
    return 0;
}

int cuda_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen)
{
    if (rank < 0 || rank >= c->n)
        return set_err(err, errlen, "cuda backend: rank %d of a communicator of %d", rank, c->n);
    CU_TRY(cudaEventRecord(c->done[rank], c->stream[rank]), "waiting for the allreduce");
    CU_TRY(cudaStreamWaitEvent(ctx->stream, c->done[rank], 0), "waiting for the allreduce");
    return 0;
}

void cuda_ctx_bind(be_ctx *ctx)
{
    cudaSetDevice(ctx->device);
}
