/* engine/cpu/conv.c: 2-D convolution on oneDNN (direct algorithm, or
 * Winograd where cpu_conv_winograd says so). The
 * backend's operands are activations in their layouts and types
 * (engine/backend.h) and OIHW / GOIHW weights; each primitive is made with
 * layouts left to oneDNN ("any"), which picks its blocked ones and its fast
 * kernels (the plain-layout kernels are gemm-based and their backward-weights
 * pass is tens of times slower), and the plan reorders operands into those
 * layouts and types and results back, through the context's staging buffers:
 * so a cast happens exactly where a tensor's type differs from the one the
 * products are computed in.
 *
 * Types: with a bfloat16 wdtype the primitives multiply bfloat16 operands
 * (AVX-512 BF16) with FP32 accumulation; the forward output and the input
 * gradient are written in their tensors' types, and the weight and bias
 * gradients in FP32. With BE_F16 the arithmetic is FP32 on values that are
 * FP16 already, and the outputs that are BE_F16 tensors are rounded through
 * FP16 afterwards. Where oneDNN has no bfloat16 kernel for a weight-gradient
 * pass (a first layer's few input channels: it falls back to a gemm about
 * eight times slower than its FP32 kernel) that pass runs in FP32 on the
 * operands cast up, which is also the more exact. */
#include "engine/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

typedef struct conv_mds {
    dnnl_memory_desc_t src, wei, dwei, bias, dst;   /* as the caller's buffers hold them */
    dnnl_dims_t strides, dil, pad_l, pad_r;
} conv_mds;

static int conv_mds_init(const be_conv_desc *d, conv_mds *m, char *err, size_t errlen)
{
    const dnnl_dim_t bias[] = { d->k };
    int g = d->groups;
    if (g < 1 || d->c % g || d->k % g)
        return set_err(err, errlen, "cpu backend: conv groups %d do not divide %d and %d",
                       g, d->c, d->k);
    if (cpu_act_md(&m->src, d->n, d->c, d->h, d->w, d->src_layout, d->src_dtype, err,
                   errlen) < 0 ||
        cpu_act_md(&m->dst, d->n, d->k, d->oh, d->ow, d->dst_layout, d->dst_dtype, err,
                   errlen) < 0 ||
        cpu_md(&m->bias, 1, bias, dnnl_x, err, errlen) < 0)
        return -1;
    if (g == 1) {
        const dnnl_dim_t wei[] = { d->k, d->c, d->kh, d->kw };
        if (cpu_md_dt(&m->wei, 4, wei, dnnl_oihw, cpu_dt(d->wdtype), err, errlen) < 0 ||
            cpu_md(&m->dwei, 4, wei, dnnl_oihw, err, errlen) < 0)
            return -1;
    } else {
        /* (G, K/G, C/G, KH, KW) is the same memory as (K, C/G, KH, KW). */
        const dnnl_dim_t wei[] = { g, d->k / g, d->c / g, d->kh, d->kw };
        if (cpu_md_dt(&m->wei, 5, wei, dnnl_goihw, cpu_dt(d->wdtype), err, errlen) < 0 ||
            cpu_md(&m->dwei, 5, wei, dnnl_goihw, err, errlen) < 0)
            return -1;
    }
    m->strides[0] = d->stride_h;
    m->strides[1] = d->stride_w;
    m->dil[0] = d->dil_h - 1;                   /* oneDNN counts the gaps: 0 = dense */
    m->dil[1] = d->dil_w - 1;
    m->pad_l[0] = d->pad_t;
    m->pad_l[1] = d->pad_l;
    m->pad_r[0] = d->pad_b;
    m->pad_r[1] = d->pad_r;
    return 0;
}

/* The reorders of a plan, by pass and operand (be_plan.re[]); an inference
 * plan has only the forward ones and RE_FADD, its addend's. */
enum { RE_FX, RE_FW, RE_FY, RE_BDY, RE_BW, RE_BDX, RE_WX, RE_WDY, RE_WDW };
enum { RE_FADD = RE_BDY };

/* md's dimensions in type dt, with every dimension's layout left to the
 * primitive. */
static int any_md(const dnnl_memory_desc_t *md, dnnl_data_type_t dt, dnnl_memory_desc_t *out,
                  char *err, size_t errlen)
{
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(out, md->ndims, md->dims, dt,
                                                   dnnl_format_tag_any);
    return s == dnnl_success ? 0 : cpu_dnnl_err(s, "memory_desc_init_by_tag", err, errlen);
}

