/* Inference fusion (engine/net_fuse.c, the backend's bn_fold and conv_infer):
 * a convolution with its batch norm folded in and a residual add and ReLU as
 * post-ops, against the same layers run one by one through the backend's
 * own ops (conv_fwd, bn_fwd on the running statistics, add_fwd, act_fwd),
 * on random weights and non-trivial statistics (means away from 0,
 * variances from 0.001 to 2, scales of both signs); and whole nets, fused
 * against KILN_INFER_FUSE=0, as their parameters change.
 *
 * The tolerance (the table TOL below). Both paths approximate the same exact
 * y = act(s (w . x + b - mean) + shift + r), s = scale / sqrt(var + eps), so
 * |fused - unfused| <= |fused - exact| + |unfused - exact|. Per output
 * element, with K products in its sum and
 *     M = |s| (sum|w x| + |b| + |mean|) + |shift| + |r|,
 * each path is within:
 *  - (K + 1) u32 M for its FP32 accumulation (gamma_{K+1}, any order), plus
 *    at most 7 more roundings of u32 M for the affine steps (s: a square
 *    root and a division; unfused: the subtraction, product and sum of batch
 *    norm and the add; fused: w * s, the bias's three operations and the
 *    add): ACC (K + EXTRA) M over both paths, ACC = 2 u32 = 2^-23 and EXTRA =
 *    8; bfloat16 products are exact in FP32 but AVX-512 BF16 rounds once per
 *    pair, so ACC doubles there (as in test_engine_amp_ops.c);
 *  - in a 16-bit type: the weights rounded into it (the fused path rounds
 *    w s, the unfused one w, each within u |w s| relative): WROUND = 2 u M;
 *    and the outputs stored in it (the unfused path rounds after the
 *    convolution, the batch norm and the add; the fused one once; ReLU is
 *    exact and 1-Lipschitz): OROUND = 4 u M; FP16 values below its normal
 *    range also lose up to half a subnormal step, 2^-25, per rounding: ABS.
 * The bound is worst-case, so a correct fold never fails it; a wrong one (a
 * channel's factor misplaced, eps or the mean left out, the add or the ReLU
 * in the wrong order) is off by a sizeable part of |y|, far beyond it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/elementwise.h"
#include "engine/net.h"
#include "engine/rng.h"

static const struct fold_tol {
    be_dtype dt;
    const char *name;
    double u;           /* unit roundoff of the activations' and weights' type */
    double acc;         /* per accumulated term and unit of M, both paths */
    double extra;       /* the affine steps' roundings, in terms */
    double wround;      /* weights rounded into the type, units of u M */
    double oround;      /* outputs rounded into the type, units of u M */
    double abs;         /* absolute: FP16 subnormals */
} TOL[] = {
    { BE_F32, "fp32", 0, 0x1p-23, 8, 0, 0, 0 },
    { BE_BF16, "bf16", 0x1p-8, 0x1p-22, 8, 2, 4, 0 },
    { BE_F16, "fp16", 0x1p-11, 0x1p-23, 8, 2, 4, 6 * 0x1p-25 },
};
#define NTOL (sizeof TOL / sizeof TOL[0])

static const backend *be = &cpu_backend;
static be_ctx *ctx;

static int setup(void **state)
{
    char err[256];
    return be->ctx_create(0, &ctx, err, sizeof err) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    be->ctx_free(ctx);
    return 0;
}

/* ---- tensors ------------------------------------------------------------------ */

/* Values in [lo, hi], exactly representable in bfloat16 and FP16 (8
 * significant bits, magnitudes from 2^-10 up), so that every type holds the
 * same inputs. */
static float *values(rng *r, size_t n, double lo, double hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        float v = ew_bf16_to_f32(ew_f32_to_bf16((float)rng_range(r, lo, hi)));
        if (fabsf(v) < 0x1p-10f)
            v = v < 0 ? -0x1p-10f : 0x1p-10f;
        p[i] = v;
    }
    return p;
}

