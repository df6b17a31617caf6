/* Backend operations in the 16-bit types of mixed precision (engine/backend.h,
 * be_dtype) against the same operations in FP32, on the CPU backend.
 *
 * Every input is drawn exactly representable in bfloat16 and FP16 alike, so an
 * op given 16-bit tensors sees the same values as its FP32 twin; what may
 * differ is (a) the rounding of a 16-bit output, at most the type's unit
 * roundoff u relative (round to nearest even), and (b) the order in which a
 * kernel adds its FP32 products, within gamma_K sum|terms| ~ K 2^-24 max|x||w|
 * for K terms. So each element's tolerance is u |ref| + ACC K scale, with u
 * and ACC from the one table below; outputs that stay FP32 (weight and bias
 * gradients, batch-norm scale and shift gradients, logits) get the
 * accumulation term only. On the CPU, BE_F16 tensors are FP32 values rounded
 * through FP16: those outputs must be exactly FP16-representable, and values
 * past FP16's range must become infinite.
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

#include "engine/backend.h"
#include "engine/cpu/cpu.h"   /* cpu_conv_wino16, cpu_conv_impl */
#include "engine/elementwise.h"
#include "engine/rng.h"

/* The tolerances, per type: u, the unit roundoff of a 16-bit output (8 and
 * 11 significant bits); ACC, per accumulated term and unit of |x||w|, covers
 * reordered FP32 sums (gamma_K ~ K 2^-24, doubled for the two kernels'
 * independent orders, and again for AVX-512 BF16's pairwise products, which
 * round once per pair): 2^-22. ELT, absolute, for element-wise kernels whose
 * 16-bit variant evaluates exp/tanh with another polynomial than FP32's. */
static const struct dtype_tol {
    be_dtype dt;
    const char *name;
    double u, acc, elt;
} TOL[] = {
    { BE_BF16, "bf16", 0x1p-8, 0x1p-22, 0x1p-20 },
    { BE_F16, "fp16", 0x1p-11, 0x1p-22, 0x1p-20 },
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

/* Values in [-1, 1], exactly representable in bfloat16 and in FP16 (8
 * significant bits, magnitudes from 2^-10 up). */
static float *values(rng *r, size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        float v = ew_bf16_to_f32(ew_f32_to_bf16((float)rng_range(r, -1, 1)));
        if (fabsf(v) < 0x1p-10f)
            v = v < 0 ? -0x1p-10f : 0x1p-10f;
        p[i] = v;
    }
    return p;
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

/* n elements of type dt from b, as floats (a new array). */
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

/* got (type dt, or FP32 when out32) against the FP32 ref: |got - ref| <=
 * u |ref| (16-bit outputs only) + ACC k scale + ELT elt (+ extra[i], an
 * algorithm's own, where not NULL). FP16 outputs on the CPU are FP16 values
 * exactly. */
static void compare_x(const char *what, const struct dtype_tol *t, bool out32, const float *got,
                      const float *ref, size_t n, double k, double scale, bool elt,
                      const double *extra)
{
    for (size_t i = 0; i < n; i++) {
        double tol = (out32 ? 0.0 : t->u * fabs(ref[i])) + t->acc * k * scale + (elt ? t->elt : 0) +
                     (extra ? extra[i] : 0);
        if (!(fabs((double)got[i] - ref[i]) <= tol)) {
            print_error("%s, %s: element %zu is %.9g, FP32 gives %.9g (tolerance %.3g)\n", what,
                        t->name, i, (double)got[i], (double)ref[i], tol);
            fail();
        }
        if (!out32 && t->dt == BE_F16 && ew_round_f16(got[i]) != got[i]) {
            print_error("%s, fp16: element %zu (%.9g) is not an FP16 value\n", what, i,
                        (double)got[i]);
            fail();
        }
    }
}

static void compare(const char *what, const struct dtype_tol *t, bool out32, const float *got,
                    const float *ref, size_t n, double k, double scale, bool elt)
{
    compare_x(what, t, out32, got, ref, n, k, scale, elt, NULL);
}

/* ---- convolution ---------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, k, kh, kw, stride, pad, dil, groups;
    bool bias;
    be_layout src, dst;             /* x and dx; y and dy */
} conv_case;

static int conv_out(int in, int k, int s, int p, int d)
{
    return (in + 2 * p - (d * (k - 1) + 1)) / s + 1;
}

static be_conv_desc conv_desc(const conv_case *cc, be_dtype dt)
{
    int oh = conv_out(cc->h, cc->kh, cc->stride, cc->pad, cc->dil);
    int ow = conv_out(cc->w, cc->kw, cc->stride, cc->pad, cc->dil);
    return (be_conv_desc){ .n = cc->n, .c = cc->c, .h = cc->h, .w = cc->w, .k = cc->k, .oh = oh,
                           .ow = ow, .kh = cc->kh, .kw = cc->kw, .stride_h = cc->stride,
                           .stride_w = cc->stride, .pad_t = cc->pad, .pad_l = cc->pad,
                           .pad_b = cc->pad, .pad_r = cc->pad, .dil_h = cc->dil,
                           .dil_w = cc->dil, .groups = cc->groups, .bias = cc->bias,
                           .src_layout = cc->src, .dst_layout = cc->dst, .src_dtype = dt,
                           .dst_dtype = dt, .wdtype = dt };
}