static const dnnl_memory_desc_t *pd_md(const_dnnl_primitive_desc_t pd, int arg)
{
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

/* Whether oneDNN chose one of its direct-convolution kernels (its names
 * start "jit") rather than a gemm or reference fallback. */
static bool is_jit(const_dnnl_primitive_desc_t pd)
{
    const char *name = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success &&
           name && strncmp(name, "jit", 3) == 0;
}

/* Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, AVX-512 FP32) instead of the
 * direct kernel, for one pass of a convolution: 3x3, stride 1, undilated,
 * ungrouped, computed in FP32, with at least 32 input and output channels
 * (48 for the weight gradient). It does about a quarter of the direct
 * algorithm's multiplications, and adds the transforms' memory traffic and
 * their rounding (tests/unit/test_engine_ops.c bounds it). Where it pays,
 * measured per pass on this project's 2-core AVX-512 machine (ms, oneDNN
 * 2.6, direct / Winograd, 2 threads; cifar10-cnn at batch 64, resnet20 at
 * 128):
 *
 *   channels  size   forward       input grad    weight grad
 *   16->16    32x32  2.0 / 2.8     1.6 / 2.5     1.6 / 2.4
 *   32->32    16x16  1.5 / 1.2     1.6 / 1.1     1.5 / 1.6
 *   50->50    32x32  12.3 / 6.9    13.3 / 6.6    13.2 / 9.9
 *   50->100   16x16  5.3 / 2.5     5.4 / 2.7     5.3 / 3.3
 *   64->64    8x8    1.5 / 0.8     1.5 / 0.7     1.6 / 1.1
 *   100->100  16x16  9.3 / 5.0     9.3 / 4.9     9.5 / 7.3
 *
 * The choice depends on the shapes alone, never on a timing, so a run and
 * its resumption compute alike. Where oneDNN has no Winograd kernel (a CPU
 * without AVX-512, an attribute it does not take) the pass is direct.
 * KILN_WINOGRAD=0 in the environment turns it off (for comparisons). */
static bool all_f32(const be_conv_desc *d)
{
    return d->wdtype == BE_F32 && d->src_dtype == BE_F32 && d->dst_dtype == BE_F32;
}

static bool all_bf16(const be_conv_desc *d)
{
    return d->wdtype == BE_BF16 && d->src_dtype == BE_BF16 && d->dst_dtype == BE_BF16;
}

/* KILN_WINOGRAD=0: both Winograd rules off. */
static bool winograd_off(void)
{
    const char *env = getenv("KILN_WINOGRAD");
    return env && strcmp(env, "0") == 0;
}

bool cpu_conv_winograd(const be_conv_desc *d, unsigned pass)
{
    if (winograd_off() || !all_f32(d) || d->kh != 3 || d->kw != 3 ||
        d->stride_h != 1 || d->stride_w != 1 || d->dil_h != 1 || d->dil_w != 1 ||
        d->groups != 1)
        return false;
    int ch = d->c < d->k ? d->c : d->k;
    return ch >= (pass == BE_BWD_WEIGHTS ? 48 : 32);
}

/* kiln's own Winograd F(2x2, 3x3) (wino16.c) for the training passes of an
 * FP32 3x3 stride-1 convolution with padding 1 and 16 channels in and out,
 * where oneDNN has no kernel that wins: its direct one runs at about the
 * machine's multiply-add rate and its Winograd is slower (the table above).
 * resnet20's 16->16 32x32 layers at batch 128 (ms, 2 threads, oneDNN direct
 * / wino16): forward 1.87 / 1.02 (the input gradient is the same kernel),
 * weight gradient 1.56 / 1.16 (best of 20, three runs: 1.78-1.86x and
 * 1.31-1.39x).
 * Under amp-bf16 (bfloat16 tensors and products) its bfloat16 variant
 * takes the forward pass and the input gradient (AVX-512 BF16 dot products;
 * b128, best of 20, three runs: 0.64-0.81 ms against oneDNN's bfloat16
 * direct kernel's 1.15-1.25), and oneDNN the weight gradient.
 * Training plans only: an inference plan folds batch norm and post-ops into
 * oneDNN's pass (conv_infer_plan). Like cpu_conv_winograd, by shape and type
 * alone; KILN_WINOGRAD=0 turns it off too. */
bool cpu_conv_wino16(const be_conv_desc *d, unsigned pass)
{
    if (winograd_off() || d->infer || d->post_add || d->post_relu || d->groups != 1 ||
        d->c != 16 || d->k != 16 || d->kh != 3 || d->kw != 3 || d->stride_h != 1 ||
        d->stride_w != 1 || d->dil_h != 1 || d->dil_w != 1 || d->pad_t != 1 || d->pad_b != 1 ||
        d->pad_l != 1 || d->pad_r != 1 || d->oh != d->h || d->ow != d->w)
        return false;
    if (all_f32(d))
        return cpu_wino16_supported();
    return all_bf16(d) && pass != BE_BWD_WEIGHTS && cpu_wino16_bf16_supported();
}

/* Whether the caller's input or output is channels-last (backend.act_layout). */
static bool conv_nhwc_act(const be_conv_desc *d)
{
    return d->src_layout == BE_NHWC || d->dst_layout == BE_NHWC;
}

/* kiln's bfloat16 Winograd F(2x2, 3x3) on channels-last tensors
 * (wino_nhwc.c) for the forward pass and the input gradient of a bfloat16
 * 3x3 stride-1 convolution with padding 1 whose input or output the net
 * keeps channels-last (a channel count the 16-blocks would pad), of 16 to
 * CPU_WINO_NHWC_MAX channels in and out (an image's few channels in: no).
 * oneDNN's direct bfloat16 kernels run these at 57-82% of the bfloat16
 * peak; the timings are in wino_nhwc.c. The weight gradient stays
 * oneDNN's. Training plans only, as cpu_conv_wino16; KILN_WINOGRAD=0 turns
 * it off. */
bool cpu_conv_wino_nhwc(const be_conv_desc *d, unsigned pass)
{
    return !winograd_off() && !d->infer && !d->post_add && !d->post_relu && d->groups == 1 &&
           all_bf16(d) && pass != BE_BWD_WEIGHTS && conv_nhwc_act(d) && d->c >= 16 &&
           d->k >= 16 && d->c <= CPU_WINO_NHWC_MAX && d->k <= CPU_WINO_NHWC_MAX &&
           d->kh == 3 && d->kw == 3 && d->stride_h == 1 && d->stride_w == 1 && d->dil_h == 1 &&
           d->dil_w == 1 && d->pad_t == 1 && d->pad_b == 1 && d->pad_l == 1 && d->pad_r == 1 &&
           d->oh == d->h && d->ow == d->w && !cpu_conv_wino16(d, pass) &&
           cpu_wino_nhwc_supported();
}

/* Channels-last (nhwc) operands for the training passes of an FP32
 * convolution whose input is in the blocked layout with a channel count the
 * 16-blocking pads (20 to 32: 60% more to read and multiply), where no pass is
 * Winograd's: oneDNN's brgemm kernel (forward) and its nhwc kernels
 * (gradients) then work on the channels there are, and the plan's reorders
 * move the operands between the layouts. LeNet's conv2 (20 -> 50, 5x5, 12x12
 * at batch 64; ms, blocked / nhwc, 2 threads): forward 1.3 / 0.74, input
 * gradient 1.35 / 1.1, weight gradient 1.6 / 0.88; the whole LeNet step,
 * reorders included, 1.10x and 1.19x the images/s in two paired runs; a
 * net of 24- and 40-channel 3x3, 5x5 and 1x1 convolutions at 32x32, 1.08x.
 * The inference plan keeps the layouts of conv_infer_plan. */
static bool conv_channels_last(const be_conv_desc *d)
{
    /* the forward pass is Winograd's whenever any pass is (the forward and
     * input-gradient rule asks for fewer channels than the weight gradient's) */
    return all_f32(d) && d->groups == 1 && d->src_layout == BE_BLOCKED16 && d->c % 16 != 0 &&
           !cpu_conv_winograd(d, BE_FWD);
}

/* md's dimensions in type dt, channels-last where nhwc, else with its layout
 * left to the primitive. */
static int act_any_md(const dnnl_memory_desc_t *md, dnnl_data_type_t dt, bool nhwc,
                      dnnl_memory_desc_t *out, char *err, size_t errlen)
{
    if (!nhwc)
        return any_md(md, dt, out, err, errlen);
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(out, md->ndims, md->dims, dt, dnnl_nhwc);
    return s == dnnl_success ? 0 : cpu_dnnl_err(s, "memory_desc_init_by_tag", err, errlen);
}

/* The primitive descriptor of op desc cd (a convolution of any pass, made
 * with the direct algorithm): Winograd first where wino, else (or where
 * oneDNN has no such kernel) direct. */
static int conv_pd(be_ctx *ctx, dnnl_convolution_desc_t *cd, bool wino,
                   const_dnnl_primitive_desc_t hint, const_dnnl_primitive_attr_t attr,
                   dnnl_primitive_desc_t *pd, char *err, size_t errlen)
{
    if (wino) {
        cd->alg_kind = dnnl_convolution_winograd;
        if (dnnl_primitive_desc_create(pd, cd, attr, ctx->eng, hint) == dnnl_success)
            return 0;
        cd->alg_kind = dnnl_convolution_direct;
    }
    dnnl_status_t s = dnnl_primitive_desc_create(pd, cd, attr, ctx->eng, hint);
    return s == dnnl_success ? 0 : cpu_dnnl_err(s, "primitive_desc_create", err, errlen);
}

const char *cpu_conv_impl(const be_plan *p, unsigned pass)
{
    if ((pass == BE_FWD && p->own_fwd) || (pass == BE_BWD_DATA && p->own_bwd_data) ||
        (pass == BE_BWD_WEIGHTS && p->own_bwd_weights))
        return p->own_nhwc ? "kiln_wino_2x3:bf16:nhwc" :
               p->own_bf16 ? "kiln_wino_2x3:bf16" : "kiln_wino_2x3";
    const cpu_prim *c = pass == BE_FWD ? &p->fwd : pass == BE_BWD_DATA ? &p->bwd_data :
                        &p->bwd_weights;
    const_dnnl_primitive_desc_t pd = NULL;
    const char *name = NULL;
    if (!c->prim || dnnl_primitive_get_primitive_desc(c->prim, &pd) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success)
        return NULL;
    return name;
}

/* An inference plan (d->infer): one forward_inference primitive with the
 * post-ops, on the input and output layouts oneDNN picks for the training
 * plan's forward pass (asked first: left to itself, inference would pick
 * channels-last layouts that the net's blocked activations must be
 * reordered to and from, and with an addend only its reference kernel), so
 * that the addend is read in that layout too (reordered into it through the
 * weights' staging buffer, which an inference pass does not use, where the
 * caller's differs). The weights are reordered into a buffer of the plan's
 * own (be_plan.wcache) when their stamp changes. */
static int conv_infer_plan(be_ctx *ctx, const be_conv_desc *d, const conv_mds *m, be_plan *p,
                           char *err, size_t errlen)
{
    int rc = -1;
    const dnnl_data_type_t ct = cpu_dt(d->wdtype);
    dnnl_memory_desc_t asrc, awei, ydst, src, dst;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    int args[5] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST }, nargs = 3;
    if (d->bias)
        args[nargs++] = DNNL_ARG_BIAS;
    if (d->post_add)
        args[nargs++] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1;
    if (act_any_md(&m->src, ct, conv_nhwc_act(d), &asrc, err, errlen) < 0 ||
        any_md(&m->wei, ct, &awei, err, errlen) < 0 ||
        act_any_md(&m->dst, cpu_dt(d->dst_dtype), conv_nhwc_act(d), &ydst, err, errlen) < 0)
        goto out;
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training,
             dnnl_convolution_direct, &asrc, &awei, d->bias ? &m->bias : NULL, &ydst,
             m->strides, m->dil, m->pad_l, m->pad_r), "convolution_forward_desc_init");
    if (conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_FWD), NULL, ctx->attr, &pd, err, errlen) < 0)
        goto out;
    src = *pd_md(pd, DNNL_ARG_SRC);
    dst = *pd_md(pd, DNNL_ARG_DST);
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
             dnnl_convolution_direct, &src, &awei, d->bias ? &m->bias : NULL, &dst,
             m->strides, m->dil, m->pad_l, m->pad_r), "convolution_forward_desc_init");
    /* the addend read in the primitive's own output layout (dst) */
    if (cpu_post_attr(ctx, d->post_add ? &dst : NULL, d->post_relu, d->post_alpha, &attr, err,
                      errlen) < 0)
        goto out;
    if (conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_FWD), NULL, attr, &pd, err, errlen) < 0)
        goto out;
    p->infer_add = d->post_add;
    if (cpu_prim_make(ctx, pd, nargs, args, &p->fwd, err, errlen) < 0 ||
        cpu_reorder_make(ctx, &m->src, pd_md(pd, DNNL_ARG_SRC), CPU_TMP_SRC, &p->re[RE_FX], err,
                         errlen) < 0 ||
        cpu_reorder_make(ctx, &m->wei, pd_md(pd, DNNL_ARG_WEIGHTS), CPU_TMP_WEI, &p->re[RE_FW],
                         err, errlen) < 0 ||
        cpu_reorder_make(ctx, pd_md(pd, DNNL_ARG_DST), &m->dst, CPU_TMP_DST, &p->re[RE_FY], err,
                         errlen) < 0 ||
        (d->post_add && cpu_reorder_make(ctx, &m->dst, pd_md(pd, DNNL_ARG_DST), CPU_TMP_WEI,
                                         &p->re[RE_FADD], err, errlen) < 0))
        goto out;
    if (p->re[RE_FW].prim) {
        size_t bytes = dnnl_memory_desc_get_size(pd_md(pd, DNNL_ARG_WEIGHTS));
        if (!(p->wcache = aligned_alloc(64, (bytes + 63) / 64 * 64))) {
            set_err(err, errlen, "cpu backend: cannot allocate %zu bytes for conv weights", bytes);
            goto out;
        }
    }
    rc = 0;