/* A host NCHW tensor in a layout: blocked pads c to 16 with zeros. */
static size_t layout_elems(int n, int c, int hw, be_layout l)
{
    return (size_t)n * be_act_elems(c, (size_t)hw, l);
}

static float *to_layout(const float *x, int n, int c, int hw, be_layout l)
{
    size_t total = layout_elems(n, c, hw, l);
    float *y = calloc(total, sizeof *y);
    assert_non_null(y);
    int cp = l == BE_BLOCKED16 ? (c + 15) / 16 * 16 : c;
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (int s = 0; s < hw; s++) {
                size_t src = ((size_t)b * c + ch) * hw + s;
                size_t dst = l == BE_BLOCKED16 ?
                             (((size_t)b * (cp / 16) + ch / 16) * hw + s) * 16 + ch % 16 : src;
                y[dst] = x[src];
            }
    return y;
}

/* Back to NCHW; *pad_ok false when a padding channel is not zero. */
static float *from_layout(const float *y, int n, int c, int hw, be_layout l, bool *pad_ok)
{
    float *x = malloc((size_t)n * c * hw * sizeof *x);
    assert_non_null(x);
    int cp = l == BE_BLOCKED16 ? (c + 15) / 16 * 16 : c;
    *pad_ok = true;
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < cp; ch++)
            for (int s = 0; s < hw; s++) {
                size_t at = l == BE_BLOCKED16 ?
                            (((size_t)b * (cp / 16) + ch / 16) * hw + s) * 16 + ch % 16 :
                            ((size_t)b * c + ch) * hw + s;
                if (ch >= c)
                    *pad_ok = *pad_ok && y[at] == 0.0f;
                else
                    x[((size_t)b * c + ch) * hw + s] = y[at];
            }
    return x;
}

/* A buffer of n elements of type dt holding v (NULL: zeros). */
static be_buf *up(be_dtype dt, const float *v, size_t n)
{
    char err[256] = "";
    size_t bytes = n * be->dtype_bytes(dt);
    be_buf *b = be->buf_alloc(ctx, bytes + 64, err, sizeof err);
    assert_non_null(b);
    if (!v)
        return b;
    void *host = malloc(bytes);
    assert_non_null(host);
    for (size_t i = 0; i < n; i++) {
        if (dt == BE_BF16)
            ((uint16_t *)host)[i] = ew_f32_to_bf16(v[i]);
        else
            ((float *)host)[i] = dt == BE_F16 ? ew_round_f16(v[i]) : v[i];
    }
    assert_int_equal(be->buf_upload(ctx, b, 0, host, bytes, err, sizeof err), 0);
    free(host);
    return b;
}

static float *down(be_dtype dt, const be_buf *b, size_t n)
{
    char err[256] = "";
    size_t bytes = n * be->dtype_bytes(dt);
    void *host = malloc(bytes);
    float *out = malloc(n * sizeof *out);
    assert_true(host && out);
    assert_int_equal(be->buf_download(ctx, b, 0, host, bytes, err, sizeof err), 0);
    for (size_t i = 0; i < n; i++)
        out[i] = dt == BE_BF16 ? ew_bf16_to_f32(((uint16_t *)host)[i]) : ((float *)host)[i];
    free(host);
    return out;
}

/* ---- the cases ------------------------------------------------------------------ */

typedef struct fuse_case {
    const char *what;
    int n, c, h, w, k, kh, kw, stride, pad, groups;
    bool bias;          /* the convolution's own bias */
    bool add, relu;
    float alpha;        /* leaky ReLU's slope */
    be_layout layout;   /* of x, y and the addend */
} fuse_case;

