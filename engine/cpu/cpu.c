/* engine/cpu/cpu.c: the CPU backend's context, buffers, primitive helpers and
 * its operations table (see engine/backend.h for the contract and
 * engine/cpu/cpu.h for how primitives are kept). */
#include "engine/cpu/cpu.h"

#include <dnnl_debug.h>     /* dnnl_status2str */
#include <stdlib.h>
#include <string.h>

#include "engine/elementwise.h"
#include "base/err.h"

#define CPU_ALIGN 64

int cpu_dnnl_err(dnnl_status_t s, const char *what, char *err, size_t errlen)
{
    return set_err(err, errlen, "cpu backend: oneDNN %s failed: %s", what, dnnl_status2str(s));
}

/* ---- context --------------------------------------------------------------- */

static void ctx_free(be_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->attr)
        dnnl_primitive_attr_destroy(ctx->attr);
    if (ctx->stream)
        dnnl_stream_destroy(ctx->stream);
    if (ctx->eng)
        dnnl_engine_destroy(ctx->eng);
    free(ctx->scratch);
    for (int i = 0; i < CPU_TMP_SLOTS; i++)
        free(ctx->tmp[i]);
    free(ctx);
}

static int ctx_create(int device, be_ctx **out, char *err, size_t errlen)
{
    int rc = -1;
    *out = NULL;
    /* Every device number is the one CPU: "cpu:0,1" is two replicas of a net
     * on it, which the data-parallel code's tests use (engine/cpu/comm.c). */
    if (device < 0)
        return set_err(err, errlen, "cpu backend: there is no device %d", device);
    be_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return set_err(err, errlen, "cpu backend: out of memory");
    DNNL_TRY(dnnl_engine_create(&ctx->eng, dnnl_cpu, 0), "engine_create");
    DNNL_TRY(dnnl_stream_create(&ctx->stream, ctx->eng, dnnl_stream_default_flags),
             "stream_create");
    DNNL_TRY(dnnl_primitive_attr_create(&ctx->attr), "primitive_attr_create");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(ctx->attr, dnnl_scratchpad_mode_user),
             "set_scratchpad_mode");
    *out = ctx;
    ctx = NULL;
    rc = 0;
out:
    ctx_free(ctx);
    return rc;
}

/* ---- buffers --------------------------------------------------------------- */

static void *aligned_zalloc(size_t bytes)
{
    size_t size = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (size < bytes)
        return NULL;                             /* overflow */
    if (size == 0)
        size = CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, size);
    if (p)
        memset(p, 0, size);
    return p;
}