out:
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* A training plan whose convolution cpu_conv_wino16 or cpu_conv_wino_nhwc
 * takes: each asked pass the rule names runs wino16.c's or wino_nhwc.c's
 * kernel, with reorders between the caller's layouts and the kernel's
 * (nChw16c; nhwc), none where they are the same, the buffer of the
 * transformed weights and the weight gradient's partial sums. */
static int own_plan(be_ctx *ctx, const be_conv_desc *d, const conv_mds *m, unsigned passes,
                    be_plan *p, char *err, size_t errlen)
{
    dnnl_memory_desc_t bx, by;
    const dnnl_data_type_t dt = all_bf16(d) ? dnnl_bf16 : dnnl_f32;
    const bool nhwc = !cpu_conv_wino16(d, BE_FWD);
    const dnnl_format_tag_t tag = nhwc ? dnnl_nhwc : dnnl_nChw16c;
    p->own_bf16 = all_bf16(d);
    p->own_nhwc = nhwc;
    for (unsigned pass = BE_FWD; pass <= BE_BWD_WEIGHTS; pass <<= 1)
        if (!(nhwc ? cpu_conv_wino_nhwc(d, pass) : cpu_conv_wino16(d, pass)))
            passes &= ~pass;                /* (bfloat16: the weight gradient is oneDNN's) */
    if (dnnl_memory_desc_init_by_tag(&bx, 4, m->src.dims, dt, tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&by, 4, m->dst.dims, dt, tag) != dnnl_success)
        return set_err(err, errlen, "cpu backend: no %s layout for a Winograd convolution",
                       nhwc ? "nhwc" : "nChw16c");
    /* the forward pass's and the input gradient's transformed weights */
    size_t ubytes = 16 * 16 * 16 * sizeof(float);   /* wino16.c's, FP32 or bfloat16 */
    if (nhwc) {
        const size_t fwd = cpu_wino_nhwc_u_count(d->c, d->k),
                     bwd = cpu_wino_nhwc_u_count(d->k, d->c);
        ubytes = (fwd > bwd ? fwd : bwd) * sizeof(uint16_t);
    }
    if (!(p->wino_u = aligned_alloc(64, (ubytes + 63) / 64 * 64)))
        return set_err(err, errlen, "out of memory");
    p->own_c = d->c;
    p->own_k = d->k;
    p->own_relu = d->relu;
    p->own_n = d->n;
    p->own_h = d->h;
    p->own_w = d->w;
    if (passes & BE_FWD) {
        if (cpu_reorder_make(ctx, &m->src, &bx, CPU_TMP_SRC, &p->re[RE_FX], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &by, &m->dst, CPU_TMP_DST, &p->re[RE_FY], err, errlen) < 0)
            return -1;
        p->own_fwd = true;
    }
    if (passes & BE_BWD_DATA) {
        if (cpu_reorder_make(ctx, &m->dst, &by, CPU_TMP_DST, &p->re[RE_BDY], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &bx, &m->src, CPU_TMP_SRC, &p->re[RE_BDX], err, errlen) < 0)
            return -1;
        p->own_bwd_data = true;
    }
    if (passes & BE_BWD_WEIGHTS) {
        if (!(p->wino_dw = aligned_alloc(64, cpu_wino16_bwd_w_scratch())))
            return set_err(err, errlen, "out of memory");
        if (cpu_reorder_make(ctx, &m->src, &bx, CPU_TMP_SRC, &p->re[RE_WX], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m->dst, &by, CPU_TMP_DST, &p->re[RE_WDY], err, errlen) < 0)
            return -1;
        p->own_bwd_weights = true;
    }
    return 0;
}