/* One pass set of a convolution in type dt (BE_F32: the reference); outputs
 * y, dx (in dt), dw, db (FP32) into new arrays. */
static void conv_run(const conv_case *cc, be_dtype dt, const float *x, const float *w,
                     const float *b, const float *dy, float **y, float **dx, float **dw, float **db)
{
    char err[512] = "";
    int oh = conv_out(cc->h, cc->kh, cc->stride, cc->pad, cc->dil);
    int ow = conv_out(cc->w, cc->kw, cc->stride, cc->pad, cc->dil);
    be_layout l = cc->dst;
    be_conv_desc d = conv_desc(cc, dt);
    size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, nw = (size_t)cc->k * (cc->c / cc->groups) *
                cc->kh * cc->kw, ny = (size_t)cc->n * be_act_elems(cc->k, (size_t)oh * ow, l);
    be_plan *p = NULL;
    if (be->conv_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err, sizeof err) != 0) {
        print_error("conv_plan: %s\n", err);
        fail();
    }
    /* the kernels the rule names run (and the bounds below are theirs) */
    for (unsigned pass = BE_FWD; pass <= BE_BWD_WEIGHTS; pass <<= 1)
        if (dt == BE_BF16 && cpu_conv_wino16(&d, pass))
            assert_string_equal(cpu_conv_impl(p, pass), "kiln_wino_2x3:bf16");
        else if (dt == BE_BF16 && cpu_conv_wino_nhwc(&d, pass))
            assert_string_equal(cpu_conv_impl(p, pass), "kiln_wino_2x3:bf16:nhwc");
    be_buf *bx = up(dt, x, nx), *bw = up(dt, w, nw), *bb = cc->bias ? up(BE_F32, b, cc->k) : NULL,
           *bdy = up(dt, dy, ny), *by = up(dt, NULL, ny), *bdx = up(dt, NULL, nx),
           *bdw = up(BE_F32, NULL, nw), *bdb = cc->bias ? up(BE_F32, NULL, cc->k) : NULL;
    assert_int_equal(be->conv_fwd(ctx, p, bx, bw, bb, by, err, sizeof err), 0);
    assert_int_equal(be->conv_bwd_data(ctx, p, bdy, bw, bdx, err, sizeof err), 0);
    assert_int_equal(be->conv_bwd_weights(ctx, p, bx, bdy, bdw, bdb, err, sizeof err), 0);
    *y = down(dt, by, ny);
    *dx = down(dt, bdx, nx);
    *dw = down(BE_F32, bdw, nw);
    *db = cc->bias ? down(BE_F32, bdb, cc->k) : NULL;
    be_buf *all[] = { bx, bw, bb, bdy, by, bdx, bdw, bdb };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        be->buf_free(ctx, all[i]);
    be->plan_free(ctx, p);
}

/* Element (n, c, h, w) of a tensor of C channels of H x W in layout l. */
static size_t at(be_layout l, int C, int H, int W, int n, int c, int h, int w)
{
    if (l == BE_NHWC)
        return (((size_t)n * H + h) * W + w) * C + c;
    if (l == BE_BLOCKED16)
        return ((((size_t)n * ((C + 15) / 16) + c / 16) * H + h) * W + w) * 16 + c % 16;
    return (((size_t)n * C + c) * H + h) * W + w;
}

/* kiln's bfloat16 Winograd F(2x2, 3x3) (engine/cpu/wino16.c) rounds its
 * transformed inputs V = B^T d B and weights U = G g G^T to bfloat16 before
 * the products (exact in FP32): on top of the direct algorithm's error, an
 * output gains at most (2u + u^2) |A^T| (sum_c |U_c| . |V_c|) |A|, with
 * |U_c| <= |G| |g_c| |G^T| and |V_c| <= |B^T| |d_c| |B| elementwise (d_c the
 * 4x4 patch of the output's 2x2 tile, zeros outside the image). Evaluated
 * here in double per output, times `factor`, into a new array of nout
 * elements in layout ol (0 elsewhere). The input gradient is the same with
 * dy for d and each kernel turned 180 degrees with its channels swapped
 * (flip). in: cin channels in layout il; w: OIHW with cw input channels. */