static be_buf *buf_alloc(be_ctx *ctx, size_t bytes, char *err, size_t errlen)
{
    be_buf *b = malloc(sizeof *b);
    void *p = aligned_zalloc(bytes);
    if (!b || !p) {
        free(b);
        free(p);
        set_err(err, errlen, "cpu backend: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    b->p = p;
    b->bytes = bytes;
    return b;
}

static void buf_free(be_ctx *ctx, be_buf *b)
{
    if (!b)
        return;
    free(b->p);
    free(b);
}

static int buf_upload(be_ctx *ctx, be_buf *dst, size_t offset, const void *src, size_t bytes,
                      char *err, size_t errlen)
{
    if (offset > dst->bytes || bytes > dst->bytes - offset)
        return set_err(err, errlen, "cpu backend: upload of %zu bytes at %zu overruns a "
                       "%zu-byte buffer", bytes, offset, dst->bytes);
    memcpy((char *)dst->p + offset, src, bytes);
    return 0;
}

static int buf_download(be_ctx *ctx, const be_buf *src, size_t offset, void *dst, size_t bytes,
                        char *err, size_t errlen)
{
    if (offset > src->bytes || bytes > src->bytes - offset)
        return set_err(err, errlen, "cpu backend: download of %zu bytes at %zu overruns a "
                       "%zu-byte buffer", bytes, offset, src->bytes);
    memcpy(dst, (const char *)src->p + offset, bytes);
    return 0;
}

/* ---- primitives ------------------------------------------------------------ */

int cpu_md_dt(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, dnnl_format_tag_t tag,
              dnnl_data_type_t dt, char *err, size_t errlen)
{
    dnnl_dims_t d;
    memcpy(d, dims, (size_t)nd * sizeof *dims);
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag);
    return s == dnnl_success ? 0 : cpu_dnnl_err(s, "memory_desc_init_by_tag", err, errlen);
}

int cpu_md(dnnl_memory_desc_t *md, int nd, const dnnl_dim_t *dims, dnnl_format_tag_t tag,
           char *err, size_t errlen)
{
    return cpu_md_dt(md, nd, dims, tag, dnnl_f32, err, errlen);
}

int cpu_act_md(dnnl_memory_desc_t *md, int n, int c, int h, int w, be_layout layout,
               be_dtype dt, char *err, size_t errlen)
{
    const dnnl_dim_t dims[] = { n, c, h, w };
    const dnnl_format_tag_t tag = layout == BE_BLOCKED16 ? dnnl_nChw16c :
                                  layout == BE_NHWC ? dnnl_nhwc : dnnl_nchw;
    return cpu_md_dt(md, 4, dims, tag, cpu_dt(dt), err, errlen);
}

/* Blocks of 16 channels, except bfloat16 activations whose channel count the
 * blocks pad: those are channels-last. oneDNN 2.6's bfloat16 convolutions on
 * padded blocks compute the padding too (50 channels cost what 64 do), and
 * on nhwc its brgemm forward kernel and its gradients work on the channels
 * there are. Measured (b64, 3x3, 2 threads, ms for forward + both gradients,
 * blocked / nhwc): 20->20 at 32x32 4.9 / 3.5, 50->50 at 32x32 21.4 / 18.9,
 * 100->100 at 16x16 20.4 / 17.7, 200->200 at 8x8 14.7 / 13.5; with whole
 * blocks nhwc loses (48->48 12.1 / 12.9, 64->64 21.9 / 23.0). FP32 stays
 * blocked: its Winograd kernels want the blocks (conv_channels_last moves a
 * padded FP32 convolution's operands to nhwc for its own passes instead). */
static be_layout act_layout(int c, be_dtype dt)
{
    return dt == BE_BF16 && c % 16 != 0 ? BE_NHWC : BE_BLOCKED16;
}

size_t cpu_round_count(const dnnl_memory_desc_t *md, be_dtype dt)
{
    return dt == BE_F16 ? dnnl_memory_desc_get_size(md) / sizeof(float) : 0;
}

void cpu_round_f16(void *p, size_t count)
{
    float *f = p;
    if (count == 0)
        return;             /* FP32 and bf16: nothing to round, and no OpenMP team to make */
#pragma omp parallel for schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        f[i] = ew_round_f16(f[i]);
}

static size_t dtype_bytes(be_dtype dt)
{
    return dt == BE_BF16 ? 2 : 4;
}

/* bfloat16 needs oneDNN's AVX-512 kernels: native with AVX-512 BF16,
 * converted in registers on plain AVX-512; without AVX-512 oneDNN has none.
 * FP16 is emulated (FP32 arithmetic on FP16-rounded values) anywhere. */
static int dtype_check(be_ctx *ctx, be_dtype dt, char *err, size_t errlen)
{
    if (dt != BE_BF16)
        return 0;
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core)
        return set_err(err, errlen, "amp-bf16 needs a CPU with AVX-512 (oneDNN's bfloat16 "
                       "kernels); this one has none: use fp32, or amp-fp16 to try FP16's "
                       "numerics");
    return 0;
}

int cpu_post_attr(be_ctx *ctx, const dnnl_memory_desc_t *addend, bool relu, float alpha,
                  dnnl_primitive_attr_t *attr, char *err, size_t errlen)
{
    int rc = -1;
    dnnl_post_ops_t po = NULL;
    *attr = NULL;
    DNNL_TRY(dnnl_primitive_attr_clone(attr, ctx->attr), "primitive_attr_clone");
    DNNL_TRY(dnnl_post_ops_create(&po), "post_ops_create");
    if (addend)
        DNNL_TRY(dnnl_post_ops_append_binary(po, dnnl_binary_add, addend),
                 "post_ops_append_binary");
    if (relu)
        DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, alpha, 0.0f),
                 "post_ops_append_eltwise");
    DNNL_TRY(dnnl_primitive_attr_set_post_ops(*attr, po), "primitive_attr_set_post_ops");
    rc = 0;
out:
    if (po)
        dnnl_post_ops_destroy(po);
    if (rc < 0 && *attr) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
    }
    return rc;
}

