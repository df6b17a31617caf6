/* engine/cpu/cpu.h: internals of the CPU backend (oneDNN), shared by its files.
 *
 * Each plan holds up to three oneDNN primitives (forward, backward-data,
 * backward-weights), created once with plain layouts. Every primitive keeps
 * one memory object per argument, created without data; running a primitive
 * only points those objects at the buffers of this call
 * (dnnl_memory_set_data_handle) and executes. Scratchpads are in user mode:
 * all primitives of a context share one scratch buffer owned by the context,
 * grown when a plan needing more is made. oneDNN here runs on OpenMP, so a
 * primitive has finished when dnnl_primitive_execute returns on the CPU; we
 * still wait on the stream after each execute, as the API asks.
 */
#ifndef KILN_ENGINE_CPU_CPU_H
#define KILN_ENGINE_CPU_CPU_H

#include <dnnl.h>
#include <stdint.h>

#include "engine/backend.h"

/* Staging buffers for operands reordered into a primitive's preferred
 * (blocked) layout: one per role, shared by every plan of a context (ops run
 * one at a time), grown when a plan needing more is made. */
enum { CPU_TMP_SRC, CPU_TMP_WEI, CPU_TMP_DST, CPU_TMP_SLOTS };

struct be_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;     /* scratchpad mode user */
    void *scratch;                  /* shared by every primitive of this context */
    size_t scratch_bytes;
    void *tmp[CPU_TMP_SLOTS];
    size_t tmp_bytes[CPU_TMP_SLOTS];
};

struct be_buf {
    void *p;                        /* 64-byte aligned */
    size_t bytes;
};

#define CPU_MAX_ARGS (BE_MAX_INPUTS + 1)   /* a sum or concat of the most inputs */
#define CPU_RE_MAX 9                        /* reorders of one plan */

/* One primitive and the memory objects of its arguments, in declaration order,
 * plus the scratchpad (bound to the context's scratch) when it needs one. */
typedef struct cpu_prim {
    dnnl_primitive_t prim;          /* NULL: not created (pass not asked for) */
    int nargs;                      /* declared arguments */
    int args[CPU_MAX_ARGS];
    dnnl_memory_t mem[CPU_MAX_ARGS];
    dnnl_memory_t scratch_mem;      /* NULL when no scratchpad is needed */
} cpu_prim;

typedef enum cpu_plan_kind {
    CPU_PLAN_CONV, CPU_PLAN_POOL, CPU_PLAN_DENSE, CPU_PLAN_ACT, CPU_PLAN_XENT,
    CPU_PLAN_BN, CPU_PLAN_ADD, CPU_PLAN_CONCAT
} cpu_plan_kind;

struct be_plan {
    cpu_plan_kind kind;
    cpu_prim fwd, bwd_data, bwd_weights;
    cpu_prim infer;                 /* batch norm: the forward pass on given statistics */
    cpu_prim re[CPU_RE_MAX];        /* convolution: reorders to and from plain layouts */
    void *workspace;                /* max pooling: argmax from fwd for bwd_data;
                                     * batch norm: the unwanted dx of its backward pass */
    void *relu_ws;                  /* batch norm with a ReLU: oneDNN's record of which
                                     * outputs were positive, from fwd for bwd_data */
    bool own_fwd, own_bwd_data, own_bwd_weights; /* convolution: the pass runs wino16.c */
    bool own_bf16;                  /* ... its bfloat16 kernel (wino_u holds bfloat16) */
    bool own_nhwc;                  /* ... or wino_nhwc.c's (wino_u holds bfloat16), */
    int own_c, own_k;               /* ... with these channels in and out */
    bool own_relu;                  /* ... with the ReLU after it in the forward pass */
    float *wino_u;                  /* ... the weights' transform it reads, and the */
    int own_n, own_h, own_w;        /* images and their size (input = output) */
    float *wino_dw;                 /* ... the weight gradient's partial sums */
    /* an inference convolution (be_conv_desc.infer): the weights in the
     * primitive's layout (NULL: it reads the caller's), the stamp they were
     * reordered at (0: none yet), and whether it takes an addend */
    void *wcache;
    uint64_t wstamp;
    bool infer_add;
    /* add, concat: inputs; concat: channel offsets coff[0..k] and h*w */
    int k;
    int coff[BE_MAX_INPUTS + 1];
    size_t hw;
    /* BE_F16 outputs (engine/backend.h, be_dtype): floats of y after a
     * forward pass and of dx after a backward pass to round through FP16
     * (0: the output is not BE_F16) */
    size_t round_y, round_dx;
    /* concat: the element type and its size in bytes */
    be_dtype dtype;
    size_t esize;
    /* softmax cross-entropy */
    int n, classes;
    float *row_loss;
    int *row_hit;
};