static double *wino_extra(const float *in, be_layout il, int n, int cin, int cout, int H, int W,
                          const float *w, int cw, bool flip, be_layout ol, size_t nout,
                          double factor)
{
    static const double A[4][2] = { { 1, 0 }, { 1, 1 }, { 1, 1 }, { 0, 1 } };   /* |A| */
    static const double BT[4][4] = { { 1, 0, 1, 0 }, { 0, 1, 1, 0 }, { 0, 1, 1, 0 },
                                     { 0, 1, 0, 1 } };                         /* |B^T| */
    static const double G[4][3] = { { 1, 0, 0 }, { 0.5, 0.5, 0.5 }, { 0.5, 0.5, 0.5 },
                                    { 0, 0, 1 } };                             /* |G| */
    double *e = calloc(nout, sizeof *e);
    assert_non_null(e);
    for (int img = 0; img < n; img++)
        for (int o = 0; o < cout; o++)
            for (int ti = 0; ti < (H + 1) / 2; ti++)
                for (int tj = 0; tj < (W + 1) / 2; tj++) {
                    double m[4][4] = { { 0 } };
                    for (int c = 0; c < cin; c++) {
                        double d[4][4], t[4][4], g[3][3], tg[4][3];
                        for (int r = 0; r < 4; r++)
                            for (int q = 0; q < 4; q++) {
                                int hh = 2 * ti - 1 + r, ww = 2 * tj - 1 + q;
                                d[r][q] = hh >= 0 && hh < H && ww >= 0 && ww < W ?
                                          fabs(in[at(il, cin, H, W, img, c, hh, ww)]) : 0;
                            }
                        for (int r = 0; r < 4; r++)             /* |B^T| |d| */
                            for (int q = 0; q < 4; q++) {
                                t[r][q] = 0;
                                for (int k = 0; k < 4; k++)
                                    t[r][q] += BT[r][k] * d[k][q];
                            }
                        for (int q = 0; q < 9; q++)
                            g[q / 3][q % 3] = fabs(flip ? w[((size_t)c * cw + o) * 9 + 8 - q] :
                                                          w[((size_t)o * cw + c) * 9 + q]);
                        for (int r = 0; r < 4; r++)             /* |G| |g| */
                            for (int q = 0; q < 3; q++)
                                tg[r][q] = G[r][0] * g[0][q] + G[r][1] * g[1][q] +
                                           G[r][2] * g[2][q];
                        for (int r = 0; r < 4; r++)
                            for (int q = 0; q < 4; q++) {
                                double v = 0, u = 0;            /* (... |B|)[r][q], (... |G^T|) */
                                for (int k = 0; k < 4; k++)
                                    v += t[r][k] * BT[q][k];
                                for (int k = 0; k < 3; k++)
                                    u += tg[r][k] * G[q][k];
                                m[r][q] += u * v;
                            }
                    }
                    for (int a = 0; a < 2; a++)
                        for (int b = 0; b < 2; b++) {
                            int i = 2 * ti + a, j = 2 * tj + b;
                            if (i >= H || j >= W)
                                continue;
                            double y = 0;
                            for (int r = 0; r < 4; r++)
                                for (int q = 0; q < 4; q++)
                                    y += A[r][a] * m[r][q] * A[q][b];
                            e[at(ol, cout, H, W, img, o, i, j)] = factor * y;
                        }
                }
    return e;
}

/* Whether a pass runs one of kiln's bfloat16 Winograd kernels (wino16.c,
 * wino_nhwc.c: the same method, so the same bound). */
static bool own_wino(const be_conv_desc *d, unsigned pass)
{
    return cpu_conv_wino16(d, pass) || cpu_conv_wino_nhwc(d, pass);
}