static const fuse_case CASES[] = {
    { "conv+bn", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, true, false, false, 0, BE_BLOCKED16 },
    { "conv+bn+relu", 2, 3, 9, 9, 8, 3, 3, 2, 1, 1, false, false, true, 0, BE_PLAIN },
    { "conv+bn+add+relu", 2, 16, 8, 8, 32, 3, 3, 1, 1, 1, false, true, true, 0, BE_BLOCKED16 },
    { "conv+bn+add+relu, grouped, plain", 3, 8, 6, 6, 8, 3, 3, 1, 1, 2, true, true, true, 0,
      BE_PLAIN },
    { "conv 1x1 stride 2+bn+leaky relu", 2, 16, 8, 8, 24, 1, 1, 2, 0, 1, false, false, true,
      0.1f, BE_BLOCKED16 },
    { "conv+bn+add, 24 channels", 2, 32, 6, 6, 24, 3, 3, 1, 1, 1, true, true, false, 0,
      BE_BLOCKED16 },
};

/* The host data of one case: x, w (K x C/g x KH x KW), the conv bias, the
 * batch norm's scale, shift, mean and var, the addend (NCHW). */
typedef struct fuse_data {
    int oh, ow, per_k, K;
    float *x, *w, *b, *scale, *shift, *mean, *var, *r;
} fuse_data;

static void make_data(const fuse_case *c, rng *r, fuse_data *d)
{
    d->oh = (c->h + 2 * c->pad - c->kh) / c->stride + 1;
    d->ow = (c->w + 2 * c->pad - c->kw) / c->stride + 1;
    d->per_k = c->c / c->groups * c->kh * c->kw;
    d->K = d->per_k;
    d->x = values(r, (size_t)c->n * c->c * c->h * c->w, -1, 1);
    d->w = values(r, (size_t)c->k * d->per_k, -0.5, 0.5);
    d->b = values(r, (size_t)c->k, -0.5, 0.5);
    d->scale = values(r, (size_t)c->k, -1.5, 1.5);
    d->shift = values(r, (size_t)c->k, -0.5, 0.5);
    d->mean = values(r, (size_t)c->k, -1, 1);
    d->var = values(r, (size_t)c->k, 0.001, 2);
    d->r = values(r, (size_t)c->n * c->k * d->oh * d->ow, -1, 1);
}

static void free_data(fuse_data *d)
{
    free(d->x);
    free(d->w);
    free(d->b);
    free(d->scale);
    free(d->shift);
    free(d->mean);
    free(d->var);
    free(d->r);
}

/* M of each output element (the comment at the top), in double on the host. */
static double *magnitudes(const fuse_case *c, const fuse_data *d, float eps)
{
    size_t total = (size_t)c->n * c->k * d->oh * d->ow;
    double *m = calloc(total, sizeof *m);
    assert_non_null(m);
    int cg = c->c / c->groups, kg = c->k / c->groups;
    for (int b = 0; b < c->n; b++)
        for (int k = 0; k < c->k; k++) {
            double s = fabs((double)d->scale[k] / sqrt((double)d->var[k] + eps));
            int g = k / kg;
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double sum = 0;
                    for (int ci = 0; ci < cg; ci++)
                        for (int ky = 0; ky < c->kh; ky++)
                            for (int kx = 0; kx < c->kw; kx++) {
                                int iy = oy * c->stride - c->pad + ky;
                                int ix = ox * c->stride - c->pad + kx;
                                if (iy < 0 || ix < 0 || iy >= c->h || ix >= c->w)
                                    continue;
                                sum += fabs((double)d->w[((size_t)k * cg + ci) * c->kh * c->kw +
                                                         ky * c->kw + kx] *
                                            d->x[(((size_t)b * c->c + g * cg + ci) * c->h + iy) *
                                                 c->w + ix]);
                            }
                    size_t at = (((size_t)b * c->k + k) * d->oh + oy) * d->ow + ox;
                    m[at] = s * (sum + (c->bias ? fabs(d->b[k]) : 0) + fabs(d->mean[k])) +
                            fabs(d->shift[k]) + (c->add ? fabs(d->r[at]) : 0);
                }
        }
    return m;
}