int cpu_conv_plan(be_ctx *ctx, const be_conv_desc *d, unsigned passes, be_plan **out,
                  char *err, size_t errlen)
{
    int rc = -1;
    conv_mds m;
    /* the primitives' operands: computed in ct; the forward output, the
     * input gradient and the weight gradient in the tensors' own types */
    dnnl_memory_desc_t asrc, awei, adst, ydst, dxsrc, dwwei;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL, relu_pd = NULL;
    dnnl_primitive_attr_t relu_attr = NULL;
    be_plan *p = NULL;
    const dnnl_data_type_t ct = cpu_dt(d->wdtype);

    /* channels-last operands where the caller's input or output is
     * (backend.act_layout), or where conv_channels_last says so; both sides,
     * as oneDNN resolves an "any" beside an nhwc with its reference kernel
     * (an image's 3 channels into 50: 550 ms a pass). An inference plan makes
     * its own. */
    const bool nhwc = conv_channels_last(d) || conv_nhwc_act(d);

    *out = NULL;
    if (conv_mds_init(d, &m, err, errlen) < 0 ||
        act_any_md(&m.src, ct, nhwc, &asrc, err, errlen) < 0 ||
        any_md(&m.wei, ct, &awei, err, errlen) < 0 ||
        act_any_md(&m.dst, ct, nhwc, &adst, err, errlen) < 0 ||
        act_any_md(&m.dst, cpu_dt(d->dst_dtype), nhwc, &ydst, err, errlen) < 0 ||
        act_any_md(&m.src, cpu_dt(d->src_dtype), nhwc, &dxsrc, err, errlen) < 0 ||
        any_md(&m.dwei, dnnl_f32, &dwwei, err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_CONV, err, errlen)))
        goto out;
    p->round_y = cpu_round_count(&m.dst, d->dst_dtype);
    p->round_dx = cpu_round_count(&m.src, d->src_dtype);
    if (d->relu && d->infer) {
        set_err(err, errlen, "cpu backend: a convolution's ReLU is post_relu in an inference "
                "plan, relu in a training plan");
        goto out;
    }
    if (d->infer || d->post_add || d->post_relu) {
        if (!d->infer || passes != BE_FWD) {
            set_err(err, errlen, "cpu backend: post-ops need an inference plan (forward only)");
            goto out;
        }
        if (conv_infer_plan(ctx, d, &m, p, err, errlen) < 0)
            goto out;
        *out = p;
        p = NULL;
        rc = 0;
        goto out;
    }

    /* The forward descriptor is needed as the hint of the backward ones even
     * when the forward pass itself is not asked for. */
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training,
             dnnl_convolution_direct, &asrc, &awei, d->bias ? &m.bias : NULL, &ydst,
             m.strides, m.dil, m.pad_l, m.pad_r), "convolution_forward_desc_init");
    if (conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_FWD), NULL, ctx->attr, &fwd_pd, err, errlen) < 0)
        goto out;
    if ((cpu_conv_wino16(d, BE_FWD) || cpu_conv_wino_nhwc(d, BE_FWD)) &&
        own_plan(ctx, d, &m, passes, p, err, errlen) < 0)
        goto out;
    if ((passes & BE_FWD) && !p->own_fwd) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS };
        /* d->relu: the same kernel with oneDNN's ReLU post-op (cd is still
         * the forward descriptor); fwd_pd stays the backward passes' hint */
        const_dnnl_primitive_desc_t run = fwd_pd;
        if (d->relu &&
            (cpu_post_attr(ctx, NULL, true, 0.0f, &relu_attr, err, errlen) < 0 ||
             conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_FWD), NULL, relu_attr, &relu_pd, err,
                     errlen) < 0))
            goto out;
        if (relu_pd)
            run = relu_pd;
        if (cpu_prim_make(ctx, run, d->bias ? 4 : 3, args, &p->fwd, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.src, pd_md(run, DNNL_ARG_SRC), CPU_TMP_SRC,
                             &p->re[RE_FX], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.wei, pd_md(run, DNNL_ARG_WEIGHTS), CPU_TMP_WEI,
                             &p->re[RE_FW], err, errlen) < 0 ||
            cpu_reorder_make(ctx, pd_md(run, DNNL_ARG_DST), &m.dst, CPU_TMP_DST,
                             &p->re[RE_FY], err, errlen) < 0)
            goto out;
    }
    if ((passes & BE_BWD_DATA) && !p->own_bwd_data) {
        const int args[] = { DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC };
        DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct,
                 &dxsrc, &awei, &adst, m.strides, m.dil, m.pad_l, m.pad_r),
                 "convolution_backward_data_desc_init");
        if (conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_BWD_DATA), fwd_pd, ctx->attr, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 3, args, &p->bwd_data, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.dst, pd_md(pd, DNNL_ARG_DIFF_DST), CPU_TMP_DST,
                             &p->re[RE_BDY], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.wei, pd_md(pd, DNNL_ARG_WEIGHTS), CPU_TMP_WEI,
                             &p->re[RE_BW], err, errlen) < 0 ||
            cpu_reorder_make(ctx, pd_md(pd, DNNL_ARG_DIFF_SRC), &m.src, CPU_TMP_SRC,
                             &p->re[RE_BDX], err, errlen) < 0)
            goto out;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if ((passes & BE_BWD_WEIGHTS) && !p->own_bwd_weights) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                             DNNL_ARG_DIFF_BIAS };
        DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(&cd,
                 dnnl_convolution_direct, &asrc, &dwwei, d->bias ? &m.bias : NULL, &adst,
                 m.strides, m.dil, m.pad_l, m.pad_r), "convolution_backward_weights_desc_init");
        if (conv_pd(ctx, &cd, cpu_conv_winograd(d, BE_BWD_WEIGHTS), fwd_pd, ctx->attr, &pd, err, errlen) < 0)
            goto out;
        if (ct != dnnl_f32 && !is_jit(pd)) {
            dnnl_memory_desc_t fsrc, fdst;
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
            if (any_md(&m.src, dnnl_f32, &fsrc, err, errlen) < 0 ||
                any_md(&m.dst, dnnl_f32, &fdst, err, errlen) < 0)
                goto out;
            DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(&cd,
                     dnnl_convolution_direct, &fsrc, &dwwei, d->bias ? &m.bias : NULL, &fdst,
                     m.strides, m.dil, m.pad_l, m.pad_r),
                     "convolution_backward_weights_desc_init");
            if (cpu_pd(ctx, &cd, NULL, &pd, err, errlen) < 0)
                goto out;
        }
        if (
            cpu_prim_make(ctx, pd, d->bias ? 4 : 3, args, &p->bwd_weights, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.src, pd_md(pd, DNNL_ARG_SRC), CPU_TMP_SRC,
                             &p->re[RE_WX], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &m.dst, pd_md(pd, DNNL_ARG_DIFF_DST), CPU_TMP_DST,
                             &p->re[RE_WDY], err, errlen) < 0 ||
            cpu_reorder_make(ctx, pd_md(pd, DNNL_ARG_DIFF_WEIGHTS), &m.dwei, CPU_TMP_WEI,
                             &p->re[RE_WDW], err, errlen) < 0)
            goto out;
    }
    *out = p;
    p = NULL;
    rc = 0;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (relu_pd)
        dnnl_primitive_desc_destroy(relu_pd);
    if (relu_attr)
        dnnl_primitive_attr_destroy(relu_attr);
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    cpu_backend.plan_free(ctx, p);
    return rc;
}

