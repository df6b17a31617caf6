/* engine/cuda/cuda_comm.h: the CUDA backend's data-parallel slots (comm.c),
 * for the operations table in cuda.c. */
#ifndef KILN_ENGINE_CUDA_CUDA_COMM_H
#define KILN_ENGINE_CUDA_CUDA_COMM_H

#include "engine/cuda/internal.h"

void cuda_ctx_bind(be_ctx *ctx);
int cuda_comm_create(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen);
void cuda_comm_free(be_comm *c);
void cuda_comm_abort(be_comm *c);
int cuda_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                   int k, char *err, size_t errlen);
int cuda_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen);

#endif