static be_conv_desc conv_desc(const fuse_case *c, const fuse_data *d, be_dtype dt)
{
    return (be_conv_desc){
        .n = c->n, .c = c->c, .h = c->h, .w = c->w, .k = c->k, .oh = d->oh, .ow = d->ow,
        .kh = c->kh, .kw = c->kw, .stride_h = c->stride, .stride_w = c->stride,
        .pad_t = c->pad, .pad_l = c->pad, .pad_b = c->pad, .pad_r = c->pad, .dil_h = 1,
        .dil_w = 1, .groups = c->groups, .bias = c->bias, .src_layout = c->layout,
        .dst_layout = c->layout, .src_dtype = dt, .dst_dtype = dt, .wdtype = dt,
    };
}

/* The layers one by one: conv_fwd, bn_fwd (inference), add_fwd, act_fwd. */
static float *run_unfused(const fuse_case *c, const fuse_data *d, be_dtype dt, float eps)
{
    char err[512] = "";
    int ohw = d->oh * d->ow;
    size_t xn = layout_elems(c->n, c->c, c->h * c->w, c->layout);
    size_t yn = layout_elems(c->n, c->k, ohw, c->layout);
    float *xl = to_layout(d->x, c->n, c->c, c->h * c->w, c->layout);
    float *rl = to_layout(d->r, c->n, c->k, ohw, c->layout);
    be_buf *x = up(dt, xl, xn), *w = up(dt, d->w, (size_t)c->k * d->per_k);
    be_buf *b = c->bias ? up(BE_F32, d->b, (size_t)c->k) : NULL;
    be_buf *sc = up(BE_F32, d->scale, (size_t)c->k), *sh = up(BE_F32, d->shift, (size_t)c->k);
    be_buf *mu = up(BE_F32, d->mean, (size_t)c->k), *va = up(BE_F32, d->var, (size_t)c->k);
    be_buf *r = up(dt, rl, yn), *y1 = up(dt, NULL, yn), *y2 = up(dt, NULL, yn);
    be_buf *y3 = up(dt, NULL, yn), *y4 = up(dt, NULL, yn);
    be_plan *pc = NULL, *pb = NULL, *pa = NULL, *pr = NULL;
    be_conv_desc cd = conv_desc(c, d, dt);
    be_bn_desc bd = { .n = c->n, .c = c->k, .h = d->oh, .w = d->ow, .eps = eps,
                      .layout = c->layout, .dtype = dt };
    be_add_desc ad = { .n = c->n, .k = 2, .size = (size_t)c->k * ohw, .layout = c->layout,
                       .c = c->k, .dtype = dt };
    be_act_desc rd = { .alg = BE_ACT_RELU, .n = c->n, .size = (size_t)c->k * ohw,
                       .alpha = c->alpha, .layout = c->layout, .c = c->k, .dtype = dt };
    assert_int_equal(be->conv_plan(ctx, &cd, BE_FWD, &pc, err, sizeof err), 0);
    assert_int_equal(be->bn_plan(ctx, &bd, BE_FWD, &pb, err, sizeof err), 0);
    assert_int_equal(be->conv_fwd(ctx, pc, x, w, b, y1, err, sizeof err), 0);
    assert_int_equal(be->bn_fwd(ctx, pb, false, y1, sc, sh, mu, va, y2, err, sizeof err), 0);
    be_buf *out = y2;
    if (c->add) {
        const be_buf *xs[2] = { out, r };
        assert_int_equal(be->add_plan(ctx, &ad, &pa, err, sizeof err), 0);
        assert_int_equal(be->add_fwd(ctx, pa, xs, y3, err, sizeof err), 0);
        out = y3;
    }
    if (c->relu) {
        assert_int_equal(be->act_plan(ctx, &rd, BE_FWD, &pr, err, sizeof err), 0);
        assert_int_equal(be->act_fwd(ctx, pr, out, y4, err, sizeof err), 0);
        out = y4;
    }
    float *got = down(dt, out, yn);
    bool pad_ok;
    float *plain = from_layout(got, c->n, c->k, ohw, c->layout, &pad_ok);
    assert_true(pad_ok);
    free(got);
    free(xl);
    free(rl);
    be_buf *bufs[] = { x, w, b, sc, sh, mu, va, r, y1, y2, y3, y4 };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    be_plan *plans[] = { pc, pb, pa, pr };
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        be->plan_free(ctx, plans[i]);
    return plain;
}