int cpu_pd(be_ctx *ctx, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_desc_t hint,
           dnnl_primitive_desc_t *pd, char *err, size_t errlen)
{
    dnnl_status_t s = dnnl_primitive_desc_create(pd, op_desc, ctx->attr, ctx->eng, hint);
    return s == dnnl_success ? 0 : cpu_dnnl_err(s, "primitive_desc_create", err, errlen);
}

static int grow_scratch(be_ctx *ctx, size_t bytes, char *err, size_t errlen)
{
    if (bytes <= ctx->scratch_bytes)
        return 0;
    void *p = aligned_zalloc(bytes);
    if (!p)
        return set_err(err, errlen, "cpu backend: cannot allocate a %zu-byte scratchpad", bytes);
    free(ctx->scratch);
    ctx->scratch = p;
    ctx->scratch_bytes = bytes;
    return 0;
}

int cpu_prim_make(be_ctx *ctx, const_dnnl_primitive_desc_t pd, int nargs, const int *args,
                  cpu_prim *p, char *err, size_t errlen)
{
    int rc = -1;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < nargs; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                                     args[i]);
        if (!md || md->ndims == 0) {
            set_err(err, errlen, "cpu backend: primitive has no argument %d", args[i]);
            goto out;
        }
        DNNL_TRY(dnnl_memory_create(&p->mem[i], md, ctx->eng, DNNL_MEMORY_NONE),
                 "memory_create");
        p->args[i] = args[i];
        p->nargs = i + 1;
    }
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (sbytes > 0) {
        if (grow_scratch(ctx, sbytes, err, errlen) < 0)
            goto out;
        DNNL_TRY(dnnl_memory_create(&p->scratch_mem, smd, ctx->eng, DNNL_MEMORY_NONE),
                 "memory_create");
    }
    DNNL_TRY(dnnl_primitive_create(&p->prim, pd), "primitive_create");
    rc = 0;
out:
    if (rc < 0)
        cpu_prim_free(p);
    return rc;
}

int cpu_prim_run(be_ctx *ctx, cpu_prim *p, void *const *data, char *err, size_t errlen)
{
    int rc = -1;
    dnnl_exec_arg_t ea[CPU_MAX_ARGS + 1];
    int n = 0;
    if (!p->prim)
        return set_err(err, errlen, "cpu backend: this plan was made without that pass");
    for (int i = 0; i < p->nargs; i++) {
        DNNL_TRY(dnnl_memory_set_data_handle(p->mem[i], data[i]), "memory_set_data_handle");
        ea[n].arg = p->args[i];
        ea[n].memory = p->mem[i];
        n++;
    }
    if (p->scratch_mem) {
        DNNL_TRY(dnnl_memory_set_data_handle(p->scratch_mem, ctx->scratch),
                 "memory_set_data_handle");
        ea[n].arg = DNNL_ARG_SCRATCHPAD;
        ea[n].memory = p->scratch_mem;
        n++;
    }
    DNNL_TRY(dnnl_primitive_execute(p->prim, ctx->stream, n, ea), "primitive_execute");
    DNNL_TRY(dnnl_stream_wait(ctx->stream), "stream_wait");
    rc = 0;
out:
    return rc;
}

void cpu_prim_free(cpu_prim *p)
{
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < CPU_MAX_ARGS; i++)
        if (p->mem[i])
            dnnl_memory_destroy(p->mem[i]);
    if (p->scratch_mem)
        dnnl_memory_destroy(p->scratch_mem);
    memset(p, 0, sizeof *p);
}

int cpu_reorder_make(be_ctx *ctx, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                     int slot, cpu_prim *r, char *err, size_t errlen)
{
    int rc = -1;
    dnnl_primitive_desc_t pd = NULL;
    const int args[] = { DNNL_ARG_FROM, DNNL_ARG_TO };
    memset(r, 0, sizeof *r);
    if (dnnl_memory_desc_equal(from, to))
        return 0;
    size_t bytes = dnnl_memory_desc_get_size(from), tb = dnnl_memory_desc_get_size(to);
    if (tb > bytes)
        bytes = tb;
    if (bytes > ctx->tmp_bytes[slot]) {
        void *p = aligned_zalloc(bytes);
        if (!p)
            return set_err(err, errlen, "cpu backend: cannot allocate a %zu-byte staging buffer",
                           bytes);
        free(ctx->tmp[slot]);
        ctx->tmp[slot] = p;
        ctx->tmp_bytes[slot] = bytes;
    }
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, from, ctx->eng, to, ctx->eng, ctx->attr),
             "reorder_primitive_desc_create");
    if (cpu_prim_make(ctx, pd, 2, args, r, err, errlen) < 0)
        goto out;
    rc = 0;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return rc;
}