static void conv_check(const conv_case *cc, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed);
    int oh = conv_out(cc->h, cc->kh, cc->stride, cc->pad, cc->dil);
    int ow = conv_out(cc->w, cc->kw, cc->stride, cc->pad, cc->dil);
    be_layout l = cc->dst;
    size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, nw = (size_t)cc->k * (cc->c / cc->groups) *
                cc->kh * cc->kw, ny = (size_t)cc->n * be_act_elems(cc->k, (size_t)oh * ow, l);
    float *x = values(&r, nx), *w = values(&r, nw), *b = values(&r, cc->k), *dy = values(&r, ny);
    if (l == BE_BLOCKED16)               /* the padding channels of a blocked dy hold zeros */
        for (size_t i = 0; i < ny; i++)
            if ((int)(i % 16) + (int)(i / (16 * (size_t)oh * ow) % ((size_t)(cc->k + 15) / 16)) * 16 >= cc->k)
                dy[i] = 0.0f;
    float *y0, *dx0, *dw0, *db0;
    conv_run(cc, BE_F32, x, w, b, dy, &y0, &dx0, &dw0, &db0);
    double kf = (double)(cc->c / cc->groups) * cc->kh * cc->kw;   /* terms per output */
    double kd = (double)cc->k / cc->groups * cc->kh * cc->kw;     /* per input gradient */
    double kw = (double)cc->n * oh * ow;                           /* per weight gradient */
    for (size_t t = 0; t < NTOL; t++) {
        float *y, *dx, *dw, *db;
        conv_run(cc, TOL[t].dt, x, w, b, dy, &y, &dx, &dw, &db);
        /* kiln's bfloat16 Winograd: its transforms' roundings (2u + u^2), and
         * 2^-18 of the same sums for the FP32 operations of it and of the
         * reference's FP32 Winograd (under 50 roundings each: 50 2^-24) */
        const be_conv_desc d = conv_desc(cc, TOL[t].dt);
        const double wf = 2 * TOL[t].u + TOL[t].u * TOL[t].u + 0x1p-18;
        double *ey = NULL, *edx = NULL;
        if (TOL[t].dt == BE_BF16 && own_wino(&d, BE_FWD))
            ey = wino_extra(x, cc->src, cc->n, cc->c, cc->k, cc->h, cc->w, w, cc->c, false,
                            cc->dst, ny, wf);
        if (TOL[t].dt == BE_BF16 && own_wino(&d, BE_BWD_DATA))
            edx = wino_extra(dy, cc->dst, cc->n, cc->k, cc->c, cc->h, cc->w, w, cc->c, true,
                             cc->src, nx, wf);
        compare_x("conv y", &TOL[t], false, y, y0, ny, kf + 1, 1.0, false, ey);
        compare_x("conv dx", &TOL[t], false, dx, dx0, nx, kd, 1.0, false, edx);
        if (ey && edx) {
            double used = 0;
            for (size_t i = 0; i < ny; i++)
                if (ey[i] > 0)
                    used = fmax(used, fabs((double)y[i] - y0[i]) /
                                      (TOL[t].u * fabs(y0[i]) + TOL[t].acc * (kf + 1) + ey[i]));
            print_message("kiln bf16 F(2x2,3x3)%s %d->%d %dx%d: largest error %.2g of its "
                          "bound (y)\n", cpu_conv_wino_nhwc(&d, BE_FWD) ? " nhwc" : "",
                          cc->c, cc->k, cc->h, cc->w, used);
        }
        free(ey);
        free(edx);
        compare("conv dw", &TOL[t], true, dw, dw0, nw, kw, 1.0, false);
        if (cc->bias)
            compare("conv db", &TOL[t], true, db, db0, cc->k, kw, 1.0, false);
        free(y);
        free(dx);
        free(dw);
        free(db);
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(y0);
    free(dx0);
    free(dw0);
    free(db0);
}