/* Fills err from a failed oneDNN call; returns -1. */
int cpu_dnnl_err(dnnl_status_t s, const char *what, char *err, size_t errlen);

#define DNNL_TRY(call, what) do { dnnl_status_t s_ = (call); \
    if (s_ != dnnl_success) { cpu_dnnl_err(s_, (what), err, errlen); goto out; } } while (0)

/* Plain memory descriptor: dims[0..nd) with format tag, FP32 (cpu_md) or
 * of a data type. */
int cpu_md(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, dnnl_format_tag_t tag,
           char *err, size_t errlen);
int cpu_md_dt(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, dnnl_format_tag_t tag,
              dnnl_data_type_t dt, char *err, size_t errlen);

/* oneDNN's type for a be_dtype: BE_F16 is stored as FP32 here. */
static inline dnnl_data_type_t cpu_dt(be_dtype dt)
{
    return dt == BE_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* An activation of n x c x h x w in that layout (engine/backend.h; blocked
 * pads c to a multiple of 16) and type. */
int cpu_act_md(dnnl_memory_desc_t *md, int n, int c, int h, int w, be_layout layout,
               be_dtype dt, char *err, size_t errlen);

/* The floats of md when dt is BE_F16 (what to round), else 0. */
size_t cpu_round_count(const dnnl_memory_desc_t *md, be_dtype dt);
/* Rounds count floats at p through FP16 (ew_round_f16); a no-op for 0. */
void cpu_round_f16(void *p, size_t count);

/* The context's attributes with post-ops: a binary add of an addend in
 * layout addend (NULL: none), then a ReLU of negative slope alpha (relu). */
int cpu_post_attr(be_ctx *ctx, const dnnl_memory_desc_t *addend, bool relu, float alpha,
                  dnnl_primitive_attr_t *attr, char *err, size_t errlen);

/* Creates the primitive descriptor for op_desc (hint: the forward one for a
 * backward pass, or NULL) with the context's attributes. */
int cpu_pd(be_ctx *ctx, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_desc_t hint,
           dnnl_primitive_desc_t *pd, char *err, size_t errlen);

/* Makes p's primitive from pd with memory objects for the nargs arguments in
 * args[], and a scratchpad if pd needs one (growing ctx's). */
int cpu_prim_make(be_ctx *ctx, const_dnnl_primitive_desc_t pd, int nargs, const int *args,
                  cpu_prim *p, char *err, size_t errlen);

/* Binds data[i] to the i-th declared argument and executes. */
int cpu_prim_run(be_ctx *ctx, cpu_prim *p, void *const *data, char *err, size_t errlen);

void cpu_prim_free(cpu_prim *p);

/* Makes r a reorder from layout `from` to `to` when they differ (r->prim
 * stays NULL when they are the same) and grows the context's staging buffer
 * `slot` to hold the side in a non-plain layout (`staged`: from or to). */
int cpu_reorder_make(be_ctx *ctx, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                     int slot, cpu_prim *r, char *err, size_t errlen);
/* Operands through staging: stage_in returns the user's pointer, or (with a
 * reorder) the staging buffer after reordering user data into it; stage_out
 * returns where the primitive should write, and stage_done reorders that
 * into the user's buffer. *fail is set on an error (err filled). */
void *cpu_stage_in(be_ctx *ctx, cpu_prim *r, int slot, void *user, int *fail,
                   char *err, size_t errlen);
void *cpu_stage_out(be_ctx *ctx, const cpu_prim *r, int slot, void *user);
int cpu_stage_done(be_ctx *ctx, cpu_prim *r, int slot, void *user, char *err, size_t errlen);

/* A new zeroed plan of that kind, or NULL with err set. */
be_plan *cpu_plan_new(cpu_plan_kind kind, char *err, size_t errlen);

/* The ops, one file each (conv.c, pool.c, dense.c, act.c, bn.c, merge.c, ew.c, loss.c,
 * optim.c). */
int cpu_conv_plan(be_ctx *, const be_conv_desc *, unsigned, be_plan **, char *, size_t);
/* Whether pass (BE_FWD, BE_BWD_DATA or BE_BWD_WEIGHTS) of a convolution is
 * computed with Winograd's algorithm where oneDNN has it (conv.c says when). */
bool cpu_conv_winograd(const be_conv_desc *d, unsigned pass);
/* oneDNN's name for the kernel that runs pass of a convolution plan (e.g.
 * "jit_wino_4x3:avx512_core"), or NULL where the plan has no such pass. */
const char *cpu_conv_impl(const be_plan *p, unsigned pass);

/* conv.c: whether a pass of this convolution runs kiln's own Winograd
 * F(2x2, 3x3) kernels (wino16.c): the training passes of FP32 3x3
 * stride-1 padding-1 convolutions of 16 channels in and out, on a CPU with
 * AVX-512 (cpu_conv_impl names them "kiln_wino_2x3"), and the forward pass
 * and input gradient of bfloat16 ones, with AVX-512 BF16
 * ("kiln_wino_2x3:bf16"). */
bool cpu_conv_wino16(const be_conv_desc *d, unsigned pass);

/* wino16.c: the kernel. u (16 x 16 x 16 floats, 64-byte aligned) from the
 * OIHW 16x16x3x3 weights w: G g G^T for the forward pass, or for the input
 * gradient with each kernel turned 180 degrees and the channels swapped
 * (flip). Then y = conv(x, w) (+ bias, 16 floats, or NULL; then max(0, .)
 * where relu) over n images of h x w in nChw16c (x the input, or dy with
 * flip's u; y the output or dx). */
bool cpu_wino16_supported(void);
void cpu_wino16_weights(const float *w, bool flip, float *u);
void cpu_wino16_run(const float *x, const float *u, const float *bias, bool relu, float *y, int n,
                    int h, int w);
/* The same for bfloat16 tensors (amp-bf16; forward and input gradient): u
 * (16 x 16 x 16 bfloat16 values, 64-byte aligned) from bfloat16 weights;
 * x, y bfloat16 nChw16c, bias FP32. Needs AVX-512 BF16. */
bool cpu_wino16_bf16_supported(void);
void cpu_wino16_weights_bf16(const uint16_t *w, bool flip, uint16_t *u);
void cpu_wino16_run_bf16(const uint16_t *x, const uint16_t *u, const float *bias, bool relu,
                         uint16_t *y, int n, int h, int w);
/* wino_nhwc.c: the bfloat16 kernel for channels-last tensors of other
 * channel counts (forward and input gradient; cpu_conv_wino_nhwc names the
 * convolutions, cpu_conv_impl "kiln_wino_2x3:bf16:nhwc"). u
 * (cpu_wino_nhwc_u_count(ci, ko) bfloat16 values, 64-byte aligned) from the
 * OIHW k x c x 3 x 3 bfloat16 weights w: ci = c in, ko = k out, or with
 * flip (the input gradient) ci = k, ko = c. Then y (n x h x w x ko) =
 * conv(x (n x h x w x ci)) (+ bias, ko floats, or NULL; then max(0, .)
 * where relu), for ci and ko of 1 to CPU_WINO_NHWC_MAX. Needs AVX-512 BF16
 * and VL. */
#define CPU_WINO_NHWC_MAX 128
bool cpu_conv_wino_nhwc(const be_conv_desc *d, unsigned pass);
bool cpu_wino_nhwc_supported(void);
size_t cpu_wino_nhwc_u_count(int ci, int ko);
void cpu_wino_nhwc_weights(const uint16_t *w, int k, int c, bool flip, uint16_t *u);
void cpu_wino_nhwc_run(const uint16_t *x, int ci, const uint16_t *u, const float *bias, bool relu,
                       uint16_t *y, int ko, int n, int h, int w);
/* The weight gradient dw (OIHW 16x16x3x3) and, when db is not NULL, the
 * bias gradient (16 floats) of the same convolution from x and dy (nChw16c),
 * through scratch (cpu_wino16_bwd_w_scratch() bytes, 64-byte aligned), in
 * fixed partial sums: the same bits for any thread count. */
size_t cpu_wino16_bwd_w_scratch(void);
void cpu_wino16_bwd_w(const float *x, const float *dy, float *dw, float *db, int n, int h,
                      int w, float *scratch);
int cpu_conv_fwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *, be_buf *,
                 char *, size_t);