void *cpu_stage_in(be_ctx *ctx, cpu_prim *r, int slot, void *user, int *fail,
                   char *err, size_t errlen)
{
    if (!r->prim || !user)
        return user;
    void *data[] = { user, ctx->tmp[slot] };
    if (cpu_prim_run(ctx, r, data, err, errlen) < 0)
        *fail = 1;
    return ctx->tmp[slot];
}

void *cpu_stage_out(be_ctx *ctx, const cpu_prim *r, int slot, void *user)
{
    return r->prim && user ? ctx->tmp[slot] : user;
}

int cpu_stage_done(be_ctx *ctx, cpu_prim *r, int slot, void *user, char *err, size_t errlen)
{
    if (!r->prim || !user)
        return 0;
    void *data[] = { ctx->tmp[slot], user };
    return cpu_prim_run(ctx, r, data, err, errlen);
}

be_plan *cpu_plan_new(cpu_plan_kind kind, char *err, size_t errlen)
{
    be_plan *p = calloc(1, sizeof *p);
    if (!p)
        set_err(err, errlen, "cpu backend: out of memory");
    else
        p->kind = kind;
    return p;
}

static void plan_free(be_ctx *ctx, be_plan *p)
{
    if (!p)
        return;
    cpu_prim_free(&p->fwd);
    cpu_prim_free(&p->bwd_data);
    cpu_prim_free(&p->bwd_weights);
    cpu_prim_free(&p->infer);
    for (int i = 0; i < CPU_RE_MAX; i++)
        cpu_prim_free(&p->re[i]);
    free(p->workspace);
    free(p->relu_ws);
    free(p->wino_u);
    free(p->wino_dw);
    free(p->wcache);
    free(p->row_loss);
    free(p->row_hit);
    free(p);
}

/* ---- the table ------------------------------------------------------------- */

const backend cpu_backend = {
    .name = "cpu",
    .act_layout = act_layout,
    .ctx_create = ctx_create,
    .ctx_free = ctx_free,
    .dtype_bytes = dtype_bytes,
    .dtype_check = dtype_check,
    .buf_alloc = buf_alloc,
    .buf_free = buf_free,
    .buf_upload = buf_upload,
    .buf_download = buf_download,
    .plan_free = plan_free,
    .conv_plan = cpu_conv_plan,
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd_data = cpu_conv_bwd_data,
    .conv_bwd_weights = cpu_conv_bwd_weights,
    .conv_infer = cpu_conv_infer,
    .pool_plan = cpu_pool_plan,
    .pool_fwd = cpu_pool_fwd,
    .pool_bwd = cpu_pool_bwd,
    .dense_plan = cpu_dense_plan,
    .dense_fwd = cpu_dense_fwd,
    .dense_bwd_data = cpu_dense_bwd_data,
    .dense_bwd_weights = cpu_dense_bwd_weights,
    .act_plan = cpu_act_plan,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .bn_relu = true,
    .conv_relu = true,
    .bn_plan = cpu_bn_plan,
    .bn_fwd = cpu_bn_fwd,
    .bn_bwd = cpu_bn_bwd,
    .bn_running = cpu_bn_running,
    .bn_fold = cpu_bn_fold,
    .add_relu = true,
    .add_plan = cpu_add_plan,
    .add_fwd = cpu_add_fwd,
    .concat_plan = cpu_concat_plan,
    .concat_fwd = cpu_concat_fwd,
    .concat_bwd = cpu_concat_bwd,
    .acc = cpu_acc,
    .cast = cpu_cast,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .xent_plan = cpu_xent_plan,
    .xent = cpu_xent,
    .nonfinite = cpu_nonfinite,
    .unscale = cpu_unscale,
    .sgd_update = cpu_sgd_update,
    .optim_update = cpu_optim_update,
    .sumsq = cpu_sumsq,
    .ctx_bind = NULL,               /* any thread may run any context */
    .comm_create = cpu_comm_create,
    .comm_free = cpu_comm_free,
    .allreduce = cpu_allreduce,
    .allreduce_wait = cpu_allreduce_wait,
    .comm_abort = cpu_comm_abort,
    .comm_create_world = cpu_comm_create_world,
    .comm_gather = cpu_comm_gather,
};