/* The fused pass: bn_fold (then the cast into dt, as engine/net_fuse.c does),
 * conv_infer with the post-ops. With refold, the batch norm's scale is
 * negated and folded again into the same buffers after a first pass, which
 * then runs with a new stamp: the result must be the new fold's. */
static float *run_fused(const fuse_case *c, const fuse_data *d, be_dtype dt, float eps,
                        bool refold)
{
    char err[512] = "";
    int ohw = d->oh * d->ow;
    size_t wn = (size_t)c->k * d->per_k;
    size_t xn = layout_elems(c->n, c->c, c->h * c->w, c->layout);
    size_t yn = layout_elems(c->n, c->k, ohw, c->layout);
    float *xl = to_layout(d->x, c->n, c->c, c->h * c->w, c->layout);
    float *rl = to_layout(d->r, c->n, c->k, ohw, c->layout);
    float *neg = malloc((size_t)c->k * sizeof *neg);
    assert_non_null(neg);
    for (int k = 0; k < c->k; k++)
        neg[k] = -d->scale[k];
    be_buf *x = up(dt, xl, xn), *w = up(BE_F32, d->w, wn);
    be_buf *b = c->bias ? up(BE_F32, d->b, (size_t)c->k) : NULL;
    be_buf *sc = up(BE_F32, d->scale, (size_t)c->k), *sh = up(BE_F32, d->shift, (size_t)c->k);
    be_buf *mu = up(BE_F32, d->mean, (size_t)c->k), *va = up(BE_F32, d->var, (size_t)c->k);
    be_buf *nsc = up(BE_F32, neg, (size_t)c->k);
    be_buf *r = c->add ? up(dt, rl, yn) : NULL, *y = up(dt, NULL, yn);
    be_buf *w32 = up(BE_F32, NULL, wn), *wh = up(dt, NULL, wn), *bf = up(BE_F32, NULL, (size_t)c->k);
    be_plan *p = NULL;
    be_conv_desc cd = conv_desc(c, d, dt);
    cd.infer = true;
    cd.bias = true;
    cd.post_add = c->add;
    cd.post_relu = c->relu;
    cd.post_alpha = c->alpha;
    assert_int_equal(be->conv_plan(ctx, &cd, BE_FWD, &p, err, sizeof err), 0);
    for (int pass = 0; pass < (refold ? 2 : 1); pass++) {
        assert_int_equal(be->bn_fold(ctx, w, b, pass ? nsc : sc, sh, mu, va, eps, c->k,
                                     (size_t)d->per_k, w32, bf, err, sizeof err), 0);
        if (dt != BE_F32)
            assert_int_equal(be->cast(ctx, w32, BE_F32, wh, dt, wn, err, sizeof err), 0);
        if (be->conv_infer(ctx, p, x, dt != BE_F32 ? wh : w32, (uint64_t)pass + 1, bf, r, y,
                           err, sizeof err) != 0) {
            print_error("conv_infer: %s\n", err);
            fail();
        }
    }
    float *got = down(dt, y, yn);
    bool pad_ok;
    float *plain = from_layout(got, c->n, c->k, ohw, c->layout, &pad_ok);
    if (!pad_ok) {
        print_error("%s: a padding channel of the output is not zero\n", c->what);
        fail();
    }
    free(got);
    free(xl);
    free(rl);
    free(neg);
    be_buf *bufs[] = { x, w, b, sc, sh, mu, va, nsc, r, y, w32, wh, bf };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    be->plan_free(ctx, p);
    return plain;
}