static void test_conv(void **state)
{
    const conv_case cases[] = {
        { 2, 3, 9, 7, 8, 3, 3, 1, 1, 1, 1, true, BE_PLAIN, BE_PLAIN },  /* an image's 3 channels in */
        { 2, 20, 11, 9, 12, 3, 3, 2, 0, 1, 1, true, BE_PLAIN, BE_BLOCKED16 },  /* stride 2, padded blocks */
        { 3, 8, 10, 10, 8, 3, 3, 1, 2, 2, 2, false, BE_PLAIN, BE_PLAIN },  /* groups 2, dilation 2 */
        { 2, 32, 6, 6, 48, 1, 1, 1, 0, 1, 1, false, BE_PLAIN, BE_BLOCKED16 },  /* 1x1, whole blocks */
        { 1, 16, 13, 5, 17, 5, 3, 1, 2, 1, 1, true, BE_PLAIN, BE_BLOCKED16 },  /* odd sizes, 17 filters */
        /* channels-last, as a bfloat16 net keeps padded channel counts
         * (backend.act_layout): an image's channels in, then 20 -> 50 */
        { 2, 3, 10, 9, 20, 3, 3, 1, 1, 1, 1, true, BE_PLAIN, BE_NHWC },
        { 2, 20, 9, 7, 50, 3, 3, 1, 1, 1, 1, true, BE_NHWC, BE_NHWC },
        { 2, 50, 8, 6, 20, 3, 3, 2, 1, 1, 1, false, BE_NHWC, BE_PLAIN },  /* stride 2, into plain */
        /* 16 -> 16, 3x3, stride 1, padding 1: kiln's bfloat16 Winograd for
         * the forward pass and the input gradient (cpu_conv_wino16; odd
         * sizes: partial tiles and a short block), on plain and blocked data */
        { 2, 16, 9, 7, 16, 3, 3, 1, 1, 1, 1, true, BE_PLAIN, BE_BLOCKED16 },
        { 3, 16, 12, 20, 16, 3, 3, 1, 1, 1, 1, false, BE_BLOCKED16, BE_BLOCKED16 },
        /* channels-last, 3x3, stride 1, padding 1, 16 to 128 channels: kiln's
         * bfloat16 Winograd for channels-last tensors (cpu_conv_wino_nhwc; the
         * 20 -> 50 case above is one too): a full block of 8 tiles and a short
         * one, 100 outputs (a last group of one vector, 4 channels of it); an
         * odd channel count (a zero channel pads the pairs) into plain, three
         * blocks; 128 out of 120 into blocked; from blocked into channels-last */
        { 2, 50, 11, 19, 100, 3, 3, 1, 1, 1, 1, true, BE_NHWC, BE_NHWC },
        { 3, 25, 6, 34, 18, 3, 3, 1, 1, 1, 1, false, BE_NHWC, BE_PLAIN },
        { 1, 120, 4, 6, 128, 3, 3, 1, 1, 1, 1, true, BE_NHWC, BE_BLOCKED16 },
        { 2, 64, 5, 8, 36, 3, 3, 1, 1, 1, 1, true, BE_BLOCKED16, BE_NHWC },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_check(&cases[i], 100 + i);
}

/* ---- dense ------------------------------------------------------------------------ */

static void dense_run(int n, int in, int out, be_dtype dt, be_dtype ydt, const float *x,
                      const float *w, const float *b, const float *dy, float **y, float **dx,
                      float **dw, float **db)
{
    char err[512] = "";
    be_dense_desc d = { .n = n, .in = in, .out = out, .bias = true, .src_dtype = dt,
                        .dst_dtype = ydt, .wdtype = dt };
    be_plan *p = NULL;
    if (be->dense_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err, sizeof err) != 0) {
        print_error("dense_plan: %s\n", err);
        fail();
    }
    size_t nx = (size_t)n * in, nw = (size_t)in * out, ny = (size_t)n * out;
    be_buf *bx = up(dt, x, nx), *bw = up(dt, w, nw), *bb = up(BE_F32, b, out),
           *bdy = up(ydt, dy, ny), *by = up(ydt, NULL, ny), *bdx = up(dt, NULL, nx),
           *bdw = up(BE_F32, NULL, nw), *bdb = up(BE_F32, NULL, out);
    assert_int_equal(be->dense_fwd(ctx, p, bx, bw, bb, by, err, sizeof err), 0);
    assert_int_equal(be->dense_bwd_data(ctx, p, bdy, bw, bdx, err, sizeof err), 0);
    assert_int_equal(be->dense_bwd_weights(ctx, p, bx, bdy, bdw, bdb, err, sizeof err), 0);
    *y = down(ydt, by, ny);
    *dx = down(dt, bdx, nx);
    *dw = down(BE_F32, bdw, nw);
    *db = down(BE_F32, bdb, out);
    be_buf *all[] = { bx, bw, bb, bdy, by, bdx, bdw, bdb };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        be->buf_free(ctx, all[i]);
    be->plan_free(ctx, p);
}

/* A hidden dense layer (16-bit in and out) and a logits layer (16-bit in,
 * FP32 out, the FP32 gradient cast on its way in). */
static void test_dense(void **state)
{
    const int n = 6, in = 50, out = 10;
    rng r;
    rng_seed(&r, 200);
    float *x = values(&r, (size_t)n * in), *w = values(&r, (size_t)in * out),
          *b = values(&r, out), *dy = values(&r, (size_t)n * out);
    float *y0, *dx0, *dw0, *db0;
    dense_run(n, in, out, BE_F32, BE_F32, x, w, b, dy, &y0, &dx0, &dw0, &db0);
    for (size_t t = 0; t < NTOL; t++) {
        for (int logits = 0; logits < 2; logits++) {
            float *y, *dx, *dw, *db;
            be_dtype ydt = logits ? BE_F32 : TOL[t].dt;
            dense_run(n, in, out, TOL[t].dt, ydt, x, w, b, dy, &y, &dx, &dw, &db);
            compare(logits ? "dense logits" : "dense y", &TOL[t], logits, y, y0,
                    (size_t)n * out, in + 1, 1.0, false);
            compare("dense dx", &TOL[t], false, dx, dx0, (size_t)n * in, out, 1.0, false);
            compare("dense dw", &TOL[t], true, dw, dw0, (size_t)in * out, n, 1.0, false);
            compare("dense db", &TOL[t], true, db, db0, out, n, 1.0, false);
            free(y);
            free(dx);
            free(dw);
            free(db);
        }
    }
    free(x);
    free(w);
    free(b);
    free(dy);
    free(y0);
    free(dx0);
    free(dw0);
    free(db0);
}

/* ---- element-wise and per-channel ops ------------------------------------------- */

#define EN 2
#define EC 20
#define EH 6
#define EW 5
#define EHW (EH * EW)
#define ECOUNT ((size_t)EN * EC * EHW)

/* Pooling, activations, batch norm, add, concat and dropout on one tensor
 * shape in type dt: every output, concatenated into a new array of *n
 * floats, in the order listed by `names`; which ones stay FP32 in out32. */