int cpu_conv_bwd_data(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *,
                      char *, size_t);
int cpu_conv_bwd_weights(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *,
                         be_buf *, char *, size_t);
int cpu_conv_infer(be_ctx *, be_plan *, const be_buf *, const be_buf *, uint64_t, const be_buf *,
                   const be_buf *, be_buf *, char *, size_t);
int cpu_pool_plan(be_ctx *, const be_pool_desc *, unsigned, be_plan **, char *, size_t);
int cpu_pool_fwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cpu_pool_bwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cpu_dense_plan(be_ctx *, const be_dense_desc *, unsigned, be_plan **, char *, size_t);
int cpu_dense_fwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *, be_buf *,
                  char *, size_t);
int cpu_dense_bwd_data(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *,
                       char *, size_t);
int cpu_dense_bwd_weights(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *,
                          be_buf *, char *, size_t);
int cpu_act_plan(be_ctx *, const be_act_desc *, unsigned, be_plan **, char *, size_t);
int cpu_act_fwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cpu_act_bwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, char *, size_t);
int cpu_xent_plan(be_ctx *, const be_xent_desc *, be_plan **, char *, size_t);
int cpu_xent(be_ctx *, be_plan *, const be_buf *, const be_buf *, float, float, be_buf *, be_buf *,
             double *, int *, char *, size_t);