static bool type_runs(const struct fold_tol *t)
{
    char err[256] = "";
    if (be->dtype_check(ctx, t->dt, err, sizeof err) == 0)
        return true;
    printf("[  SKIPPED ] %s: %s\n", t->name, err);
    return false;
}

static void check_case(const fuse_case *c, const struct fold_tol *t, bool refold)
{
    const float eps = 1e-5f;
    fuse_data d;
    rng r;
    rng_seed(&r, 1234 + (uint64_t)(c - CASES));
    make_data(c, &r, &d);
    if (refold)
        for (int k = 0; k < c->k; k++)
            d.scale[k] = -d.scale[k];       /* the reference runs the second fold's scale */
    float *ref = run_unfused(c, &d, t->dt, eps);
    if (refold)
        for (int k = 0; k < c->k; k++)
            d.scale[k] = -d.scale[k];
    float *got = run_fused(c, &d, t->dt, eps, refold);
    double *m = magnitudes(c, &d, eps);
    size_t total = (size_t)c->n * c->k * d.oh * d.ow;
    double worst = 0;
    for (size_t i = 0; i < total; i++) {
        double tol = (t->acc * (d.K + t->extra) + (t->wround + t->oround) * t->u) * m[i] + t->abs;
        double e = fabs((double)got[i] - ref[i]);
        worst = e / tol > worst ? e / tol : worst;
        if (!(e <= tol)) {
            print_error("%s, %s%s: element %zu is %.9g, unfused %.9g (error %.3g, tolerance "
                        "%.3g)\n", c->what, t->name, refold ? ", folded again" : "", i,
                        (double)got[i], (double)ref[i], e, tol);
            fail();
        }
    }
    printf("  %s, %s%s: %zu elements, largest error %.3f of the tolerance\n", c->what, t->name,
           refold ? ", folded again" : "", total, worst);
    free(ref);
    free(got);
    free(m);
    free_data(&d);
}

static void test_fold_cases(void **state)
{
    for (size_t t = 0; t < NTOL; t++) {
        if (!type_runs(&TOL[t]))
            continue;
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
            check_case(&CASES[i], &TOL[t], false);
    }
}

/* A plan that keeps its weights between calls takes new ones with a new
 * stamp. */
static void test_fold_again(void **state)
{
    for (size_t t = 0; t < NTOL; t++)
        if (type_runs(&TOL[t]))
            check_case(&CASES[2], &TOL[t], true);
}

/* bn_fold against ew_bn_fold_*: the per-channel factor lands on every weight
 * of its own output channel, and a missing bias counts as 0. */
static void test_fold_values(void **state)
{
    char err[256] = "";
    const int k = 3;
    const size_t per_k = 4;
    float w[12], sc[3] = { 2.0f, -0.5f, 1.0f }, sh[3] = { 0.25f, 1.0f, -2.0f };
    float mu[3] = { 1.0f, -1.0f, 0.5f }, va[3] = { 3.0f, 0.25f, 1.0f }, bias[3] = { 1, 2, 3 };
    for (int i = 0; i < 12; i++)
        w[i] = (float)(i + 1);
    be_buf *bw = up(BE_F32, w, 12), *bb = up(BE_F32, bias, 3), *bsc = up(BE_F32, sc, 3);
    be_buf *bsh = up(BE_F32, sh, 3), *bmu = up(BE_F32, mu, 3), *bva = up(BE_F32, va, 3);
    be_buf *wo = up(BE_F32, NULL, 12), *bo = up(BE_F32, NULL, 3);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        assert_int_equal(be->bn_fold(ctx, bw, with_bias ? bb : NULL, bsc, bsh, bmu, bva, 0.5f, k,
                                     per_k, wo, bo, err, sizeof err), 0);
        float *gw = down(BE_F32, wo, 12), *gb = down(BE_F32, bo, 3);
        for (int c = 0; c < k; c++) {
            double s = sc[c] / sqrt(va[c] + 0.5);
            for (size_t j = 0; j < per_k; j++)
                assert_float_equal(gw[c * per_k + j], w[c * per_k + j] * s, 1e-6 * fabs(w[c * per_k + j] * s));
            double want = ((with_bias ? bias[c] : 0.0) - mu[c]) * s + sh[c];
            assert_float_equal(gb[c], want, 1e-6 * (1 + fabs(want)));
        }
        free(gw);
        free(gb);
    }
    be_buf *bufs[] = { bw, bb, bsc, bsh, bmu, bva, wo, bo };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