static const char *const ELT_NAMES[] = {
    "maxpool y", "maxpool dx", "avgpool y", "avgpool dx", "relu y", "relu dx", "sigmoid y",
    "sigmoid dx", "tanh y", "tanh dx", "bn y", "bn dx", "bn dscale", "bn dshift", "add y",
    "concat y", "concat dx", "dropout y", "dropout dx",
};
#define NELT (sizeof ELT_NAMES / sizeof ELT_NAMES[0])

typedef struct elt_out {
    float *v[NELT];
    size_t n[NELT];
} elt_out;

static void elt_run(be_dtype dt, const float *x, const float *x2, const float *dy, elt_out *o)
{
    char err[512] = "";
    int k = 0;
    be_plan *p = NULL;
    be_buf *bx = up(dt, x, ECOUNT), *bx2 = up(dt, x2, ECOUNT), *bdy = up(dt, dy, ECOUNT);
    /* pooling 2x2 stride 2 (6x5 -> 3x2) */
    for (int avg = 0; avg < 2; avg++) {
        be_pool_desc d = { .alg = avg ? BE_POOL_AVG_EXCLUDE_PAD : BE_POOL_MAX, .n = EN, .c = EC,
                           .h = EH, .w = EW, .oh = 3, .ow = 2, .kh = 2, .kw = 2, .stride_h = 2,
                           .stride_w = 2, .dtype = dt };
        size_t ny = (size_t)EN * EC * 6;
        assert_int_equal(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err), 0);
        be_buf *by = up(dt, NULL, ny), *bdx = up(dt, NULL, ECOUNT);
        assert_int_equal(be->pool_fwd(ctx, p, bx, by, err, sizeof err), 0);
        assert_int_equal(be->pool_bwd(ctx, p, bdy, bdx, err, sizeof err), 0);
        o->v[k] = down(dt, by, ny), o->n[k++] = ny;
        o->v[k] = down(dt, bdx, ECOUNT), o->n[k++] = ECOUNT;
        be->buf_free(ctx, by);
        be->buf_free(ctx, bdx);
        be->plan_free(ctx, p);
    }
    /* activations */
    const be_act_alg algs[] = { BE_ACT_RELU, BE_ACT_SIGMOID, BE_ACT_TANH };
    for (int a = 0; a < 3; a++) {
        be_act_desc d = { .alg = algs[a], .n = EN, .size = (size_t)EC * EHW, .c = EC, .dtype = dt };
        assert_int_equal(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err), 0);
        be_buf *by = up(dt, NULL, ECOUNT), *bdx = up(dt, NULL, ECOUNT);
        assert_int_equal(be->act_fwd(ctx, p, bx, by, err, sizeof err), 0);
        assert_int_equal(be->act_bwd(ctx, p, by, bdy, bdx, err, sizeof err), 0);
        o->v[k] = down(dt, by, ECOUNT), o->n[k++] = ECOUNT;
        o->v[k] = down(dt, bdx, ECOUNT), o->n[k++] = ECOUNT;
        be->buf_free(ctx, by);
        be->buf_free(ctx, bdx);
        be->plan_free(ctx, p);
    }
    /* batch norm, training: statistics, scale and shift in FP32 */
    {
        float scale[EC], shift[EC];
        for (int c = 0; c < EC; c++) {
            scale[c] = 1.0f + 0.03125f * (float)c;
            shift[c] = 0.0625f * (float)(c - 10);
        }
        be_bn_desc d = { .n = EN, .c = EC, .h = EH, .w = EW, .eps = 1e-5f, .dtype = dt };
        assert_int_equal(be->bn_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err,
                                     sizeof err), 0);
        be_buf *bs = up(BE_F32, scale, EC), *bh = up(BE_F32, shift, EC), *bm = up(BE_F32, NULL, EC),
               *bv = up(BE_F32, NULL, EC), *by = up(dt, NULL, ECOUNT), *bdx = up(dt, NULL, ECOUNT),
               *bds = up(BE_F32, NULL, EC), *bdh = up(BE_F32, NULL, EC);
        assert_int_equal(be->bn_fwd(ctx, p, true, bx, bs, bh, bm, bv, by, err, sizeof err), 0);
        assert_int_equal(be->bn_bwd(ctx, p, bx, bdy, bs, bh, bm, bv, bdx, bds, bdh, err,
                                    sizeof err), 0);
        o->v[k] = down(dt, by, ECOUNT), o->n[k++] = ECOUNT;
        o->v[k] = down(dt, bdx, ECOUNT), o->n[k++] = ECOUNT;
        o->v[k] = down(BE_F32, bds, EC), o->n[k++] = EC;
        o->v[k] = down(BE_F32, bdh, EC), o->n[k++] = EC;
        be_buf *all[] = { bs, bh, bm, bv, by, bdx, bds, bdh };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            be->buf_free(ctx, all[i]);
        be->plan_free(ctx, p);
    }
    /* add */
    {
        be_add_desc d = { .n = EN, .k = 2, .size = (size_t)EC * EHW, .c = EC, .dtype = dt };
        assert_int_equal(be->add_plan(ctx, &d, &p, err, sizeof err), 0);
        be_buf *by = up(dt, NULL, ECOUNT);
        const be_buf *xs[2] = { bx, bx2 };
        assert_int_equal(be->add_fwd(ctx, p, xs, by, err, sizeof err), 0);
        o->v[k] = down(dt, by, ECOUNT), o->n[k++] = ECOUNT;
        be->buf_free(ctx, by);
        be->plan_free(ctx, p);
    }
    /* concat of x and x2 along channels; backward of input 1 */
    {
        be_concat_desc d = { .n = EN, .k = 2, .h = EH, .w = EW, .c = { EC, EC }, .dtype = dt };
        assert_int_equal(be->concat_plan(ctx, &d, &p, err, sizeof err), 0);
        be_buf *by = up(dt, NULL, 2 * ECOUNT), *bdx = up(dt, NULL, ECOUNT);
        const be_buf *xs[2] = { bx, bx2 };
        assert_int_equal(be->concat_fwd(ctx, p, xs, by, err, sizeof err), 0);
        assert_int_equal(be->concat_bwd(ctx, p, by, 1, bdx, 0.0f, err, sizeof err), 0);
        o->v[k] = down(dt, by, 2 * ECOUNT), o->n[k++] = 2 * ECOUNT;
        o->v[k] = down(dt, bdx, ECOUNT), o->n[k++] = ECOUNT;
        be->buf_free(ctx, by);
        be->buf_free(ctx, bdx);
        be->plan_free(ctx, p);
    }
    /* dropout: the same elements drop whatever the type */
    {
        be_dropout_desc d = { .count = ECOUNT, .rate = 0.25f, .dtype = dt };
        be_buf *bm = up(BE_F32, NULL, ECOUNT), *by = up(dt, NULL, ECOUNT), *bdx = up(dt, NULL, ECOUNT);
        assert_int_equal(be->dropout_fwd(ctx, &d, true, bx, bm, by, 42, err, sizeof err), 0);
        assert_int_equal(be->dropout_bwd(ctx, &d, bm, bdy, bdx, 0.0f, err, sizeof err), 0);
        o->v[k] = down(dt, by, ECOUNT), o->n[k++] = ECOUNT;
        o->v[k] = down(dt, bdx, ECOUNT), o->n[k++] = ECOUNT;
        be->buf_free(ctx, bm);
        be->buf_free(ctx, by);
        be->buf_free(ctx, bdx);
    }
    assert_int_equal(k, (int)NELT);
    be->buf_free(ctx, bx);
    be->buf_free(ctx, bx2);
    be->buf_free(ctx, bdy);
}