int cpu_bn_plan(be_ctx *, const be_bn_desc *, unsigned, be_plan **, char *, size_t);
int cpu_bn_fwd(be_ctx *, be_plan *, bool, const be_buf *, const be_buf *, const be_buf *,
               be_buf *, be_buf *, be_buf *, char *, size_t);
int cpu_bn_bwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *,
               const be_buf *, const be_buf *, const be_buf *, be_buf *, be_buf *, be_buf *,
               char *, size_t);
int cpu_bn_running(be_ctx *, be_buf *, be_buf *, const be_buf *, const be_buf *, int, float,
                   int64_t, char *, size_t);
int cpu_bn_fold(be_ctx *, const be_buf *, const be_buf *, const be_buf *, const be_buf *,
                const be_buf *, const be_buf *, float, int, size_t, be_buf *, be_buf *, char *,
                size_t);
int cpu_add_plan(be_ctx *, const be_add_desc *, be_plan **, char *, size_t);
int cpu_add_fwd(be_ctx *, be_plan *, const be_buf *const *, be_buf *, char *, size_t);
int cpu_concat_plan(be_ctx *, const be_concat_desc *, be_plan **, char *, size_t);
int cpu_concat_fwd(be_ctx *, be_plan *, const be_buf *const *, be_buf *, char *, size_t);
int cpu_concat_bwd(be_ctx *, be_plan *, const be_buf *, int, be_buf *, float, char *, size_t);
int cpu_acc(be_ctx *, be_buf *, const be_buf *, size_t, be_dtype, float, char *, size_t);
/* d = s + beta d over count elements of type dt at those addresses, on the
 * calling thread (cpu_acc's arithmetic, for ops that accumulate slices). */
void cpu_acc_span(void *d, const void *s, size_t count, be_dtype dt, float beta);
int cpu_cast(be_ctx *, const be_buf *, be_dtype, be_buf *, be_dtype, size_t, char *, size_t);
int cpu_dropout_fwd(be_ctx *, const be_dropout_desc *, bool, const be_buf *, be_buf *, be_buf *,
                    uint64_t, char *, size_t);
int cpu_dropout_bwd(be_ctx *, const be_dropout_desc *, const be_buf *, const be_buf *, be_buf *,
                    float, char *, size_t);
int cpu_nonfinite(be_ctx *, const be_buf *, size_t, bool *, char *, size_t);
int cpu_unscale(be_ctx *, be_buf *, size_t, float, bool *, char *, size_t);
int cpu_sgd_update(be_ctx *, be_buf *, be_buf *, const be_buf *, size_t, const be_sgd *,
                   char *, size_t);
int cpu_optim_update(be_ctx *, const be_optim *, be_buf *, be_buf *, be_buf *, const be_buf *,
                     size_t, char *, size_t);
int cpu_sumsq(be_ctx *, const be_buf *, size_t, double *, char *, size_t);

/* A buffer's data for a oneDNN handle (oneDNN takes void * even for inputs). */
static inline void *cpu_ptr(const be_buf *b)
{
    return b ? b->p : NULL;
}

/* comm.c: the data-parallel communicator (engine/backend.h). */
int cpu_comm_create(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen);
void cpu_comm_free(be_comm *c);
void cpu_comm_abort(be_comm *c);
int cpu_comm_create_world(be_ctx *ctx, const net_world *w, be_comm **out, char *err,
                          size_t errlen);
int cpu_comm_gather(be_ctx *ctx, be_comm *c, const void *in, size_t bytes, void *out,
                    char *err, size_t errlen);
int cpu_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                  int k, char *err, size_t errlen);
int cpu_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen);

#endif