/* ---- whole nets --------------------------------------------------------------- */

/* resnet20's pattern in small: conv+bn+relu, conv+bn+add+relu with an
 * identity shortcut, a strided block with a 1x1 projection and batch norm on
 * both branches, then pooling and a dense head. */
static const char *RESNET_SMALL =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1, \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\", \"name\": \"r1\"},"
    " {\"type\": \"conv2d\", \"name\": \"a1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1, \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"abn1\"},"
    " {\"type\": \"relu\", \"name\": \"ar1\"},"
    " {\"type\": \"conv2d\", \"name\": \"a2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"abn2\"},"
    " {\"type\": \"add\", \"name\": \"aadd\", \"inputs\": [\"abn2\", \"r1\"]},"
    " {\"type\": \"relu\", \"name\": \"aout\"},"
    " {\"type\": \"conv2d\", \"name\": \"b1\", \"filters\": 32, \"kernel\": 3, \"stride\": 2, \"padding\": 1, \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bbn1\"},"
    " {\"type\": \"relu\", \"name\": \"br1\"},"
    " {\"type\": \"conv2d\", \"name\": \"b2\", \"filters\": 32, \"kernel\": 3, \"padding\": 1, \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bbn2\"},"
    " {\"type\": \"conv2d\", \"name\": \"bp\", \"filters\": 32, \"kernel\": 1, \"stride\": 2, \"bias\": false, \"inputs\": \"aout\"},"
    " {\"type\": \"batchnorm\", \"name\": \"bpbn\"},"
    " {\"type\": \"add\", \"name\": \"badd\", \"inputs\": [\"bbn2\", \"bpbn\"]},"
    " {\"type\": \"relu\", \"name\": \"bout\"},"
    " {\"type\": \"global_avgpool\", \"name\": \"gap\"},"
    " {\"type\": \"flatten\", \"name\": \"f\"},"
    " {\"type\": \"dense\", \"name\": \"fc\", \"units\": \"classes\"}]}";

static net *make_net(const char *spec, precision_mode prec, bool fused)
{
    char err[512] = "";
    cJSON *j = cJSON_Parse(spec);
    assert_non_null(j);
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.2f, .momentum = 0.9f, .precision = prec };
    if (!fused)
        setenv("KILN_INFER_FUSE", "0", 1);
    net *n = net_create(j, (net_shape){ 3, 12, 12 }, 5, 8, NULL, &sv, 77, err, sizeof err);
    unsetenv("KILN_INFER_FUSE");
    if (!n)
        print_error("net_create: %s\n", err);
    assert_non_null(n);
    cJSON_Delete(j);
    return n;
}

/* Probabilities of the fused net within 1e-4 of the unfused one (the
 * tolerance the ONNX test holds kiln and ONNX Runtime to, which also
 * compares reordered FP32 arithmetic through whole nets; under bf16 the
 * activations' own rounding of 2^-8 relative sets it instead: 1e-2). The op
 * test above bounds the arithmetic; this is about wiring: a stale fold after
 * a step or a load moves probabilities by far more. */