/* The gradient of sigmoid and tanh is computed from the stored forward
 * output y (engine/backend.h: dx = f'(y) dy), which a 16-bit y carries
 * rounded by up to u |y|; through f'(y) = y (1 - y) (sigmoid) or 1 - y^2
 * (tanh) that moves dx by up to |dy| |f''(y)| u |y|, f'' = 1 - 2y or -2y,
 * on top of dx's own rounding. */
static void smooth_dx(const char *what, const struct dtype_tol *t, const float *got,
                      const float *ref, const float *y, const float *dy, size_t n)
{
    bool sigmoid = strstr(what, "sigmoid") != NULL;
    for (size_t i = 0; i < n; i++) {
        double d2 = sigmoid ? fabs(1.0 - 2.0 * y[i]) : 2.0 * fabs(y[i]);
        double tol = t->u * fabs(ref[i]) + 1.01 * t->u * fabs(dy[i]) * d2 * fabs(y[i]) +
                     t->u * t->u * fabs(dy[i]) + t->elt;
        if (!(fabs((double)got[i] - ref[i]) <= tol)) {
            print_error("%s, %s: element %zu is %.9g, FP32 gives %.9g (tolerance %.3g)\n", what,
                        t->name, i, (double)got[i], (double)ref[i], tol);
            fail();
        }
    }
}

static void test_elementwise(void **state)
{
    rng r;
    rng_seed(&r, 300);
    float *x = values(&r, ECOUNT), *x2 = values(&r, ECOUNT), *dy = values(&r, ECOUNT);
    elt_out ref, got;
    elt_run(BE_F32, x, x2, dy, &ref);
    for (size_t t = 0; t < NTOL; t++) {
        elt_run(TOL[t].dt, x, x2, dy, &got);
        for (size_t i = 0; i < NELT; i++) {
            const char *nm = ELT_NAMES[i];
            bool out32 = strstr(nm, "dscale") || strstr(nm, "dshift");
            bool smooth = strstr(nm, "sigmoid") || strstr(nm, "tanh");
            /* batch norm sums over n h w = 60 values per channel, twice over
             * (mean, variance) in its backward pass; |x|, |dy| <= 1, and the
             * normalised values reach about 2.5 */
            double k = strstr(nm, "bn") ? 4.0 * EN * EHW : strstr(nm, "avgpool") ? 4 : 1;
            double scale = strstr(nm, "bn") ? 8.0 : 1.0;
            if (smooth && strstr(nm, " dx"))
                smooth_dx(nm, &TOL[t], got.v[i], ref.v[i], ref.v[i - 1], dy, ECOUNT);
            else
                compare(nm, &TOL[t], out32, got.v[i], ref.v[i], ref.n[i], k, scale, smooth);
            free(got.v[i]);
        }
    }
    for (size_t i = 0; i < NELT; i++)
        free(ref.v[i]);
    free(x);
    free(x2);
    free(dy);
}