/* Each pass: inputs reordered into the primitive's layouts where they differ
 * from the plain ones, the primitive, the output reordered back. */
int cpu_conv_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                 be_buf *y, char *err, size_t errlen)
{
    int fail = 0;
    if (p->own_fwd) {
        void *xs = cpu_stage_in(ctx, &p->re[RE_FX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen);
        void *ys = cpu_stage_out(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y));
        if (fail)
            return -1;
        if (p->own_nhwc) {
            uint16_t *u = (uint16_t *)(void *)p->wino_u;
            cpu_wino_nhwc_weights(cpu_ptr(w), p->own_k, p->own_c, false, u);
            cpu_wino_nhwc_run(xs, p->own_c, u, b ? cpu_ptr(b) : NULL, p->own_relu, ys, p->own_k,
                              p->own_n, p->own_h, p->own_w);
        } else if (p->own_bf16) {
            uint16_t *u = (uint16_t *)(void *)p->wino_u;
            cpu_wino16_weights_bf16(cpu_ptr(w), false, u);
            cpu_wino16_run_bf16(xs, u, b ? cpu_ptr(b) : NULL, p->own_relu, ys, p->own_n,
                                p->own_h, p->own_w);
        } else {
            cpu_wino16_weights(cpu_ptr(w), false, p->wino_u);
            cpu_wino16_run(xs, p->wino_u, b ? cpu_ptr(b) : NULL, p->own_relu, ys, p->own_n,
                           p->own_h, p->own_w);
        }
        return cpu_stage_done(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y), err, errlen);
    }
    if (!p->fwd.prim)
        return set_err(err, errlen, "cpu backend: this plan was made without that pass");
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_FX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen),
                     cpu_stage_in(ctx, &p->re[RE_FW], CPU_TMP_WEI, cpu_ptr(w), &fail, err, errlen),
                     cpu_stage_out(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y)), cpu_ptr(b) };
    if (fail || cpu_prim_run(ctx, &p->fwd, data, err, errlen) < 0 ||
        cpu_stage_done(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_conv_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                      char *err, size_t errlen)
{
    int fail = 0;
    if (p->own_bwd_data) {
        void *dys = cpu_stage_in(ctx, &p->re[RE_BDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                 errlen);
        void *dxs = cpu_stage_out(ctx, &p->re[RE_BDX], CPU_TMP_SRC, cpu_ptr(dx));
        if (fail)
            return -1;
        if (p->own_nhwc) {
            uint16_t *u = (uint16_t *)(void *)p->wino_u;
            cpu_wino_nhwc_weights(cpu_ptr(w), p->own_k, p->own_c, true, u);
            cpu_wino_nhwc_run(dys, p->own_k, u, NULL, false, dxs, p->own_c, p->own_n, p->own_h,
                              p->own_w);
        } else if (p->own_bf16) {
            uint16_t *u = (uint16_t *)(void *)p->wino_u;
            cpu_wino16_weights_bf16(cpu_ptr(w), true, u);
            cpu_wino16_run_bf16(dys, u, NULL, false, dxs, p->own_n, p->own_h, p->own_w);
        } else {
            cpu_wino16_weights(cpu_ptr(w), true, p->wino_u);
            cpu_wino16_run(dys, p->wino_u, NULL, false, dxs, p->own_n, p->own_h, p->own_w);
        }
        return cpu_stage_done(ctx, &p->re[RE_BDX], CPU_TMP_SRC, cpu_ptr(dx), err, errlen);
    }
    if (!p->bwd_data.prim)
        return set_err(err, errlen, "cpu backend: this plan was made without that pass");
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_BDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                  errlen),
                     cpu_stage_in(ctx, &p->re[RE_BW], CPU_TMP_WEI, cpu_ptr(w), &fail, err, errlen),
                     cpu_stage_out(ctx, &p->re[RE_BDX], CPU_TMP_SRC, cpu_ptr(dx)) };
    if (fail || cpu_prim_run(ctx, &p->bwd_data, data, err, errlen) < 0 ||
        cpu_stage_done(ctx, &p->re[RE_BDX], CPU_TMP_SRC, cpu_ptr(dx), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(dx), p->round_dx);
    return 0;
}

int cpu_conv_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                         be_buf *dw, be_buf *db, char *err, size_t errlen)
{
    int fail = 0;
    if (p->own_bwd_weights) {
        void *xs = cpu_stage_in(ctx, &p->re[RE_WX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen);
        void *dys = cpu_stage_in(ctx, &p->re[RE_WDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                 errlen);
        if (fail)
            return -1;
        cpu_wino16_bwd_w(xs, dys, cpu_ptr(dw), db ? cpu_ptr(db) : NULL, p->own_n, p->own_h,
                         p->own_w, p->wino_dw);
        return 0;
    }
    if (!p->bwd_weights.prim)
        return set_err(err, errlen, "cpu backend: this plan was made without that pass");
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_WX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen),
                     cpu_stage_in(ctx, &p->re[RE_WDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                  errlen),
                     cpu_stage_out(ctx, &p->re[RE_WDW], CPU_TMP_WEI, cpu_ptr(dw)), cpu_ptr(db) };
    if (fail || cpu_prim_run(ctx, &p->bwd_weights, data, err, errlen) < 0)
        return -1;
    return cpu_stage_done(ctx, &p->re[RE_WDW], CPU_TMP_WEI, cpu_ptr(dw), err, errlen);
}

int cpu_conv_infer(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, uint64_t w_stamp,
                   const be_buf *b, const be_buf *addend, be_buf *y, char *err, size_t errlen)
{
    int fail = 0;
    void *wp = cpu_ptr(w);
    if (!p->fwd.prim || p->infer_add != (addend != NULL))
        return set_err(err, errlen, "cpu backend: conv_infer on a plan not made for it, or "
                       "an addend %s", addend ? "it does not take" : "missing");
    if (p->wcache) {
        if (w_stamp == 0 || w_stamp != p->wstamp) {
            void *data[] = { cpu_ptr(w), p->wcache };
            p->wstamp = 0;
            if (cpu_prim_run(ctx, &p->re[RE_FW], data, err, errlen) < 0)
                return -1;
            p->wstamp = w_stamp;
        }
        wp = p->wcache;
    }
    /* in the order conv_infer_plan declared them: the bias and the addend
     * where the plan has them */
    void *data[5] = { cpu_stage_in(ctx, &p->re[RE_FX], CPU_TMP_SRC, cpu_ptr(x), &fail, err,
                                   errlen),
                      wp, cpu_stage_out(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y)) };
    int k = 3;
    if (b)
        data[k++] = cpu_ptr(b);
    if (addend)
        data[k++] = cpu_stage_in(ctx, &p->re[RE_FADD], CPU_TMP_WEI, cpu_ptr(addend), &fail, err,
                                 errlen);
    if (k != p->fwd.nargs)
        return set_err(err, errlen, "cpu backend: conv_infer with%s a bias on a plan made "
                       "with%s one", b ? "" : "out", b ? "out" : "");
    if (fail || cpu_prim_run(ctx, &p->fwd, data, err, errlen) < 0 ||
        cpu_stage_done(ctx, &p->re[RE_FY], CPU_TMP_DST, cpu_ptr(y), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}