static void compare_nets(net *a, net *b, const float *x, const int32_t *y, int count,
                         double tol, const char *when)
{
    char err[512] = "";
    float pa[8 * 5], pb[8 * 5];
    net_stats sa, sb;
    assert_int_equal(net_predict(a, x, count, pa, err, sizeof err), 0);
    assert_int_equal(net_predict(b, x, count, pb, err, sizeof err), 0);
    for (int i = 0; i < count * 5; i++)
        if (!(fabsf(pa[i] - pb[i]) <= tol)) {
            print_error("%s: probability %d fused %.9g, unfused %.9g\n", when, i, (double)pa[i],
                        (double)pb[i]);
            fail();
        }
    /* net_eval runs the same passes: its mean loss, -log p[label] per row,
     * within what probabilities tol apart allow, |log p - log q| <= tol /
     * (min(p, q)), plus FP32's rounding of the loss */
    assert_int_equal(net_eval(a, x, y, count, &sa, err, sizeof err), 0);
    assert_int_equal(net_eval(b, x, y, count, &sb, err, sizeof err), 0);
    double bound = 0;
    for (int i = 0; i < count; i++) {
        double p = fmin(pa[i * 5 + y[i]], pb[i * 5 + y[i]]) - tol;
        assert_true(p > 0);
        bound += tol / p / count;
    }
    if (!(fabs(sa.loss - sb.loss) <= bound + 1e-6 * fabs(sb.loss))) {
        print_error("%s: loss fused %.9g, unfused %.9g (bound %.3g)\n", when, sa.loss, sb.loss,
                    bound);
        fail();
    }
}

static void check_nets(precision_mode prec, double tol)
{
    char err[512] = "";
    net *a = make_net(RESNET_SMALL, prec, true), *b = make_net(RESNET_SMALL, prec, false);
    const int B = 8;
    size_t sz = (size_t)B * 3 * 12 * 12;
    float *x = malloc(sz * sizeof *x);
    int32_t y[8];
    rng r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < sz; i++)
        x[i] = (float)rng_range(&r, -1, 1);
    for (int i = 0; i < B; i++)
        y[i] = i % 5;
    compare_nets(a, b, x, y, B, tol, "fresh");
    float before[8 * 5];
    assert_int_equal(net_predict(a, x, B, before, err, sizeof err), 0);
    for (int step = 0; step < 3; step++) {
        net_stats sa, sb;
        /* training runs unfused in both: the same bits */
        assert_int_equal(net_train_step(a, x, y, B, 0.2f, &sa, err, sizeof err), 0);
        assert_int_equal(net_train_step(b, x, y, B, 0.2f, &sb, err, sizeof err), 0);
        assert_true(sa.loss == sb.loss);
        compare_nets(a, b, x, y, B, tol, "after a step");
        compare_nets(a, b, x, y, 3, tol, "after a step, another batch size");
    }
    float after[8 * 5];
    double moved = 0;
    assert_int_equal(net_predict(a, x, B, after, err, sizeof err), 0);
    for (int i = 0; i < B * 5; i++)
        moved = fmax(moved, fabs(after[i] - before[i]));
    assert_true(moved > 10 * tol);           /* the steps changed what the test compares */
    /* a load into the fused net: b's parameters after two more steps */
    char path[96];
    snprintf(path, sizeof path, "/tmp/kiln-fuse-%d.safetensors", (int)getpid());
    for (int step = 0; step < 2; step++)
        assert_int_equal(net_train_step(b, x, y, B, 0.2f, NULL, err, sizeof err), 0);
    assert_int_equal(net_save(b, path, err, sizeof err), 0);
    assert_int_equal(net_load(a, path, err, sizeof err), 0);
    compare_nets(a, b, x, y, B, tol, "after net_load");
    unlink(path);
    free(x);
    net_free(a);
    net_free(b);
}

static void test_net_fp32(void **state)
{
    check_nets(PREC_FP32, 1e-4);
}

static void test_net_bf16(void **state)
{
    if (type_runs(&TOL[1]))
        check_nets(PREC_AMP_BF16, 1e-2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_values),
        cmocka_unit_test(test_fold_cases),
        cmocka_unit_test(test_fold_again),
        cmocka_unit_test(test_net_fp32),
        cmocka_unit_test(test_net_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