/* ---- casts, overflow and unscale ------------------------------------------------ */

static void test_cast_and_overflow(void **state)
{
    char err[256] = "";
    rng r;
    rng_seed(&r, 400);
    const size_t n = 100000;                    /* past the threshold for threads */
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(rng_normal(&r) * pow(10.0, rng_range(&r, -9, 6)));   /* 1e-9 .. 1e6 */
    be_buf *src = up(BE_F32, v, n);
    for (size_t t = 0; t < NTOL; t++) {
        be_buf *dst = up(TOL[t].dt, NULL, n), *back = up(BE_F32, NULL, n);
        assert_int_equal(be->cast(ctx, src, BE_F32, dst, TOL[t].dt, n, err, sizeof err), 0);
        assert_int_equal(be->cast(ctx, dst, TOL[t].dt, back, BE_F32, n, err, sizeof err), 0);
        float *got = down(BE_F32, back, n);
        for (size_t i = 0; i < n; i++) {
            float want = TOL[t].dt == BE_BF16 ? ew_bf16_to_f32(ew_f32_to_bf16(v[i]))
                                              : ew_round_f16(v[i]);
            if (memcmp(&got[i], &want, sizeof want) != 0) {
                print_error("cast to %s and back: %.9g -> %.9g, expected %.9g\n", TOL[t].name,
                            (double)v[i], (double)got[i], (double)want);
                fail();
            }
            if (TOL[t].dt == BE_F16 && fabsf(v[i]) >= 65520.0f)
                assert_true(isinf(got[i]));     /* FP16 overflows to infinity */
        }
        free(got);
        be->buf_free(ctx, dst);
        be->buf_free(ctx, back);
    }
    /* an FP16 convolution whose output passes 65504 writes infinity */
    be_conv_desc d = { .n = 1, .c = 16, .h = 3, .w = 3, .k = 1, .oh = 1, .ow = 1, .kh = 3, .kw = 3,
                       .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                       .src_dtype = BE_F16, .dst_dtype = BE_F16, .wdtype = BE_F16 };
    float big[16 * 9], ones[16 * 9];
    for (int i = 0; i < 16 * 9; i++) {
        big[i] = 1000.0f;
        ones[i] = 1.0f;
    }
    be_plan *p = NULL;
    assert_int_equal(be->conv_plan(ctx, &d, BE_FWD, &p, err, sizeof err), 0);
    be_buf *bx = up(BE_F16, big, 16 * 9), *bw = up(BE_F16, ones, 16 * 9), *by = up(BE_F16, NULL, 1);
    assert_int_equal(be->conv_fwd(ctx, p, bx, bw, NULL, by, err, sizeof err), 0);
    float *y = down(BE_F16, by, 1);
    assert_true(isinf(y[0]) && y[0] > 0);       /* 144,000 in FP32; infinite in FP16 */
    free(y);
    be->plan_free(ctx, p);
    be->buf_free(ctx, bx);
    be->buf_free(ctx, bw);
    be->buf_free(ctx, by);

    /* unscale: g * factor in place, against ew_unscale, and the overflow flag */
    for (size_t i = 0; i < n; i++)
        v[i] = (float)rng_normal(&r) * 65536.0f;
    be_buf *g = up(BE_F32, v, n);
    bool found = false;
    assert_int_equal(be->unscale(ctx, g, n, 1.0f / 65536.0f, &found, err, sizeof err), 0);
    assert_false(found);
    float *got = down(BE_F32, g, n);
    for (size_t i = 0; i < n; i++) {
        float want = v[i];
        assert_int_equal(ew_unscale(&want, 1.0f / 65536.0f), 0);
        assert_memory_equal(&got[i], &want, sizeof want);
    }
    free(got);
    v[n / 2] = INFINITY;
    v[n - 1] = NAN;
    be->buf_free(ctx, g);
    g = up(BE_F32, v, n);
    assert_int_equal(be->unscale(ctx, g, n, 0.5f, &found, err, sizeof err), 0);
    assert_true(found);
    be->buf_free(ctx, g);
    be->buf_free(ctx, src);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_cast_and_overflow),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
