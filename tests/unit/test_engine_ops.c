/* Backend operations (engine/backend.h, CPU table) against naive references
 * computed in double, and their gradients against central finite differences
 * of the backend's own forward pass.
 *
 * Tolerances come from rounding-error bounds, not from what happens to pass:
 *  - A float sum of K products (any order, with or without FMA) is within
 *    gamma_K * sum|terms| of the exact value, gamma_K = K u / (1 - K u),
 *    u = 2^-24. The references accumulate each output's exact-ish value in
 *    double together with sum|terms| and K, so each element gets its own bound.
 *  - Finite differences: L(p) = sum_j r_j y_j(p). With p_i moved up and down
 *    by h, outputs that do not depend on p_i come out bitwise identical (the
 *    ops are deterministic), so D = sum_j r_j (y+_j - y-_j) only carries the
 *    rounding of the outputs that changed: |err D| <= sum_changed |r_j|
 *    (bound(y+_j) + bound(y-_j)). The step actually taken is measured in double
 *    from the float values, so representing p_i +- h adds no error. Conv and
 *    dense are linear in each input (no truncation error, so h can be large);
 *    max pooling and ReLU are linear on pieces, and the inputs are drawn away
 *    from their kinks by more than h; softmax cross-entropy is smooth, its
 *    truncation error is bounded by h^2/6 max|f'''| with |f'''| <= 1/(6 sqrt 3).
 *  - Winograd convolution (engine/cpu/conv.c, cpu_conv_winograd: F(4x4, 3x3),
 *    oneDNN's jit_wino_4x3) computes y = A^T [(G g G^T) . (B^T d B)] A per
 *    4x4 output tile and input channel, summed over channels. With every
 *    operation's rounding a factor (1 + t), |t| <= u, the error is at most
 *    gamma_m times the same computation on absolute values (m: the roundings
 *    on the longest path: weight transform <= 10, input transform <= 12,
 *    product 1, channel sum C, output transform <= 12, bias 1: C + 36).
 *    Bounding each transformed element by its matrices' absolute row sums
 *    gives, for an output of image n and channel k,
 *      W^2 sum_c max|g_kc| max|x_nc|,  W = max_p sum_i |A^T_pi| rG_i rB_i,
 *    rG_i, rB_i the absolute row sums of G and B^T (wino_w_fwd computes W
 *    from Lavin and Gray's matrices for F(4x4, 3x3): 48). The input gradient
 *    is the same algorithm on dy with the kernel turned (sum over k). The
 *    weight gradient, G^T [sum over images and tiles (A dy A^T) . (B^T x B)] G,
 *    gets W'^2 sum_n T max|dy_nk| max|x_nc| (T tiles an image, W' =
 *    max_r sum_i |G_ir| rA_i rB_i, rA_i the absolute column sums of A^T: 53.3)
 *    and m = N T + 36. These are norm bounds, some 10^4 times the error seen
 *    (the test prints the fraction), yet about a tenth of the outputs' own
 *    size in these cases, so a wrong tile or transform still fails; the
 *    finite differences check the gradients against the forward pass.
 *    kiln's own F(2x2, 3x3) for 16 channels (engine/cpu/wino16.c,
 *    cpu_conv_wino16: every pass) gets the same bounds from its own
 *    matrices: W = 8, W' = 6 and at most 14 roundings besides the sums
 *    (wino_alg WINO23 lists them), some 100 to 1000 times the error seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu.h"   /* cpu_conv_winograd, cpu_conv_impl */
#include "engine/elementwise.h"
#include "engine/rng.h"

#define U 0x1.0p-24
#define FD_MAX 40              /* finite-difference probes per tensor */

static const backend *be = &cpu_backend;
static be_ctx *ctx;

static double gamma_k(double k)
{
    double ku = k * U;
    return ku / (1.0 - ku);
}

/* ---- helpers ---------------------------------------------------------------- */

static be_buf *upload(const float *h, size_t n)
{
    char err[256] = "";
    be_buf *b = be->buf_alloc(ctx, n * sizeof(float) + 4, err, sizeof err);
    assert_non_null(b);
    if (h && n)
        assert_int_equal(be->buf_upload(ctx, b, 0, h, n * sizeof(float), err, sizeof err), 0);
    return b;
}

static void reupload(be_buf *b, const float *h, size_t n)
{
    char err[256] = "";
    assert_int_equal(be->buf_upload(ctx, b, 0, h, n * sizeof(float), err, sizeof err), 0);
}

static void download(const be_buf *b, float *h, size_t n)
{
    char err[256] = "";
    assert_int_equal(be->buf_download(ctx, b, 0, h, n * sizeof(float), err, sizeof err), 0);
}

static float *rand_floats(rng *r, size_t n, double lo, double hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rng_range(r, lo, hi);
    return p;
}

/* Per-element reference: value, sum of |terms|, and the number of terms. */
typedef struct refv {
    double *v, *mag, *cnt;
} refv;

static refv refv_new(size_t n)
{
    refv r = { calloc(n ? n : 1, sizeof(double)), calloc(n ? n : 1, sizeof(double)),
               calloc(n ? n : 1, sizeof(double)) };
    assert_true(r.v && r.mag && r.cnt);
    return r;
}

static void refv_free(refv *r)
{
    free(r->v);
    free(r->mag);
    free(r->cnt);
}

static void refv_add(refv *r, size_t i, double term)
{
    r->v[i] += term;
    r->mag[i] += fabs(term);
    r->cnt[i] += 1;
}

static double refv_bound(const refv *r, size_t i)
{
    return gamma_k(r->cnt[i] + 1) * r->mag[i] + 1e-30;
}

/* Every element of got within its rounding bound of the reference. */
static void check_against(const char *what, const float *got, const refv *ref, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref->v[i]), b = refv_bound(ref, i);
        if (!(e <= b)) {
            print_error("%s[%zu]: got %.9g, reference %.9g, error %.3g > bound %.3g\n", what, i,
                        (double)got[i], ref->v[i], e, b);
            fail();
        }
    }
}

/* Indices to probe with finite differences: all, or FD_MAX spread evenly. */
static size_t fd_step(size_t n)
{
    return n <= FD_MAX ? 1 : (n + FD_MAX - 1) / FD_MAX;
}

/* Runs the forward pass into y (the op closure below). */
typedef void (*fwd_fn)(void *op, float *y);

/* Finite-difference check of gradient g (of L = sum r.y) with respect to the
 * host tensor p[0..np) that lives in buffer pb, probing with step h.
 * ybound(op, j, y) gives the rounding bound of output j at that point;
 * gbound the bound of the analytic gradient element; trunc the truncation
 * error allowed (0 for ops that are linear around the probe). */
typedef struct fd_check {
    const char *what;
    void *op;
    fwd_fn fwd;
    float *p;
    be_buf *pb;
    size_t np;
    const float *g;
    const refv *gref;            /* bound of the analytic gradient */
    const float *r;
    size_t ny;
    double h;
    const refv *yref;            /* per-output bound at the base point */
    double ymag_slack;           /* |d mag_j / d p_i| * h, added to mag_j */
    double trunc;
} fd_check;

static void fd_run(const fd_check *c)
{
    float *yp = malloc(c->ny * sizeof *yp), *ym = malloc(c->ny * sizeof *ym);
    assert_true(yp && ym);
    for (size_t i = 0; i < c->np; i += fd_step(c->np)) {
        float keep = c->p[i];
        float up = (float)(keep + c->h), dn = (float)(keep - c->h);
        c->p[i] = up;
        reupload(c->pb, c->p, c->np);
        c->fwd(c->op, yp);
        c->p[i] = dn;
        reupload(c->pb, c->p, c->np);
        c->fwd(c->op, ym);
        c->p[i] = keep;
        reupload(c->pb, c->p, c->np);
        double d = 0, e = 0, step = (double)up - (double)dn;
        for (size_t j = 0; j < c->ny; j++) {
            if (yp[j] == ym[j])
                continue;
            d += (double)c->r[j] * ((double)yp[j] - (double)ym[j]);
            if (c->yref) {
                double m = c->yref->mag[j] + c->ymag_slack;
                e += fabs(c->r[j]) * 2.0 * gamma_k(c->yref->cnt[j] + 1) * m;
            }
        }
        double fd = d / step;
        double tol = e / step + (c->gref ? refv_bound(c->gref, i) : 0) + c->trunc +
                     1e-12 * (1 + fabs(fd));
        if (!(fabs(fd - c->g[i]) <= tol)) {
            print_error("%s: d/dp[%zu]: finite difference %.9g, gradient %.9g, |diff| %.3g "
                        "> tol %.3g\n", c->what, i, fd, (double)c->g[i], fabs(fd - c->g[i]), tol);
            fail();
        }
    }
    free(yp);
    free(ym);
}

static int setup(void **state)
{
    char err[256] = "";
    return be->ctx_create(0, &ctx, err, sizeof err);
}

static int teardown(void **state)
{
    be->ctx_free(ctx);
    ctx = NULL;
    return 0;
}

/* ---- convolution -------------------------------------------------------------- */

typedef struct conv_case {
    be_conv_desc d;
    size_t nx, nw, ny;
    float *x, *w, *b, *r;
    be_buf *xb, *wb, *bb, *yb;
    be_plan *plan;
} conv_case;

static size_t conv_xi(const be_conv_desc *d, int n, int c, int h, int w)
{
    return (((size_t)n * d->c + c) * d->h + h) * d->w + w;
}

static size_t conv_yi(const be_conv_desc *d, int n, int k, int h, int w)
{
    return (((size_t)n * d->k + k) * d->oh + h) * d->ow + w;
}

static size_t conv_wi(const be_conv_desc *d, int k, int c, int r, int s)
{
    return (((size_t)k * (d->c / d->groups) + c) * d->kh + r) * d->kw + s;
}

/* The whole convolution in double: y, and with dy = r the gradients. */
static void conv_ref(const conv_case *cc, refv *y, refv *dx, refv *dw, refv *db)
{
    const be_conv_desc *d = &cc->d;
    int cg = d->c / d->groups, kg = d->k / d->groups;
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++)
            for (int oh = 0; oh < d->oh; oh++)
                for (int ow = 0; ow < d->ow; ow++) {
                    size_t yi = conv_yi(d, n, k, oh, ow);
                    double ry = cc->r[yi];
                    if (d->bias) {
                        refv_add(y, yi, cc->b[k]);
                        refv_add(db, k, ry);
                    }
                    int g = k / kg;
                    for (int c = 0; c < cg; c++)
                        for (int r = 0; r < d->kh; r++)
                            for (int s = 0; s < d->kw; s++) {
                                int ih = oh * d->stride_h - d->pad_t + r * d->dil_h;
                                int iw = ow * d->stride_w - d->pad_l + s * d->dil_w;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w)
                                    continue;
                                size_t xi = conv_xi(d, n, g * cg + c, ih, iw);
                                size_t wi = conv_wi(d, k, c, r, s);
                                refv_add(y, yi, (double)cc->x[xi] * cc->w[wi]);
                                refv_add(dx, xi, ry * cc->w[wi]);
                                refv_add(dw, wi, ry * cc->x[xi]);
                            }
                }
}

static void conv_fwd_op(void *op, float *y)
{
    conv_case *cc = op;
    char err[256] = "";
    assert_int_equal(be->conv_fwd(ctx, cc->plan, cc->xb, cc->wb, cc->d.bias ? cc->bb : NULL,
                                  cc->yb, err, sizeof err), 0);
    download(cc->yb, y, cc->ny);
}

/* A Winograd algorithm F(m x m, 3x3): its matrices (row-major A^T m x a,
 * G a x 3, B^T a x a, a = m + 2) and the roundings on its longest path
 * besides the channel sum (the header comment). */
typedef struct wino_alg {
    const char *name;
    int m, a;
    const double *at, *g, *bt;
    int extra;
} wino_alg;

static const wino_alg WINO43, WINO23;

/* What runs each pass of a case: oneDNN's direct kernel, its Winograd
 * F(4x4, 3x3) (cpu_conv_winograd) or kiln's F(2x2, 3x3) (cpu_conv_wino16). */
typedef enum { ALG_DIRECT, ALG_WINO43, ALG_WINO16 } conv_alg;

static double wino_bounds(const conv_case *cc, refv *y, refv *dx, refv *dw,
                          const wino_alg *fwd, const wino_alg *bwd_w);

/* The largest error of got against ref as a fraction of its bound. */
static double bound_used(const float *got, const refv *ref, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)got[i] - ref->v[i]) / refv_bound(ref, i));
    return worst;
}

static void run_conv_case_alg(be_conv_desc d, uint64_t seed, conv_alg alg)
{
    char err[256] = "";
    rng r;
    conv_case cc = { .d = d };
    rng_seed(&r, seed);
    /* The test's shapes must be consistent with the output size formula. */
    assert_int_equal(d.oh, (d.h + d.pad_t + d.pad_b - d.dil_h * (d.kh - 1) - 1) / d.stride_h + 1);
    assert_int_equal(d.ow, (d.w + d.pad_l + d.pad_r - d.dil_w * (d.kw - 1) - 1) / d.stride_w + 1);
    cc.nx = (size_t)d.n * d.c * d.h * d.w;
    cc.nw = (size_t)d.k * (d.c / d.groups) * d.kh * d.kw;
    cc.ny = (size_t)d.n * d.k * d.oh * d.ow;
    cc.x = rand_floats(&r, cc.nx, -1, 1);
    cc.w = rand_floats(&r, cc.nw, -1, 1);
    cc.b = rand_floats(&r, (size_t)d.k, -1, 1);
    cc.r = rand_floats(&r, cc.ny, -1, 1);
    cc.xb = upload(cc.x, cc.nx);
    cc.wb = upload(cc.w, cc.nw);
    cc.bb = upload(cc.b, (size_t)d.k);
    cc.yb = upload(NULL, cc.ny);
    be_buf *rb = upload(cc.r, cc.ny), *dxb = upload(NULL, cc.nx), *dwb = upload(NULL, cc.nw),
           *dbb = upload(NULL, (size_t)d.k);
    assert_int_equal(be->conv_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &cc.plan,
                                   err, sizeof err), 0);

    refv y = refv_new(cc.ny), dx = refv_new(cc.nx), dw = refv_new(cc.nw), db = refv_new(d.k);
    conv_ref(&cc, &y, &dx, &dw, &db);
    /* The algorithm each pass runs is the one the rules name and the case
     * means, and the bounds are its. */
    const unsigned pass[] = { BE_FWD, BE_BWD_DATA, BE_BWD_WEIGHTS };
    for (int i = 0; i < 3; i++) {
        const char *impl = cpu_conv_impl(cc.plan, pass[i]);
        const bool own = alg == ALG_WINO16;
        assert_non_null(impl);
        assert_int_equal(cpu_conv_winograd(&d, pass[i]), alg == ALG_WINO43);
        assert_int_equal(cpu_conv_wino16(&d, pass[i]), own);
        const char *want = own ? "kiln_wino_2x3" : alg == ALG_WINO43 ? "wino" : NULL;
        if (want ? !strstr(impl, want) : strstr(impl, "wino") != NULL) {
            print_error("conv pass %u runs %s, the rules say %s\n", pass[i], impl,
                        want ? want : "direct");
            fail();
        }
    }
    const bool wino = alg != ALG_DIRECT;
    double slack = 1;
    if (alg == ALG_WINO43)
        slack = wino_bounds(&cc, &y, &dx, &dw, &WINO43, &WINO43);
    else if (alg == ALG_WINO16)
        slack = wino_bounds(&cc, &y, &dx, &dw, &WINO23, &WINO23);

    float *yo = malloc(cc.ny * sizeof *yo), *dxo = malloc(cc.nx * sizeof *dxo),
          *dwo = malloc(cc.nw * sizeof *dwo), *dbo = malloc((size_t)d.k * sizeof *dbo);
    conv_fwd_op(&cc, yo);
    check_against("conv y", yo, &y, cc.ny);
    assert_int_equal(be->conv_bwd_data(ctx, cc.plan, rb, cc.wb, dxb, err, sizeof err), 0);
    download(dxb, dxo, cc.nx);
    check_against("conv dx", dxo, &dx, cc.nx);
    assert_int_equal(be->conv_bwd_weights(ctx, cc.plan, cc.xb, rb, dwb, d.bias ? dbb : NULL,
                                          err, sizeof err), 0);
    download(dwb, dwo, cc.nw);
    check_against("conv dw", dwo, &dw, cc.nw);
    if (d.bias) {
        download(dbb, dbo, (size_t)d.k);
        check_against("conv db", dbo, &db, (size_t)d.k);
    }
    if (wino)
        printf("  %s %dx%d, %d->%d: largest error %.2g of the bound (y), %.2g (dx), %.2g (dw)\n",
               alg == ALG_WINO16 ? "kiln F(2x2,3x3)" : "oneDNN F(4x4,3x3)", d.h, d.w, d.c, d.k,
               bound_used(yo, &y, cc.ny), bound_used(dxo, &dx, cc.nx),
               bound_used(dwo, &dw, cc.nw));

    /* Finite differences; |x|, |w|, |b| <= 1 bound how far a term can move. */
    /* (Winograd: moving one element by h moves the bound's max of its plane by
     * at most h, so the bound by at most W^2 h.) */
    const double h = 0.25;
    fd_check fx = { "conv x", &cc, conv_fwd_op, cc.x, cc.xb, cc.nx, dxo, &dx, cc.r, cc.ny,
                    h, &y, h * slack, 0 };
    fd_run(&fx);
    fd_check fw = { "conv w", &cc, conv_fwd_op, cc.w, cc.wb, cc.nw, dwo, &dw, cc.r, cc.ny,
                    h, &y, h * slack, 0 };
    fd_run(&fw);
    if (d.bias) {
        fd_check fb = { "conv b", &cc, conv_fwd_op, cc.b, cc.bb, (size_t)d.k, dbo, &db, cc.r,
                        cc.ny, h, &y, h * slack, 0 };
        fd_run(&fb);
    }

    refv_free(&y);
    refv_free(&dx);
    refv_free(&dw);
    refv_free(&db);
    free(yo);
    free(dxo);
    free(dwo);
    free(dbo);
    be->plan_free(ctx, cc.plan);
    be_buf *bufs[] = { cc.xb, cc.wb, cc.bb, cc.yb, rb, dxb, dwb, dbb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    free(cc.x);
    free(cc.w);
    free(cc.b);
    free(cc.r);
}

static void run_conv_case(be_conv_desc d, uint64_t seed)
{
    run_conv_case_alg(d, seed, ALG_DIRECT);
}

/* Lavin and Gray's F(4x4, 3x3) (oneDNN's jit_wino_4x3): A^T (4x6), G (6x3),
 * B^T (6x6); roundings besides the channel sum: weight transform <= 10, input
 * transform <= 12, product 1, output transform <= 12, bias 1. */
static const double W43_AT[4 * 6] = {
    1, 1, 1, 1, 1, 0,   0, 1, -1, 2, -2, 0,   0, 1, 1, 4, 4, 0,   0, 1, -1, 8, -8, 1,
};
static const double W43_G[6 * 3] = {
    1.0 / 4, 0, 0,                  -1.0 / 6, -1.0 / 6, -1.0 / 6,
    -1.0 / 6, 1.0 / 6, -1.0 / 6,    1.0 / 24, 1.0 / 12, 1.0 / 6,
    1.0 / 24, -1.0 / 12, 1.0 / 6,   0, 0, 1,
};
static const double W43_BT[6 * 6] = {
    4, 0, -5, 0, 1, 0,  0, -4, -4, 1, 1, 0, 0, 4, -4, -1, 1, 0,
    0, -2, -1, 2, 1, 0, 0, 2, -1, -2, 1, 0, 0, 4, 0, -5, 0, 1,
};
static const wino_alg WINO43 = { "F(4x4,3x3)", 4, 6, W43_AT, W43_G, W43_BT, 36 };

/* F(2x2, 3x3) (engine/cpu/wino16.c): A^T (2x4), G (4x3), B^T (4x4); roundings
 * besides the channel sum: weight transform <= 6 (two stages of two additions
 * and a multiplication), input transform 2, product 1, output transform 4
 * (two stages of two additions), bias 1. */
static const double W23_AT[2 * 4] = { 1, 1, 1, 0,   0, 1, -1, -1 };
static const double W23_G[4 * 3] = { 1, 0, 0,   0.5, 0.5, 0.5,   0.5, -0.5, 0.5,   0, 0, 1 };
static const double W23_BT[4 * 4] = {
    1, 0, -1, 0,    0, 1, 1, 0,     0, -1, 1, 0,    0, 1, 0, -1,
};
static const wino_alg WINO23 = { "F(2x2,3x3)", 2, 4, W23_AT, W23_G, W23_BT, 14 };

static double wino_rg(const wino_alg *a, int i)
{
    return fabs(a->g[i * 3]) + fabs(a->g[i * 3 + 1]) + fabs(a->g[i * 3 + 2]);
}

static double wino_rb(const wino_alg *a, int i)
{
    double s = 0;
    for (int j = 0; j < a->a; j++)
        s += fabs(a->bt[i * a->a + j]);
    return s;
}

static double wino_ra(const wino_alg *a, int i)
{
    double s = 0;
    for (int p = 0; p < a->m; p++)
        s += fabs(a->at[p * a->a + i]);
    return s;
}

/* W of the header comment: the forward pass's (and the input gradient's). */
static double wino_w_fwd(const wino_alg *a)
{
    double w = 0;
    for (int p = 0; p < a->m; p++) {
        double s = 0;
        for (int i = 0; i < a->a; i++)
            s += fabs(a->at[p * a->a + i]) * wino_rg(a, i) * wino_rb(a, i);
        w = fmax(w, s);
    }
    return w;
}

/* W' of the header comment: the weight gradient's. */
static double wino_w_bwd_w(const wino_alg *a)
{
    double w = 0;
    for (int r = 0; r < 3; r++) {
        double s = 0;
        for (int i = 0; i < a->a; i++)
            s += fabs(a->g[i * 3 + r]) * wino_ra(a, i) * wino_rb(a, i);
        w = fmax(w, s);
    }
    return w;
}

/* max |t| over plane (n, c) of an NCHW tensor of planes hw long */
static double plane_max(const float *t, int nc, size_t hw)
{
    double m = 0;
    for (size_t i = 0; i < hw; i++)
        m = fmax(m, fabs(t[(size_t)nc * hw + i]));
    return m;
}

/* Replaces the direct algorithm's bounds of y and dx (fwd) and of dw (bwd_w;
 * NULL: direct, left alone) with Winograd's (the header comment); returns
 * the forward bound's W^2, for the finite differences' slack. */
static double wino_bounds(const conv_case *cc, refv *y, refv *dx, refv *dw,
                          const wino_alg *fwd, const wino_alg *bwd_w)
{
    const be_conv_desc *d = &cc->d;
    const double w2 = wino_w_fwd(fwd) * wino_w_fwd(fwd),
                 v2 = bwd_w ? wino_w_bwd_w(bwd_w) * wino_w_bwd_w(bwd_w) : 0;
    const size_t xhw = (size_t)d->h * d->w, yhw = (size_t)d->oh * d->ow;
    const int tm = bwd_w ? bwd_w->m : 1,
              tiles = ((d->oh + tm - 1) / tm) * ((d->ow + tm - 1) / tm);
    double *gmax = calloc((size_t)d->k * d->c, sizeof *gmax),
           *xmax = calloc((size_t)d->n * d->c, sizeof *xmax),
           *rmax = calloc((size_t)d->n * d->k, sizeof *rmax);
    assert_true(gmax && xmax && rmax);
    for (int kc = 0; kc < d->k * d->c; kc++)
        gmax[kc] = plane_max(cc->w, kc, 9);
    for (int nc = 0; nc < d->n * d->c; nc++)
        xmax[nc] = plane_max(cc->x, nc, xhw);
    for (int nk = 0; nk < d->n * d->k; nk++)
        rmax[nk] = plane_max(cc->r, nk, yhw);
    for (int n = 0; n < d->n; n++)
        for (int k = 0; k < d->k; k++) {
            double m = 0;
            for (int c = 0; c < d->c; c++)
                m += gmax[k * d->c + c] * xmax[n * d->c + c];
            for (size_t i = 0; i < yhw; i++) {
                size_t yi = ((size_t)n * d->k + k) * yhw + i;
                y->mag[yi] = w2 * m + (d->bias ? 1 : 0);
                y->cnt[yi] = d->c + fwd->extra;
            }
        }
    for (int n = 0; n < d->n; n++)
        for (int c = 0; c < d->c; c++) {
            double m = 0;
            for (int k = 0; k < d->k; k++)
                m += gmax[k * d->c + c] * rmax[n * d->k + k];
            for (size_t i = 0; i < xhw; i++) {
                size_t xi = ((size_t)n * d->c + c) * xhw + i;
                dx->mag[xi] = w2 * m;
                dx->cnt[xi] = d->k + fwd->extra;
            }
        }
    for (int k = 0; k < d->k && bwd_w; k++)
        for (int c = 0; c < d->c; c++) {
            double m = 0;
            for (int n = 0; n < d->n; n++)
                m += tiles * rmax[n * d->k + k] * xmax[n * d->c + c];
            for (int i = 0; i < 9; i++) {
                dw->mag[((size_t)k * d->c + c) * 9 + i] = v2 * m;
                dw->cnt[((size_t)k * d->c + c) * 9 + i] = (double)d->n * tiles + bwd_w->extra;
            }
        }
    free(gmax);
    free(xmax);
    free(rmax);
    return w2;
}

#define CONV(...) ((be_conv_desc){ __VA_ARGS__ })

static void test_conv_basic(void **state)
{
    run_conv_case(CONV(.n = 2, .c = 3, .h = 7, .w = 7, .k = 4, .oh = 5, .ow = 5, .kh = 3, .kw = 3,
                       .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                       .bias = true), 1);
}

static void test_conv_stride_pad_odd(void **state)
{
    /* 9x8 input, 3x2 kernel, stride 2x1, padding 1x0: odd, non-square everything. */
    run_conv_case(CONV(.n = 2, .c = 2, .h = 9, .w = 8, .k = 3, .oh = 5, .ow = 7, .kh = 3, .kw = 2,
                       .stride_h = 2, .stride_w = 1, .pad_t = 1, .pad_b = 1, .dil_h = 1,
                       .dil_w = 1, .groups = 1, .bias = true), 2);
}

static void test_conv_same_even_kernel(void **state)
{
    /* "same" with a 4x4 kernel at stride 1: padding 1 before, 2 after. */
    run_conv_case(CONV(.n = 1, .c = 2, .h = 6, .w = 5, .k = 3, .oh = 6, .ow = 5, .kh = 4, .kw = 4,
                       .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1, .pad_b = 2,
                       .pad_r = 2, .dil_h = 1, .dil_w = 1, .groups = 1, .bias = true), 3);
}

static void test_conv_same_stride2(void **state)
{
    /* "same" at stride 2 on 7x7 with a 3x3 kernel: out 4x4, padding 1 each side. */
    run_conv_case(CONV(.n = 2, .c = 3, .h = 7, .w = 7, .k = 4, .oh = 4, .ow = 4, .kh = 3, .kw = 3,
                       .stride_h = 2, .stride_w = 2, .pad_t = 1, .pad_l = 1, .pad_b = 1,
                       .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 1, .bias = false), 4);
}

static void test_conv_dilation(void **state)
{
    /* 3x3 kernel dilated 2 (5x5 extent), padding 2, and dilation 1x3 with a 2x2 kernel. */
    run_conv_case(CONV(.n = 1, .c = 2, .h = 9, .w = 9, .k = 2, .oh = 9, .ow = 9, .kh = 3, .kw = 3,
                       .stride_h = 1, .stride_w = 1, .pad_t = 2, .pad_l = 2, .pad_b = 2,
                       .pad_r = 2, .dil_h = 2, .dil_w = 2, .groups = 1, .bias = true), 5);
    run_conv_case(CONV(.n = 2, .c = 1, .h = 6, .w = 8, .k = 2, .oh = 5, .ow = 5, .kh = 2, .kw = 2,
                       .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 3, .groups = 1,
                       .bias = true), 6);
}

static void test_conv_groups(void **state)
{
    run_conv_case(CONV(.n = 2, .c = 4, .h = 6, .w = 6, .k = 6, .oh = 6, .ow = 6, .kh = 3, .kw = 3,
                       .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1, .pad_b = 1,
                       .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 2, .bias = false), 7);
    /* depthwise */
    run_conv_case(CONV(.n = 1, .c = 3, .h = 5, .w = 5, .k = 3, .oh = 3, .ow = 3, .kh = 3, .kw = 3,
                       .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 3,
                       .bias = true), 8);
}

static void test_conv_1x1_and_wide(void **state)
{
    run_conv_case(CONV(.n = 3, .c = 5, .h = 4, .w = 4, .k = 2, .oh = 4, .ow = 4, .kh = 1, .kw = 1,
                       .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                       .bias = true), 9);
    /* LeNet's conv2 shape at batch 2: 20 channels in, many terms per output. */
    run_conv_case(CONV(.n = 2, .c = 20, .h = 12, .w = 12, .k = 50, .oh = 8, .ow = 8, .kh = 5,
                       .kw = 5, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                       .bias = true), 10);
}

/* 3x3 stride-1 convolutions with channels enough for Winograd in every pass
 * (cpu_conv_winograd): a whole number of 4x4 tiles, and partial tiles. */
static void test_conv_winograd(void **state)
{
    run_conv_case_alg(CONV(.n = 2, .c = 48, .h = 8, .w = 8, .k = 48, .oh = 8, .ow = 8, .kh = 3,
                           .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1,
                           .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                           .bias = true), 11, ALG_WINO43);
    run_conv_case_alg(CONV(.n = 3, .c = 50, .h = 9, .w = 7, .k = 64, .oh = 9, .ow = 7, .kh = 3,
                           .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1,
                           .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                           .bias = false), 12, ALG_WINO43);
}

/* kiln's F(2x2, 3x3) kernels (wino16.c, wino_nhwc.c) split their jobs
 * (tile rows; the weight gradient's fixed chunks) among the threads, but
 * every output and every partial sum is computed by one thread in one
 * order, so the bits must not depend on the thread count (a weight gradient
 * summed per thread fails this). A size past the kernels' threshold for
 * threads (n x plane > 65536), odd in both directions (short blocks), with
 * 1, 2 and 3 threads, FP32 and bfloat16, nChw16c and channels-last. */
static void test_wino16_threads(void **state)
{
    if (!cpu_wino16_supported()) {
        print_message("no AVX-512 on this CPU: its convolutions run oneDNN's kernels\n");
        skip();
    }
    enum { N = 12, H = 30, W = 19 };
    const size_t nx = (size_t)N * H * W * 16;
    const int threads[] = { 1, 2, 3 }, saved = omp_get_max_threads();
    rng r;
    rng_seed(&r, 21);
    float *x = rand_floats(&r, nx, -1, 1), *dy = rand_floats(&r, nx, -1, 1);
    float *w = rand_floats(&r, 16 * 16 * 9, -1, 1), *bias = rand_floats(&r, 16, -1, 1);
    float *u = aligned_alloc(64, 4096 * sizeof *u),
          *scratch = aligned_alloc(64, cpu_wino16_bwd_w_scratch());
    float *y[3], *dw[3], db[3][16];
    uint16_t *xh = malloc(nx * sizeof *xh), *uh = aligned_alloc(64, 4096 * sizeof *uh),
             *wh = malloc(16 * 16 * 9 * sizeof *wh), *yh[3];
    const bool bf16 = cpu_wino16_bf16_supported();
    for (size_t i = 0; i < nx; i++)
        xh[i] = ew_f32_to_bf16(x[i]);
    for (int i = 0; i < 16 * 16 * 9; i++)
        wh[i] = ew_f32_to_bf16(w[i]);
    cpu_wino16_weights(w, false, u);
    cpu_wino16_weights_bf16(wh, false, uh);
    /* wino_nhwc.c's kernel on the same images, channels-last, 16 -> 50 */
    const bool nhwc = cpu_wino_nhwc_supported();
    uint16_t *wn = malloc(50 * 16 * 9 * sizeof *wn), *yn[3], *dxn[3];
    float *bn = rand_floats(&r, 50, -1, 1);
    uint16_t *un = aligned_alloc(64, (cpu_wino_nhwc_u_count(16, 50) * 2 + 63) / 64 * 64),
             *unf = aligned_alloc(64, (cpu_wino_nhwc_u_count(50, 16) * 2 + 63) / 64 * 64);
    for (int i = 0; i < 50 * 16 * 9; i++)
        wn[i] = ew_f32_to_bf16((float)rng_range(&r, -1, 1));
    cpu_wino_nhwc_weights(wn, 50, 16, false, un);
    cpu_wino_nhwc_weights(wn, 50, 16, true, unf);
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(threads[t]);
        y[t] = malloc(nx * sizeof *y[t]);
        dw[t] = malloc(16 * 16 * 9 * sizeof *dw[t]);
        yh[t] = malloc(nx * sizeof *yh[t]);
        cpu_wino16_run(x, u, bias, true, y[t], N, H, W);
        cpu_wino16_bwd_w(x, dy, dw[t], db[t], N, H, W, scratch);
        if (bf16)
            cpu_wino16_run_bf16(xh, uh, bias, true, yh[t], N, H, W);
        if (nhwc) {                     /* as 16 -> 50 and its input gradient, 50 -> 16 */
            yn[t] = malloc(nx * 50 / 16 * sizeof *yn[t]);
            dxn[t] = malloc(nx * sizeof *dxn[t]);
            cpu_wino_nhwc_run(xh, 16, un, bn, true, yn[t], 50, N, H, W);
            cpu_wino_nhwc_run(yn[t], 50, unf, NULL, false, dxn[t], 16, N, H, W);
        }
    }
    omp_set_num_threads(saved);
    for (int t = 1; t < 3; t++) {
        assert_memory_equal(y[t], y[0], nx * sizeof *y[0]);
        assert_memory_equal(dw[t], dw[0], 16 * 16 * 9 * sizeof *dw[0]);
        assert_memory_equal(db[t], db[0], sizeof db[0]);
        if (bf16)
            assert_memory_equal(yh[t], yh[0], nx * sizeof *yh[0]);
        if (nhwc) {
            assert_memory_equal(yn[t], yn[0], nx * 50 / 16 * sizeof *yn[0]);
            assert_memory_equal(dxn[t], dxn[0], nx * sizeof *dxn[0]);
        }
    }
    for (int t = 0; t < 3; t++) {
        free(y[t]);
        free(dw[t]);
        free(yh[t]);
        if (nhwc) {
            free(yn[t]);
            free(dxn[t]);
        }
    }
    free(wn);
    free(bn);
    free(un);
    free(unf);
    free(x);
    free(dy);
    free(w);
    free(bias);
    free(u);
    free(scratch);
    free(xh);
    free(uh);
    free(wh);
}

/* 16 channels in and out, 3x3, stride 1, padding 1 (cpu_conv_wino16): kiln's
 * F(2x2, 3x3) in every pass; whole 2x2 tiles and a whole block of 8 (16 for
 * the weight gradient), then odd sizes (partial tiles and short blocks),
 * with and without a bias; and the weight gradient over more tile rows than
 * it has partial sums (fixed chunks of several rows). */
static void test_conv_wino16(void **state)
{
    if (!cpu_wino16_supported()) {
        print_message("no AVX-512 on this CPU: its convolutions run oneDNN's kernels\n");
        skip();
    }
    run_conv_case_alg(CONV(.n = 2, .c = 16, .h = 8, .w = 16, .k = 16, .oh = 8, .ow = 16,
                           .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1,
                           .pad_l = 1, .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1,
                           .groups = 1, .bias = true), 13, ALG_WINO16);
    run_conv_case_alg(CONV(.n = 3, .c = 16, .h = 7, .w = 9, .k = 16, .oh = 7, .ow = 9,
                           .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1,
                           .pad_l = 1, .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1,
                           .groups = 1, .bias = false), 14, ALG_WINO16);
    run_conv_case_alg(CONV(.n = 9, .c = 16, .h = 10, .w = 6, .k = 16, .oh = 10, .ow = 6,
                           .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1,
                           .pad_l = 1, .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1,
                           .groups = 1, .bias = true), 15, ALG_WINO16);
    /* not for 16 -> 32, nor without the padding of 1 */
    be_conv_desc d = CONV(.n = 1, .c = 16, .h = 8, .w = 8, .k = 32, .oh = 8, .ow = 8, .kh = 3,
                          .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1,
                          .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 1);
    assert_false(cpu_conv_wino16(&d, BE_FWD));
    d.k = 16;
    assert_true(cpu_conv_wino16(&d, BE_FWD));
    assert_true(cpu_conv_wino16(&d, BE_BWD_WEIGHTS));
    d.pad_t = d.pad_b = 0;
    d.oh = 6;
    assert_false(cpu_conv_wino16(&d, BE_FWD));
}

/* A plan made without a pass refuses to run it, with a message. */
static void test_plan_without_pass(void **state)
{
    char err[256] = "";
    be_plan *p = NULL;
    be_conv_desc d = CONV(.n = 1, .c = 1, .h = 4, .w = 4, .k = 1, .oh = 2, .ow = 2, .kh = 3,
                          .kw = 3, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1,
                          .groups = 1, .bias = false);
    assert_int_equal(be->conv_plan(ctx, &d, BE_FWD | BE_BWD_WEIGHTS, &p, err, sizeof err), 0);
    be_buf *a = upload(NULL, 16), *b = upload(NULL, 9), *c = upload(NULL, 16);
    assert_int_equal(be->conv_bwd_data(ctx, p, a, b, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "without that pass"));
    be->plan_free(ctx, p);
    be->buf_free(ctx, a);
    be->buf_free(ctx, b);
    be->buf_free(ctx, c);
}

/* ---- dense -------------------------------------------------------------------- */

typedef struct dense_case {
    be_dense_desc d;
    float *x, *w, *b, *r;
    be_buf *xb, *wb, *bb, *yb;
    be_plan *plan;
} dense_case;

static void dense_fwd_op(void *op, float *y)
{
    dense_case *dc = op;
    char err[256] = "";
    assert_int_equal(be->dense_fwd(ctx, dc->plan, dc->xb, dc->wb, dc->d.bias ? dc->bb : NULL,
                                   dc->yb, err, sizeof err), 0);
    download(dc->yb, y, (size_t)dc->d.n * dc->d.out);
}

static void run_dense_case(be_dense_desc d, uint64_t seed)
{
    char err[256] = "";
    rng r;
    dense_case dc = { .d = d };
    size_t nx = (size_t)d.n * d.in, nw = (size_t)d.out * d.in, ny = (size_t)d.n * d.out;
    rng_seed(&r, seed);
    dc.x = rand_floats(&r, nx, -1, 1);
    dc.w = rand_floats(&r, nw, -1, 1);
    dc.b = rand_floats(&r, (size_t)d.out, -1, 1);
    dc.r = rand_floats(&r, ny, -1, 1);
    dc.xb = upload(dc.x, nx);
    dc.wb = upload(dc.w, nw);
    dc.bb = upload(dc.b, (size_t)d.out);
    dc.yb = upload(NULL, ny);
    be_buf *rb = upload(dc.r, ny), *dxb = upload(NULL, nx), *dwb = upload(NULL, nw),
           *dbb = upload(NULL, (size_t)d.out);
    assert_int_equal(be->dense_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &dc.plan,
                                    err, sizeof err), 0);
    refv y = refv_new(ny), dx = refv_new(nx), dw = refv_new(nw), db = refv_new(d.out);
    for (int n = 0; n < d.n; n++)
        for (int o = 0; o < d.out; o++) {
            size_t yi = (size_t)n * d.out + o;
            if (d.bias) {
                refv_add(&y, yi, dc.b[o]);
                refv_add(&db, o, dc.r[yi]);
            }
            for (int i = 0; i < d.in; i++) {
                size_t xi = (size_t)n * d.in + i, wi = (size_t)o * d.in + i;
                refv_add(&y, yi, (double)dc.x[xi] * dc.w[wi]);
                refv_add(&dx, xi, (double)dc.r[yi] * dc.w[wi]);
                refv_add(&dw, wi, (double)dc.r[yi] * dc.x[xi]);
            }
        }
    float *yo = malloc(ny * sizeof *yo), *dxo = malloc(nx * sizeof *dxo),
          *dwo = malloc(nw * sizeof *dwo), *dbo = malloc((size_t)d.out * sizeof *dbo);
    dense_fwd_op(&dc, yo);
    check_against("dense y", yo, &y, ny);
    assert_int_equal(be->dense_bwd_data(ctx, dc.plan, rb, dc.wb, dxb, err, sizeof err), 0);
    download(dxb, dxo, nx);
    check_against("dense dx", dxo, &dx, nx);
    assert_int_equal(be->dense_bwd_weights(ctx, dc.plan, dc.xb, rb, dwb, d.bias ? dbb : NULL,
                                           err, sizeof err), 0);
    download(dwb, dwo, nw);
    check_against("dense dw", dwo, &dw, nw);
    if (d.bias) {
        download(dbb, dbo, (size_t)d.out);
        check_against("dense db", dbo, &db, (size_t)d.out);
    }
    const double h = 0.25;
    fd_check fx = { "dense x", &dc, dense_fwd_op, dc.x, dc.xb, nx, dxo, &dx, dc.r, ny, h, &y, h, 0 };
    fd_run(&fx);
    fd_check fw = { "dense w", &dc, dense_fwd_op, dc.w, dc.wb, nw, dwo, &dw, dc.r, ny, h, &y, h, 0 };
    fd_run(&fw);
    if (d.bias) {
        fd_check fb = { "dense b", &dc, dense_fwd_op, dc.b, dc.bb, (size_t)d.out, dbo, &db, dc.r,
                        ny, h, &y, h, 0 };
        fd_run(&fb);
    }
    refv_free(&y);
    refv_free(&dx);
    refv_free(&dw);
    refv_free(&db);
    free(yo);
    free(dxo);
    free(dwo);
    free(dbo);
    be->plan_free(ctx, dc.plan);
    be_buf *bufs[] = { dc.xb, dc.wb, dc.bb, dc.yb, rb, dxb, dwb, dbb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
    free(dc.x);
    free(dc.w);
    free(dc.b);
    free(dc.r);
}

static void test_dense(void **state)
{
    run_dense_case((be_dense_desc){ .n = 3, .in = 7, .out = 5, .bias = true }, 11);
    run_dense_case((be_dense_desc){ .n = 2, .in = 16, .out = 1, .bias = false }, 12);
    run_dense_case((be_dense_desc){ .n = 5, .in = 33, .out = 10, .bias = true }, 13);
    run_dense_case((be_dense_desc){ .n = 1, .in = 800, .out = 7, .bias = true }, 14);
}

/* ---- max pooling ----------------------------------------------------------------- */

typedef struct pool_case {
    be_pool_desc d;
    be_buf *xb, *yb;
    be_plan *plan;
    size_t ny;
} pool_case;

static void pool_fwd_op(void *op, float *y)
{
    pool_case *pc = op;
    char err[256] = "";
    assert_int_equal(be->pool_fwd(ctx, pc->plan, pc->xb, pc->yb, err, sizeof err), 0);
    download(pc->yb, y, pc->ny);
}

static void run_pool_case(be_pool_desc d, uint64_t seed)
{
    char err[256] = "";
    rng r;
    pool_case pc = { .d = d };
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
    pc.ny = ny;
    rng_seed(&r, seed);
    assert_int_equal(d.oh, (d.h + d.pad_t + d.pad_b - d.kh) / d.stride_h + 1);
    assert_int_equal(d.ow, (d.w + d.pad_l + d.pad_r - d.kw) / d.stride_w + 1);
    /* Distinct values 0.05 apart (a shuffled ramp), so every window has one
     * maximum and a probe of +-0.01 never changes which. */
    float *x = malloc(nx * sizeof *x), *rr = rand_floats(&r, ny, -1, 1);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)(0.05 * (double)i - 0.025 * (double)nx);
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = (size_t)(rng_next(&r) % (i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    pc.xb = upload(x, nx);
    pc.yb = upload(NULL, ny);
    be_buf *rb = upload(rr, ny), *dxb = upload(NULL, nx);
    assert_int_equal(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &pc.plan, err, sizeof err), 0);

    float *yref = malloc(ny * sizeof *yref), *yo = malloc(ny * sizeof *yo),
          *dxo = malloc(nx * sizeof *dxo);
    refv dx = refv_new(nx);
    for (int n = 0; n < d.n; n++)
        for (int c = 0; c < d.c; c++)
            for (int oh = 0; oh < d.oh; oh++)
                for (int ow = 0; ow < d.ow; ow++) {
                    size_t yi = (((size_t)n * d.c + c) * d.oh + oh) * d.ow + ow, best = SIZE_MAX;
                    for (int a = 0; a < d.kh; a++)
                        for (int b = 0; b < d.kw; b++) {
                            int ih = oh * d.stride_h - d.pad_t + a;
                            int iw = ow * d.stride_w - d.pad_l + b;
                            if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w)
                                continue;
                            size_t xi = (((size_t)n * d.c + c) * d.h + ih) * d.w + iw;
                            if (best == SIZE_MAX || x[xi] > x[best])
                                best = xi;
                        }
                    assert_true(best != SIZE_MAX);     /* padding <= kernel / 2 */
                    yref[yi] = x[best];
                    refv_add(&dx, best, rr[yi]);
                }
    pool_fwd_op(&pc, yo);
    for (size_t i = 0; i < ny; i++)
        assert_true(yo[i] == yref[i]);              /* a max is exact */
    assert_int_equal(be->pool_bwd(ctx, pc.plan, rb, dxb, err, sizeof err), 0);
    download(dxb, dxo, nx);
    check_against("maxpool dx", dxo, &dx, nx);
    /* y+ - y- is exactly the step where x_i wins: no output rounding at all. */
    fd_check f = { "maxpool x", &pc, pool_fwd_op, x, pc.xb, nx, dxo, &dx, rr, ny, 0.01, NULL,
                   0, 0 };
    fd_run(&f);
    refv_free(&dx);
    free(x);
    free(rr);
    free(yref);
    free(yo);
    free(dxo);
    be->plan_free(ctx, pc.plan);
    be->buf_free(ctx, pc.xb);
    be->buf_free(ctx, pc.yb);
    be->buf_free(ctx, rb);
    be->buf_free(ctx, dxb);
}

#define POOL(...) ((be_pool_desc){ .alg = BE_POOL_MAX, __VA_ARGS__ })

static void test_maxpool(void **state)
{
    run_pool_case(POOL(.n = 2, .c = 3, .h = 8, .w = 8, .oh = 4, .ow = 4, .kh = 2, .kw = 2,
                       .stride_h = 2, .stride_w = 2), 21);
    /* overlapping windows, odd sizes, padding 1 */
    run_pool_case(POOL(.n = 1, .c = 2, .h = 7, .w = 9, .oh = 4, .ow = 5, .kh = 3, .kw = 3,
                       .stride_h = 2, .stride_w = 2, .pad_t = 1, .pad_l = 1, .pad_b = 1,
                       .pad_r = 1), 22);
    /* rectangular kernel and stride, the last column dropped (floor mode) */
    run_pool_case(POOL(.n = 2, .c = 1, .h = 6, .w = 6, .oh = 5, .ow = 3, .kh = 2, .kw = 3,
                       .stride_h = 1, .stride_w = 2, .pad_l = 1, .pad_r = 1), 23);
}

/* ---- ReLU ------------------------------------------------------------------------ */

typedef struct act_case {
    be_plan *plan;
    be_buf *xb, *yb;
    size_t n;
} act_case;

static void act_fwd_op(void *op, float *y)
{
    act_case *ac = op;
    char err[256] = "";
    assert_int_equal(be->act_fwd(ctx, ac->plan, ac->xb, ac->yb, err, sizeof err), 0);
    download(ac->yb, y, ac->n);
}

static void test_relu(void **state)
{
    char err[256] = "";
    rng r;
    be_act_desc d = { .alg = BE_ACT_RELU, .n = 3, .size = 37 };
    size_t n = 3 * 37;
    act_case ac = { .n = n };
    rng_seed(&r, 31);
    /* |x| >= 0.1: a probe of 0.05 never crosses the kink. */
    float *x = malloc(n * sizeof *x), *rr = rand_floats(&r, n, -1, 1);
    for (size_t i = 0; i < n; i++) {
        double m = rng_range(&r, 0.1, 2.0);
        x[i] = (float)(rng_next(&r) & 1 ? m : -m);
    }
    ac.xb = upload(x, n);
    ac.yb = upload(NULL, n);
    be_buf *rb = upload(rr, n), *dxb = upload(NULL, n);
    assert_int_equal(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &ac.plan, err, sizeof err), 0);
    float *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    act_fwd_op(&ac, y);
    int pos = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));    /* exact */
        pos += x[i] > 0;
    }
    assert_true(pos > 10 && pos < (int)n - 10);           /* both sides tested */
    assert_int_equal(be->act_bwd(ctx, ac.plan, ac.yb, rb, dxb, err, sizeof err), 0);
    download(dxb, dx, n);
    refv g = refv_new(n);
    for (size_t i = 0; i < n; i++) {
        assert_true(dx[i] == (x[i] > 0 ? rr[i] : 0.0f));  /* exact */
        if (x[i] > 0)
            refv_add(&g, i, rr[i]);
    }
    fd_check f = { "relu x", &ac, act_fwd_op, x, ac.xb, n, dx, &g, rr, n, 0.05, NULL, 0, 0 };
    fd_run(&f);

    /* In place: y = relu(x) into x itself, and dx into dy. */
    assert_int_equal(be->act_fwd(ctx, ac.plan, ac.xb, ac.xb, err, sizeof err), 0);
    download(ac.xb, dx, n);
    assert_memory_equal(dx, y, n * sizeof *y);
    refv_free(&g);
    free(x);
    free(rr);
    free(y);
    free(dx);
    be->plan_free(ctx, ac.plan);
    be->buf_free(ctx, ac.xb);
    be->buf_free(ctx, ac.yb);
    be->buf_free(ctx, rb);
    be->buf_free(ctx, dxb);
}

/* ---- average pooling ------------------------------------------------------------------- */

/* Terms x / divisor summed in double: the backend sums K terms and divides
 * (or multiplies by a rounded reciprocal), at most K + 1 roundings, which
 * refv_bound's gamma_{K+1} covers. Pooling is linear: finite differences
 * carry only output rounding. */
static void run_avgpool_case(be_pool_desc d, uint64_t seed)
{
    char err[256] = "";
    rng r;
    pool_case pc = { .d = d };
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
    bool include = d.alg == BE_POOL_AVG_INCLUDE_PAD;
    pc.ny = ny;
    rng_seed(&r, seed);
    assert_int_equal(d.oh, (d.h + d.pad_t + d.pad_b - d.kh) / d.stride_h + 1);
    assert_int_equal(d.ow, (d.w + d.pad_l + d.pad_r - d.kw) / d.stride_w + 1);
    float *x = rand_floats(&r, nx, -1, 1), *rr = rand_floats(&r, ny, -1, 1);
    pc.xb = upload(x, nx);
    pc.yb = upload(NULL, ny);
    be_buf *rb = upload(rr, ny), *dxb = upload(NULL, nx);
    assert_int_equal(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &pc.plan, err, sizeof err), 0);
    refv y = refv_new(ny), dx = refv_new(nx);
    int partial = 0;
    for (int n = 0; n < d.n; n++)
        for (int c = 0; c < d.c; c++)
            for (int oh = 0; oh < d.oh; oh++)
                for (int ow = 0; ow < d.ow; ow++) {
                    size_t yi = (((size_t)n * d.c + c) * d.oh + oh) * d.ow + ow;
                    int inside = 0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int a = 0; a < d.kh; a++)
                            for (int b = 0; b < d.kw; b++) {
                                int ih = oh * d.stride_h - d.pad_t + a;
                                int iw = ow * d.stride_w - d.pad_l + b;
                                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w)
                                    continue;
                                if (pass == 0) {
                                    inside++;
                                    continue;
                                }
                                double div = include ? (double)d.kh * d.kw : (double)inside;
                                size_t xi = (((size_t)n * d.c + c) * d.h + ih) * d.w + iw;
                                refv_add(&y, yi, x[xi] / div);
                                refv_add(&dx, xi, rr[yi] / div);
                            }
                    partial += inside < d.kh * d.kw;
                }
    if (d.pad_t || d.pad_l || d.pad_b || d.pad_r)
        assert_true(partial > 0);            /* the padding case is really exercised */
    float *yo = malloc(ny * sizeof *yo), *dxo = malloc(nx * sizeof *dxo);
    pool_fwd_op(&pc, yo);
    check_against(include ? "avgpool(incl) y" : "avgpool y", yo, &y, ny);
    assert_int_equal(be->pool_bwd(ctx, pc.plan, rb, dxb, err, sizeof err), 0);
    download(dxb, dxo, nx);
    check_against(include ? "avgpool(incl) dx" : "avgpool dx", dxo, &dx, nx);
    const double h = 0.25;
    fd_check f = { "avgpool x", &pc, pool_fwd_op, x, pc.xb, nx, dxo, &dx, rr, ny, h, &y, h, 0 };
    fd_run(&f);
    refv_free(&y);
    refv_free(&dx);
    free(x);
    free(rr);
    free(yo);
    free(dxo);
    be->plan_free(ctx, pc.plan);
    be->buf_free(ctx, pc.xb);
    be->buf_free(ctx, pc.yb);
    be->buf_free(ctx, rb);
    be->buf_free(ctx, dxb);
}

#define AVG(alg_, ...) ((be_pool_desc){ .alg = (alg_), __VA_ARGS__ })

static void test_avgpool(void **state)
{
    for (int k = 0; k < 2; k++) {
        be_pool_alg alg = k ? BE_POOL_AVG_INCLUDE_PAD : BE_POOL_AVG_EXCLUDE_PAD;
        run_avgpool_case(AVG(alg, .n = 2, .c = 3, .h = 8, .w = 8, .oh = 4, .ow = 4, .kh = 2,
                             .kw = 2, .stride_h = 2, .stride_w = 2), 61);
        /* overlapping windows, odd sizes, padding 1: border windows are partial */
        run_avgpool_case(AVG(alg, .n = 1, .c = 2, .h = 7, .w = 9, .oh = 4, .ow = 5, .kh = 3,
                             .kw = 3, .stride_h = 2, .stride_w = 2, .pad_t = 1, .pad_l = 1,
                             .pad_b = 1, .pad_r = 1), 62);
        /* rectangular kernel and stride, padding on one axis */
        run_avgpool_case(AVG(alg, .n = 2, .c = 1, .h = 6, .w = 6, .oh = 5, .ow = 3, .kh = 2,
                             .kw = 3, .stride_h = 1, .stride_w = 2, .pad_l = 1, .pad_r = 1), 63);
    }
    /* global average pooling: one window over an odd-sized input */
    run_avgpool_case(AVG(BE_POOL_AVG_EXCLUDE_PAD, .n = 3, .c = 5, .h = 5, .w = 7, .oh = 1,
                         .ow = 1, .kh = 5, .kw = 7, .stride_h = 1, .stride_w = 1), 64);
}

/* ---- leaky ReLU, sigmoid, tanh ---------------------------------------------------------- */

/* Leaky ReLU: alpha x is one rounding (refv with one term); x > 0 is exact. */
static void test_leaky_relu(void **state)
{
    char err[256] = "";
    rng r;
    const float alpha = 0.1f;
    be_act_desc d = { .alg = BE_ACT_RELU, .n = 3, .size = 41, .alpha = alpha };
    size_t n = 3 * 41;
    act_case ac = { .n = n };
    rng_seed(&r, 71);
    float *x = malloc(n * sizeof *x), *rr = rand_floats(&r, n, -1, 1);
    for (size_t i = 0; i < n; i++) {
        double m = rng_range(&r, 0.1, 2.0);     /* away from the kink by more than h */
        x[i] = (float)(rng_next(&r) & 1 ? m : -m);
    }
    ac.xb = upload(x, n);
    ac.yb = upload(NULL, n);
    be_buf *rb = upload(rr, n), *dxb = upload(NULL, n);
    assert_int_equal(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &ac.plan, err, sizeof err), 0);
    float *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    refv yr = refv_new(n), g = refv_new(n);
    for (size_t i = 0; i < n; i++) {
        refv_add(&yr, i, x[i] > 0 ? (double)x[i] : (double)alpha * x[i]);
        refv_add(&g, i, x[i] > 0 ? (double)rr[i] : (double)alpha * rr[i]);
    }
    act_fwd_op(&ac, y);
    check_against("leaky_relu y", y, &yr, n);
    for (size_t i = 0; i < n; i++)
        if (x[i] > 0)
            assert_true(y[i] == x[i]);
    assert_int_equal(be->act_bwd(ctx, ac.plan, ac.yb, rb, dxb, err, sizeof err), 0);
    download(dxb, dx, n);
    check_against("leaky_relu dx", dx, &g, n);
    const double h = 0.05;
    fd_check f = { "leaky_relu x", &ac, act_fwd_op, x, ac.xb, n, dx, &g, rr, n, h, &yr, h, 0 };
    fd_run(&f);
    /* a negative slope has no "from the output" backward: refused */
    be_plan *bad = NULL;
    be_act_desc neg = d;
    neg.alpha = -0.5f;
    assert_int_equal(be->act_plan(ctx, &neg, BE_FWD, &bad, err, sizeof err), -1);
    assert_null(bad);
    refv_free(&yr);
    refv_free(&g);
    free(x);
    free(rr);
    free(y);
    free(dx);
    be->plan_free(ctx, ac.plan);
    be->buf_free(ctx, ac.xb);
    be->buf_free(ctx, ac.yb);
    be->buf_free(ctx, rb);
    be->buf_free(ctx, dxb);
}

/* oneDNN computes logistic and tanh with vectorised polynomial
 * approximations and documents no ulp bound; its own conformance suite
 * (benchdnn) accepts a relative error of 4e-6 for them in f32. We hold it to
 * that: |y - ref| <= 4e-6 |ref| + u (the u covers results that flush towards
 * 0). The backward pass is computed from the returned y in three roundings:
 * sigmoid dy y (1 - y), tanh dy (1 - y^2). Finite differences are smooth:
 * truncation h^2/6 max|f'''| (sigmoid 1/8, tanh 2) plus the output error. */
#define ACT_REL 4e-6

static void run_smooth_act(be_act_alg alg, uint64_t seed)
{
    char err[256] = "";
    rng r;
    be_act_desc d = { .alg = alg, .n = 2, .size = 67 };
    size_t n = 2 * 67;
    act_case ac = { .n = n };
    const char *name = alg == BE_ACT_SIGMOID ? "sigmoid" : "tanh";
    rng_seed(&r, seed);
    float *x = rand_floats(&r, n, -6, 6), *rr = rand_floats(&r, n, -1, 1);
    x[0] = 0.0f;
    x[1] = 1e-4f;
    x[2] = -20.0f;                                /* saturated */
    ac.xb = upload(x, n);
    ac.yb = upload(NULL, n);
    be_buf *rb = upload(rr, n), *dxb = upload(NULL, n);
    assert_int_equal(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &ac.plan, err, sizeof err), 0);
    float *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    refv g = refv_new(n);
    double ymax_err = 0;
    act_fwd_op(&ac, y);
    for (size_t i = 0; i < n; i++) {
        double ref = alg == BE_ACT_SIGMOID ? 1.0 / (1.0 + exp(-(double)x[i])) : tanh(x[i]);
        double b = ACT_REL * fabs(ref) + U;
        if (!(fabs(y[i] - ref) <= b)) {
            print_error("%s y[%zu] (x %.9g): got %.9g, reference %.9g\n", name, i,
                        (double)x[i], (double)y[i], ref);
            fail();
        }
        if (b > ymax_err)
            ymax_err = b;
        double yy = y[i], dyi = rr[i];
        if (alg == BE_ACT_SIGMOID) {
            g.v[i] = dyi * yy * (1.0 - yy);
            g.mag[i] = fabs(dyi) * (fabs(yy) + yy * yy);
        } else {
            g.v[i] = dyi * (1.0 - yy * yy);
            g.mag[i] = fabs(dyi) * (1.0 + yy * yy);
        }
        g.cnt[i] = 3;
    }
    assert_int_equal(be->act_bwd(ctx, ac.plan, ac.yb, rb, dxb, err, sizeof err), 0);
    download(dxb, dx, n);
    check_against(alg == BE_ACT_SIGMOID ? "sigmoid dx" : "tanh dx", dx, &g, n);
    /* The finite differences see the derivative at x, the gradient was taken
     * at the rounded y: f' moves by at most 3 |y error| per unit of |dy|
     * (|d f'/d y| <= 1 for sigmoid, 2 for tanh), added to each bound. */
    for (size_t i = 0; i < n; i++)
        g.mag[i] += 3.0 * fabs(rr[i]) * (ACT_REL * fabs(y[i]) + U) / gamma_k(4);
    const double h = 0.01, f3 = alg == BE_ACT_SIGMOID ? 0.125 : 2.0;
    fd_check f = { name, &ac, act_fwd_op, x, ac.xb, n, dx, &g, rr, n, h, NULL, 0,
                   h * h / 6.0 * f3 + 2.0 * ymax_err / (2.0 * h) };
    fd_run(&f);
    refv_free(&g);
    free(x);
    free(rr);
    free(y);
    free(dx);
    be->plan_free(ctx, ac.plan);
    be->buf_free(ctx, ac.xb);
    be->buf_free(ctx, ac.yb);
    be->buf_free(ctx, rb);
    be->buf_free(ctx, dxb);
}

static void test_sigmoid_tanh(void **state)
{
    run_smooth_act(BE_ACT_SIGMOID, 72);
    run_smooth_act(BE_ACT_TANH, 73);
}

/* ---- dropout ---------------------------------------------------------------------------- */

typedef struct drop_case {
    be_buf *xb, *mb, *yb;
    size_t n;
    float rate;
    uint64_t seed;
} drop_case;

static void drop_fwd_op(void *op, float *y)
{
    drop_case *dc = op;
    char err[256] = "";
    be_dropout_desc d = { .count = dc->n, .rate = dc->rate };
    assert_int_equal(be->dropout_fwd(ctx, &d, true, dc->xb, dc->mb, dc->yb, dc->seed, err,
                                     sizeof err), 0);
    download(dc->yb, y, dc->n);
}

/* The mask is the shared formula (ew_dropout_keep) scaled by 1/(1-rate);
 * y = x mask exactly; the kept fraction is within 5 sigma of 1 - rate; the
 * same seed repeats, another differs; inference is the identity; the
 * backward pass multiplies by the same mask (and accumulates with beta 1). */
static void test_dropout(void **state)
{
    char err[256] = "";
    rng r;
    const size_t n = 70001;                        /* odd, past the threading threshold */
    const float rate = 0.3f, keep = 1.0f / (1.0f - rate);
    drop_case dc = { .n = n, .rate = rate, .seed = 0x1234abcdULL };
    rng_seed(&r, 81);
    float *x = rand_floats(&r, n, -1, 1), *rr = rand_floats(&r, n, -1, 1),
          *d0 = rand_floats(&r, n, -1, 1);
    float *y = malloc(n * sizeof *y), *m = malloc(n * sizeof *m), *m2 = malloc(n * sizeof *m2),
          *dx = malloc(n * sizeof *dx);
    dc.xb = upload(x, n);
    dc.mb = upload(NULL, n);
    dc.yb = upload(NULL, n);
    be_buf *rb = upload(rr, n), *dxb = upload(d0, n);
    drop_fwd_op(&dc, y);
    download(dc.mb, m, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        bool k = ew_dropout_keep(dc.seed, i, rate);
        assert_true(m[i] == (k ? keep : 0.0f));
        assert_true(y[i] == x[i] * m[i]);
        kept += k;
    }
    double mean = n * (1.0 - rate), sigma = sqrt(n * rate * (1.0 - rate));
    assert_true(fabs((double)kept - mean) <= 5 * sigma);
    /* the same stream again; another stream */
    drop_fwd_op(&dc, y);
    download(dc.mb, m2, n);
    assert_memory_equal(m, m2, n * sizeof *m);
    dc.seed++;
    drop_fwd_op(&dc, y);
    download(dc.mb, m2, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += m[i] != m2[i];
    assert_true(differ > n / 5);                  /* 2 p (1 - p) = 42% expected */
    dc.seed--;
    /* inference: y = x */
    be_dropout_desc dd = { .count = n, .rate = rate };
    assert_int_equal(be->dropout_fwd(ctx, &dd, false, dc.xb, NULL, dc.yb, dc.seed, err,
                                     sizeof err), 0);
    download(dc.yb, y, n);
    assert_memory_equal(y, x, n * sizeof *x);
    drop_fwd_op(&dc, y);                          /* back to the first mask */
    /* backward: overwrite, then accumulate */
    assert_int_equal(be->dropout_bwd(ctx, &(be_dropout_desc){ .count = n }, dc.mb, rb, dxb, 0.0f, err, sizeof err), 0);
    download(dxb, dx, n);
    for (size_t i = 0; i < n; i++)
        assert_true(dx[i] == rr[i] * m[i]);
    reupload(dxb, d0, n);
    assert_int_equal(be->dropout_bwd(ctx, &(be_dropout_desc){ .count = n }, dc.mb, rb, dxb, 1.0f, err, sizeof err), 0);
    download(dxb, dx, n);
    refv acc = refv_new(n), yr = refv_new(n), g = refv_new(n);
    for (size_t i = 0; i < n; i++) {
        refv_add(&acc, i, (double)rr[i] * m[i]);
        refv_add(&acc, i, d0[i]);
        refv_add(&yr, i, (double)x[i] * m[i]);
        refv_add(&g, i, (double)rr[i] * m[i]);
    }
    check_against("dropout dx (accumulated)", dx, &acc, n);
    assert_int_equal(be->dropout_bwd(ctx, &(be_dropout_desc){ .count = n }, dc.mb, rb, dxb, 0.0f, err, sizeof err), 0);
    download(dxb, dx, n);
    fd_check f = { "dropout x", &dc, drop_fwd_op, x, dc.xb, n, dx, &g, rr, n, 0.25, &yr,
                   0.25 * keep, 0 };
    fd_run(&f);
    refv_free(&acc);
    refv_free(&yr);
    refv_free(&g);
    free(x);
    free(rr);
    free(d0);
    free(y);
    free(m);
    free(m2);
    free(dx);
    be_buf *bufs[] = { dc.xb, dc.mb, dc.yb, rb, dxb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

/* ---- batch normalization ----------------------------------------------------------------- */

/* A bound set directly: refv_bound(r, i) == b. */
static void refv_set(refv *r, size_t i, double v, double b)
{
    r->v[i] = v;
    r->cnt[i] = 0;
    r->mag[i] = b / gamma_k(1);
}

typedef struct bn_case {
    be_bn_desc d;
    size_t nx;
    float *x, *g, *b;
    be_buf *xb, *gb, *bb, *mb, *vb, *yb;
    be_plan *plan;
} bn_case;

static void bn_fwd_op(void *op, float *y)
{
    bn_case *bc = op;
    char err[256] = "";
    assert_int_equal(be->bn_fwd(ctx, bc->plan, true, bc->xb, bc->gb, bc->bb, bc->mb, bc->vb,
                                bc->yb, err, sizeof err), 0);
    download(bc->yb, y, bc->nx);
}

static size_t bn_i(const be_bn_desc *d, int n, int c, int s)
{
    return ((size_t)n * d->c + c) * (size_t)d->h * d->w + s;
}

/* The training forward pass in double: y, and the loss sum r.y (for the
 * truncation error of the finite differences). */
static double bn_ref_fwd(const be_bn_desc *d, const float *x, const float *g, const float *b,
                         const float *r, double *mean, double *var, double *y)
{
    int hw = d->h * d->w, K = d->n * hw;
    double loss = 0;
    for (int c = 0; c < d->c; c++) {
        double m = 0, v = 0;
        for (int n = 0; n < d->n; n++)
            for (int s = 0; s < hw; s++)
                m += x[bn_i(d, n, c, s)];
        m /= K;
        for (int n = 0; n < d->n; n++)
            for (int s = 0; s < hw; s++) {
                double t = x[bn_i(d, n, c, s)] - m;
                v += t * t;
            }
        v /= K;
        double inv = 1.0 / sqrt(v + d->eps);
        for (int n = 0; n < d->n; n++)
            for (int s = 0; s < hw; s++) {
                size_t i = bn_i(d, n, c, s);
                double yi = g[c] * (x[i] - m) * inv + b[c];
                if (y)
                    y[i] = yi;
                loss += r[i] * yi;
            }
        if (mean)
            mean[c] = m;
        if (var)
            var[c] = v;
    }
    return loss;
}

/* Rounding bounds, to first order, per channel with K values:
 *   mean: K - 1 additions and a division       dm <= gamma_{K+1} mean|x|
 *   var: one- or two-pass, with the rounded mean dv <= gamma_{K+4} mean(x^2)
 *                                                     + 2 dm (mean|x| + |m|)
 *   sigma = sqrt(v + eps): relative ds = dv / (2 (v + eps)) + 2u
 *   xhat = (x - m) / sigma: dxh = (dm + u|x - m|) / sigma + |xhat| (ds + 2u)
 *   y = g xhat + b:         |g| dxh + 2u |g xhat| + u |b|
 * Backward (oneDNN's formulas): dshift = sum dy, dscale = sum dy xhat,
 *   dx = g / sigma (dy - dshift / K - xhat dscale / K), each with the
 * rounding of its sums (gamma_K) and of its inputs' errors carried through. */
static void run_bn_case(be_bn_desc d, uint64_t seed)
{
    char err[256] = "";
    rng r;
    bn_case bc = { .d = d };
    int hw = d.h * d.w, K = d.n * hw, C = d.c;
    size_t nx = (size_t)d.n * C * hw;
    const double u = U;
    bc.nx = nx;
    rng_seed(&r, seed);
    bc.x = rand_floats(&r, nx, -1, 1);
    for (size_t i = 0; i < nx; i++)               /* per-channel offsets and scales */
        bc.x[i] = bc.x[i] * (float)(1 + (i / hw) % 3) + (float)((int)((i / hw) % C) - 1);
    bc.g = rand_floats(&r, (size_t)C, 0.5, 1.5);
    bc.b = rand_floats(&r, (size_t)C, -1, 1);
    float *rr = rand_floats(&r, nx, -1, 1);
    bc.xb = upload(bc.x, nx);
    bc.gb = upload(bc.g, (size_t)C);
    bc.bb = upload(bc.b, (size_t)C);
    bc.mb = upload(NULL, (size_t)C);
    bc.vb = upload(NULL, (size_t)C);
    bc.yb = upload(NULL, nx);
    be_buf *rb = upload(rr, nx), *dxb = upload(NULL, nx), *dgb = upload(NULL, (size_t)C),
           *dbb = upload(NULL, (size_t)C);
    assert_int_equal(be->bn_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &bc.plan,
                                 err, sizeof err), 0);
    double *mean = malloc(C * sizeof *mean), *var = malloc(C * sizeof *var),
           *yd = malloc(nx * sizeof *yd);
    bn_ref_fwd(&d, bc.x, bc.g, bc.b, rr, mean, var, yd);
    float *y = malloc(nx * sizeof *y), *dx = malloc(nx * sizeof *dx), *mo = malloc(C * 4),
          *vo = malloc(C * 4), *dgo = malloc(C * 4), *dbo = malloc(C * 4);
    bn_fwd_op(&bc, y);
    download(bc.mb, mo, (size_t)C);
    download(bc.vb, vo, (size_t)C);
    assert_int_equal(be->bn_bwd(ctx, bc.plan, bc.xb, rb, bc.gb, bc.bb, bc.mb, bc.vb, dxb, dgb,
                                dbb, err, sizeof err), 0);
    download(dxb, dx, nx);
    download(dgb, dgo, (size_t)C);
    download(dbb, dbo, (size_t)C);
    refv yr = refv_new(nx), gx = refv_new(nx), gg = refv_new(C), gb = refv_new(C);
    double ymag = 0;
    for (int c = 0; c < C; c++) {
        double s1 = 0, s2 = 0, m = mean[c], v = var[c];
        double sdy = 0, sdyx = 0, sady = 0, sadyx = 0, dxh_max = 0;
        for (int n = 0; n < d.n; n++)
            for (int s = 0; s < hw; s++) {
                double xi = bc.x[bn_i(&d, n, c, s)];
                s1 += fabs(xi);
                s2 += xi * xi;
            }
        s1 /= K;
        s2 /= K;
        double dm = gamma_k(K + 1) * s1;
        double dv = gamma_k(K + 4) * s2 + 2 * dm * (s1 + fabs(m));
        double sig = sqrt(v + d.eps), ds = dv / (2 * (v + d.eps)) + 2 * u;
        /* the batch statistics the op reports */
        if (!(fabs(mo[c] - m) <= dm && fabs(vo[c] - v) <= dv)) {
            print_error("bn stats[%d]: mean %.9g vs %.9g (tol %.3g), var %.9g vs %.9g "
                        "(tol %.3g)\n", c, (double)mo[c], m, dm, (double)vo[c], v, dv);
            fail();
        }
        for (int n = 0; n < d.n; n++)
            for (int s = 0; s < hw; s++) {
                size_t i = bn_i(&d, n, c, s);
                double xh = (bc.x[i] - m) / sig;
                double dxh = (dm + u * fabs(bc.x[i] - m)) / sig + fabs(xh) * (ds + 2 * u);
                double by = fabs(bc.g[c]) * dxh + 2 * u * fabs(bc.g[c] * xh) + u * fabs(bc.b[c]);
                refv_set(&yr, i, yd[i], by);
                if (refv_bound(&yr, i) > ymag)
                    ymag = refv_bound(&yr, i);
                if (dxh > dxh_max)
                    dxh_max = dxh;
                sdy += rr[i];
                sdyx += rr[i] * xh;
                sady += fabs(rr[i]);
                sadyx += fabs(rr[i] * xh);
            }
        double eb = gamma_k(K) * sady;                           /* dshift */
        double eg = gamma_k(K + 1) * sadyx + sady * dxh_max;    /* dscale */
        refv_set(&gb, c, sdy, eb);
        refv_set(&gg, c, sdyx, eg);
        double gs = bc.g[c] / sig;
        for (int n = 0; n < d.n; n++)
            for (int s = 0; s < hw; s++) {
                size_t i = bn_i(&d, n, c, s);
                double xh = (bc.x[i] - m) / sig;
                double dxh = (dm + u * fabs(bc.x[i] - m)) / sig + fabs(xh) * (ds + 2 * u);
                double t = rr[i] - sdy / K - xh * sdyx / K;
                double et = eb / K + fabs(xh) * eg / K + dxh * fabs(sdyx) / K +
                            gamma_k(4) * (fabs(rr[i]) + fabs(sdy) / K + fabs(xh * sdyx) / K);
                double b = fabs(gs) * et + fabs(gs * t) * (ds + gamma_k(3));
                refv_set(&gx, i, gs * t, b);
            }
    }
    check_against("bn y", y, &yr, nx);
    check_against("bn dx", dx, &gx, nx);
    check_against("bn dscale", dgo, &gg, (size_t)C);
    check_against("bn dshift", dbo, &gb, (size_t)C);

    /* Finite differences of the op's own forward pass. Truncation error: the
     * same central difference taken on the double reference against its
     * exact gradient (the reference is the same function, its rounding is
     * 1e-16 / h). The output bounds move by a small fraction over a probe;
     * 10% of the largest is the slack. */
    const double h = 1e-2;
    double trunc = 0;
    for (size_t i = 0; i < nx; i += fd_step(nx)) {
        float keep = bc.x[i];
        bc.x[i] = (float)(keep + h);
        double lp = bn_ref_fwd(&d, bc.x, bc.g, bc.b, rr, NULL, NULL, NULL);
        double step = (double)bc.x[i];
        bc.x[i] = (float)(keep - h);
        double lm = bn_ref_fwd(&d, bc.x, bc.g, bc.b, rr, NULL, NULL, NULL);
        step -= (double)bc.x[i];
        bc.x[i] = keep;
        double e = fabs((lp - lm) / step - gx.v[i]);
        if (e > trunc)
            trunc = e;
    }
    fd_check fx = { "bn x", &bc, bn_fwd_op, bc.x, bc.xb, nx, dx, &gx, rr, nx, h, &yr,
                    0.1 * ymag / gamma_k(1), trunc };
    fd_run(&fx);
    /* y is linear in the scale and the shift */
    fd_check fg = { "bn scale", &bc, bn_fwd_op, bc.g, bc.gb, (size_t)C, dgo, &gg, rr, nx, 0.25,
                    &yr, 0.25 * ymag / gamma_k(1), 0 };
    fd_run(&fg);
    fd_check fb = { "bn shift", &bc, bn_fwd_op, bc.b, bc.bb, (size_t)C, dbo, &gb, rr, nx, 0.25,
                    &yr, 0.25 * u / gamma_k(1), 0 };
    fd_run(&fb);

    /* Inference on given statistics: y = g (x - rm) / sqrt(rv + eps) + b, a
     * handful of roundings on these magnitudes. */
    float *rm = rand_floats(&r, (size_t)C, -1, 1), *rv = rand_floats(&r, (size_t)C, 0.2, 3);
    reupload(bc.mb, rm, (size_t)C);
    reupload(bc.vb, rv, (size_t)C);
    assert_int_equal(be->bn_fwd(ctx, bc.plan, false, bc.xb, bc.gb, bc.bb, bc.mb, bc.vb, bc.yb,
                                err, sizeof err), 0);
    download(bc.yb, y, nx);
    refv yi = refv_new(nx);
    for (int n = 0; n < d.n; n++)
        for (int c = 0; c < C; c++)
            for (int s = 0; s < hw; s++) {
                size_t i = bn_i(&d, n, c, s);
                double inv = 1.0 / sqrt((double)rv[c] + d.eps);
                double v = bc.g[c] * (bc.x[i] - (double)rm[c]) * inv + bc.b[c];
                refv_set(&yi, i, v, gamma_k(6) * (fabs(bc.g[c]) * (fabs(bc.x[i]) +
                                                  fabs(rm[c])) * inv + fabs(bc.b[c])));
            }
    check_against("bn inference y", y, &yi, nx);
    /* the statistics were only read */
    download(bc.mb, mo, (size_t)C);
    assert_memory_equal(mo, rm, C * sizeof *rm);

    /* Running statistics: r = mu r + (1 - mu) batch, the variance unbiased. */
    float *m0 = rand_floats(&r, (size_t)C, -1, 1), *v0 = rand_floats(&r, (size_t)C, 0.5, 2);
    be_buf *rmb = upload(m0, (size_t)C), *rvb = upload(v0, (size_t)C);
    reupload(bc.mb, mo, (size_t)C);
    reupload(bc.vb, rv, (size_t)C);
    const float mu = 0.9f;
    assert_int_equal(be->bn_running(ctx, rmb, rvb, bc.mb, bc.vb, C, mu, K, err, sizeof err), 0);
    download(rmb, dgo, (size_t)C);
    download(rvb, dbo, (size_t)C);
    for (int c = 0; c < C; c++) {
        double em = mu * (double)m0[c] + (1 - (double)mu) * mo[c];
        double ub = K > 1 ? (double)rv[c] * K / (K - 1) : rv[c];
        double ev = mu * (double)v0[c] + (1 - (double)mu) * ub;
        double tm = gamma_k(4) * (fabs(mu * m0[c]) + fabs(mo[c])),
               tv = gamma_k(6) * (fabs(mu * v0[c]) + fabs(ub));
        assert_true(fabs(dgo[c] - em) <= tm);
        assert_true(fabs(dbo[c] - ev) <= tv);
    }
    refv_free(&yi);
    refv_free(&yr);
    refv_free(&gx);
    refv_free(&gg);
    refv_free(&gb);
    free(mean);
    free(var);
    free(yd);
    free(y);
    free(dx);
    free(mo);
    free(vo);
    free(dgo);
    free(dbo);
    free(rr);
    free(rm);
    free(rv);
    free(m0);
    free(v0);
    free(bc.x);
    free(bc.g);
    free(bc.b);
    be->plan_free(ctx, bc.plan);
    be_buf *bufs[] = { bc.xb, bc.gb, bc.bb, bc.mb, bc.vb, bc.yb, rb, dxb, dgb, dbb, rmb, rvb };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->buf_free(ctx, bufs[i]);
}

static void test_batchnorm(void **state)
{
    run_bn_case((be_bn_desc){ .n = 2, .c = 3, .h = 5, .w = 7, .eps = 1e-5f }, 91);
    run_bn_case((be_bn_desc){ .n = 8, .c = 5, .h = 1, .w = 1, .eps = 1e-3f }, 92);   /* dense */
    /* from 16 channels on, the blocked kernel: padded, then exact blocks */
    run_bn_case((be_bn_desc){ .n = 3, .c = 17, .h = 3, .w = 3, .eps = 1e-5f }, 93);
    run_bn_case((be_bn_desc){ .n = 2, .c = 32, .h = 3, .w = 5, .eps = 1e-5f }, 94);
}

/* Batch norm with the ReLU in its pass (be_bn_desc.relu) against the two
 * ops apart on the same backend: y = max(bn(x), 0) and, in the backward
 * pass, batch norm's gradient of dy masked where that y was not positive,
 * all bit for bit (the ReLU is exact and its gradient a mask), in training
 * and inference, plain (below 16 channels) and blocked. run_bn_case checks
 * batch norm itself against the reference. */
static void test_batchnorm_relu(void **state)
{
    char err[256] = "";
    const be_bn_desc cases[] = {
        { .n = 2, .c = 3, .h = 5, .w = 7, .eps = 1e-5f },
        { .n = 3, .c = 17, .h = 3, .w = 3, .eps = 1e-5f },
        { .n = 2, .c = 32, .h = 4, .w = 6, .eps = 1e-3f },
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        rng r;
        rng_seed(&r, 300 + t);
        be_bn_desc d = cases[t];
        const size_t C = (size_t)d.c, nx = (size_t)d.n * C * (size_t)(d.h * d.w);
        float *x = rand_floats(&r, nx, -2, 2), *g = rand_floats(&r, C, 0.5, 1.5),
              *b = rand_floats(&r, C, -1, 1), *dy = rand_floats(&r, nx, -1, 1);
        float *y0 = malloc(nx * 4), *y1 = malloc(nx * 4), *dym = malloc(nx * 4),
              *dx0 = malloc(nx * 4), *dx1 = malloc(nx * 4), *o0 = malloc(C * 4),
              *o1 = malloc(C * 4);
        be_buf *xb = upload(x, nx), *gb = upload(g, C), *bb = upload(b, C), *dyb = upload(dy, nx),
               *dymb = upload(NULL, nx), *yb0 = upload(NULL, nx), *yb1 = upload(NULL, nx),
               *m0 = upload(NULL, C), *v0 = upload(NULL, C), *m1 = upload(NULL, C),
               *v1 = upload(NULL, C), *dx0b = upload(NULL, nx), *dx1b = upload(NULL, nx),
               *dg0 = upload(NULL, C), *dg1 = upload(NULL, C), *db0 = upload(NULL, C),
               *db1 = upload(NULL, C);
        be_plan *p0 = NULL, *p1 = NULL;
        const unsigned passes = BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS;
        assert_int_equal(be->bn_plan(ctx, &d, passes, &p0, err, sizeof err), 0);
        d.relu = true;
        assert_int_equal(be->bn_plan(ctx, &d, passes, &p1, err, sizeof err), 0);
        assert_int_equal(be->bn_fwd(ctx, p0, true, xb, gb, bb, m0, v0, yb0, err, sizeof err), 0);
        assert_int_equal(be->bn_fwd(ctx, p1, true, xb, gb, bb, m1, v1, yb1, err, sizeof err), 0);
        download(yb0, y0, nx);
        download(yb1, y1, nx);
        size_t pos = 0;
        for (size_t i = 0; i < nx; i++) {
            if (y1[i] != fmaxf(y0[i], 0.0f))
                fail_msg("case %zu: y[%zu] %.9g, want max(%.9g, 0)", t, i, y1[i], y0[i]);
            pos += y0[i] > 0;
            dym[i] = y0[i] > 0 ? dy[i] : 0.0f;
        }
        assert_true(pos > nx / 4 && pos < 3 * nx / 4);      /* both sides of the ReLU */
        download(m0, o0, C);
        download(m1, o1, C);
        assert_memory_equal(o0, o1, C * 4);
        reupload(dymb, dym, nx);
        assert_int_equal(be->bn_bwd(ctx, p0, xb, dymb, gb, bb, m0, v0, dx0b, dg0, db0, err,
                                    sizeof err), 0);
        assert_int_equal(be->bn_bwd(ctx, p1, xb, dyb, gb, bb, m1, v1, dx1b, dg1, db1, err,
                                    sizeof err), 0);
        download(dx0b, dx0, nx);
        download(dx1b, dx1, nx);
        for (size_t i = 0; i < nx; i++)
            if (dx1[i] != dx0[i])
                fail_msg("case %zu: dx[%zu] %.9g, apart %.9g", t, i, dx1[i], dx0[i]);
        download(dg0, o0, C);
        download(dg1, o1, C);
        assert_memory_equal(o0, o1, C * 4);
        download(db0, o0, C);
        download(db1, o1, C);
        assert_memory_equal(o0, o1, C * 4);
        /* inference on given statistics (the batch's, as they came out) */
        assert_int_equal(be->bn_fwd(ctx, p0, false, xb, gb, bb, m0, v0, yb0, err, sizeof err), 0);
        assert_int_equal(be->bn_fwd(ctx, p1, false, xb, gb, bb, m0, v0, yb1, err, sizeof err), 0);
        download(yb0, y0, nx);
        download(yb1, y1, nx);
        for (size_t i = 0; i < nx; i++)
            if (y1[i] != fmaxf(y0[i], 0.0f))
                fail_msg("case %zu: inference y[%zu] %.9g, want max(%.9g, 0)", t, i, y1[i],
                         y0[i]);
        be->plan_free(ctx, p0);
        be->plan_free(ctx, p1);
        be_buf *bufs[] = { xb, gb, bb, dyb, dymb, yb0, yb1, m0, v0, m1, v1, dx0b, dx1b, dg0,
                           dg1, db0, db1 };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            be->buf_free(ctx, bufs[i]);
        float *fl[] = { x, g, b, dy, y0, y1, dym, dx0, dx1, o0, o1 };
        for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
            free(fl[i]);
    }
}

/* A plan whose input needs no gradient still yields dscale and dshift. */
static void test_batchnorm_no_dx(void **state)
{
    char err[256] = "";
    for (int k = 0; k < 2; k++) {                  /* plain and blocked */
        enum { C = 16 };
        be_bn_desc d = { .n = 2, .c = k ? C : 2, .h = 2, .w = 2, .eps = 1e-5f };
        size_t nx = (size_t)8 * d.c;
        be_plan *p = NULL;
        float x[8 * C], ones[C], zeros[C], dy[8 * C], dsh[C];
        for (int i = 0; i < C; i++) {
            ones[i] = 1;
            zeros[i] = 0;
        }
        for (size_t i = 0; i < nx; i++) {
            x[i] = (float)(i % 5);
            dy[i] = 1.0f;
        }
        be_buf *xb = upload(x, nx), *gb = upload(ones, C), *bb = upload(zeros, C),
               *mb = upload(NULL, C), *vb = upload(NULL, C), *yb = upload(NULL, nx),
               *dyb = upload(dy, nx), *dgb = upload(NULL, C), *dbb = upload(NULL, C);
        assert_int_equal(be->bn_plan(ctx, &d, BE_FWD | BE_BWD_WEIGHTS, &p, err, sizeof err), 0);
        assert_int_equal(be->bn_fwd(ctx, p, true, xb, gb, bb, mb, vb, yb, err, sizeof err), 0);
        assert_int_equal(be->bn_bwd(ctx, p, xb, dyb, gb, bb, mb, vb, NULL, dgb, dbb, err,
                                    sizeof err), 0);
        download(dbb, dsh, (size_t)d.c);
        for (int c = 0; c < d.c; c++)
            assert_true(dsh[c] == 8.0f);              /* sum of eight ones, exact */
        be->plan_free(ctx, p);
        be_buf *bufs[] = { xb, gb, bb, mb, vb, yb, dyb, dgb, dbb };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            be->buf_free(ctx, bufs[i]);
    }
}

/* ---- add, concat, accumulate -------------------------------------------------------------- */

/* add: a sum of k terms (refv); its backward pass is the net's acc of dy.
 * acc: beta 0 copies exactly, beta 1 is one rounded addition. */
static void test_add_acc(void **state)
{
    char err[256] = "";
    rng r;
    const int k = 3, n = 2;
    const size_t size = 1001, cnt = (size_t)n * size;
    rng_seed(&r, 101);
    float *x[3], *y = malloc(cnt * sizeof *y);
    be_buf *xb[3];
    for (int i = 0; i < k; i++) {
        x[i] = rand_floats(&r, cnt, -1, 1);
        xb[i] = upload(x[i], cnt);
    }
    be_buf *yb = upload(NULL, cnt);
    be_plan *p = NULL;
    be_add_desc d = { .n = n, .k = k, .size = size };
    assert_int_equal(be->add_plan(ctx, &d, &p, err, sizeof err), 0);
    const be_buf *xs[3] = { xb[0], xb[1], xb[2] };
    assert_int_equal(be->add_fwd(ctx, p, xs, yb, err, sizeof err), 0);
    download(yb, y, cnt);
    refv ref = refv_new(cnt);
    for (size_t j = 0; j < cnt; j++)
        for (int i = 0; i < k; i++)
            refv_add(&ref, j, x[i][j]);
    check_against("add y", y, &ref, cnt);
    /* acc, beta 0 then 1 */
    assert_int_equal(be->acc(ctx, yb, xb[0], cnt, BE_F32, 0.0f, err, sizeof err), 0);
    download(yb, y, cnt);
    assert_memory_equal(y, x[0], cnt * sizeof *y);
    assert_int_equal(be->acc(ctx, yb, xb[1], cnt, BE_F32, 1.0f, err, sizeof err), 0);
    download(yb, y, cnt);
    for (size_t j = 0; j < cnt; j++)
        assert_true(y[j] == x[1][j] + x[0][j]);         /* one correctly rounded addition */
    assert_int_equal(be->acc(ctx, yb, xb[1], cnt + 2, BE_F32, 1.0f, err, sizeof err), -1);
    assert_non_null(strstr(err, "overruns"));
    /* with the ReLU in its pass (be_add_desc.relu): max(x0 + x1, 0), the
     * same one rounded addition; only for two inputs */
    be_plan *pr = NULL;
    be_add_desc dr = { .n = n, .k = 2, .size = size, .relu = true };
    assert_int_equal(be->add_plan(ctx, &dr, &pr, err, sizeof err), 0);
    assert_int_equal(be->add_fwd(ctx, pr, xs, yb, err, sizeof err), 0);
    download(yb, y, cnt);
    size_t zeros = 0;
    for (size_t j = 0; j < cnt; j++) {
        assert_true(y[j] == fmaxf(x[0][j] + x[1][j], 0.0f));
        zeros += y[j] == 0.0f;
    }
    assert_true(zeros > cnt / 4 && zeros < 3 * cnt / 4);
    be->plan_free(ctx, pr);
    pr = NULL;
    dr.k = 3;
    assert_int_equal(be->add_plan(ctx, &dr, &pr, err, sizeof err), -1);
    assert_null(pr);
    assert_non_null(strstr(err, "2 inputs"));
    /* one input is not an add */
    be_plan *bad = NULL;
    be_add_desc one = { .n = 1, .k = 1, .size = 4 };
    assert_int_equal(be->add_plan(ctx, &one, &bad, err, sizeof err), -1);
    assert_null(bad);
    refv_free(&ref);
    be->plan_free(ctx, p);
    for (int i = 0; i < k; i++) {
        free(x[i]);
        be->buf_free(ctx, xb[i]);
    }
    be->buf_free(ctx, yb);
    free(y);
}

/* bfloat16 by rounding to nearest, ties to even, written without the
 * engine's cast: the two bfloat16 neighbours of x and the nearer one. */
static unsigned short ref_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0;                                       /* NaN: checked apart */
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, sizeof flo);
    memcpy(&fhi, &hi, sizeof fhi);
    double dl = fabs((double)x - flo), dh = fabs((double)fhi - x);
    if ((u & 0x7f800000u) == 0x7f800000u || dl < dh || (dl == dh && !(lo & 0x10000u)))
        return (unsigned short)(lo >> 16);
    return (unsigned short)(hi >> 16);
}

static float bf16_val(unsigned short h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* acc on bfloat16 tensors (AMP's gradients): each element one FP32 addition
 * of the two values, rounded once to bfloat16; beta 0 copies exactly; NaN
 * and infinities pass through. More elements than one thread takes. */
static void test_acc_bf16(void **state)
{
    char err[256] = "";
    rng r;
    rng_seed(&r, 211);
    const size_t cnt = 70001;                           /* odd: a vector tail */
    unsigned short *a = malloc(cnt * 2), *b = malloc(cnt * 2), *y = malloc(cnt * 2);
    for (size_t i = 0; i < cnt; i++) {
        a[i] = ref_bf16((float)rng_range(&r, -4, 4));
        b[i] = ref_bf16((float)rng_range(&r, -4, 4) * (i % 7 ? 1.0f : 1e-3f));
    }
    a[5] = 0x7fc0;                                      /* NaN */
    a[6] = 0x7f80;                                      /* +inf */
    b[7] = 0xff80;                                      /* -inf */
    a[8] = 0x3f80, b[8] = 0x3b80;        /* 1 + 2^-8: a tie, to even (1) */
    a[9] = 0x3f81, b[9] = 0x3b80;        /* 1+2^-7 + 2^-8: a tie, to even (up) */
    be_buf *ab = be->buf_alloc(ctx, cnt * 2, err, sizeof err), *bb = be->buf_alloc(ctx, cnt * 2,
                                                                                  err, sizeof err);
    assert_non_null(ab);
    assert_non_null(bb);
    assert_int_equal(be->buf_upload(ctx, ab, 0, a, cnt * 2, err, sizeof err), 0);
    assert_int_equal(be->buf_upload(ctx, bb, 0, b, cnt * 2, err, sizeof err), 0);
    assert_int_equal(be->acc(ctx, bb, ab, cnt, BE_BF16, 1.0f, err, sizeof err), 0);
    assert_int_equal(be->buf_download(ctx, bb, 0, y, cnt * 2, err, sizeof err), 0);
    for (size_t i = 0; i < cnt; i++) {
        if (i == 5) {
            assert_true(isnan(bf16_val(y[i])));
            continue;
        }
        unsigned short want = ref_bf16(bf16_val(a[i]) + bf16_val(b[i]));
        if (y[i] != want)
            fail_msg("acc bf16 element %zu: %04x + %04x gave %04x, want %04x", i, a[i], b[i],
                     y[i], want);
    }
    assert_int_equal(y[6], 0x7f80);
    assert_int_equal(y[7], 0xff80);
    assert_int_equal(y[8], 0x3f80);
    assert_int_equal(y[9], 0x3f82);
    /* beta 0: a copy, bit for bit */
    assert_int_equal(be->acc(ctx, bb, ab, cnt, BE_BF16, 0.0f, err, sizeof err), 0);
    assert_int_equal(be->buf_download(ctx, bb, 0, y, cnt * 2, err, sizeof err), 0);
    assert_memory_equal(y, a, cnt * 2);
    assert_int_equal(be->acc(ctx, bb, ab, cnt + 1, BE_BF16, 1.0f, err, sizeof err), -1);
    assert_non_null(strstr(err, "overruns"));
    be->buf_free(ctx, ab);
    be->buf_free(ctx, bb);
    free(a);
    free(b);
    free(y);
}

/* concat along channels: a copy, exact both ways; beta 1 adds once. */
static void test_concat(void **state)
{
    char err[256] = "";
    rng r;
    be_concat_desc d = { .n = 3, .k = 3, .h = 5, .w = 3, .c = { 2, 1, 4 } };
    const int C = 7;
    size_t hw = 15, cnt = (size_t)d.n * C * hw;
    rng_seed(&r, 111);
    float *x[3], *y = malloc(cnt * sizeof *y), *dy = rand_floats(&r, cnt, -1, 1);
    be_buf *xb[3];
    for (int i = 0; i < d.k; i++) {
        x[i] = rand_floats(&r, (size_t)d.n * d.c[i] * hw, -1, 1);
        xb[i] = upload(x[i], (size_t)d.n * d.c[i] * hw);
    }
    be_buf *yb = upload(NULL, cnt), *dyb = upload(dy, cnt);
    be_plan *p = NULL;
    assert_int_equal(be->concat_plan(ctx, &d, &p, err, sizeof err), 0);
    const be_buf *xs[3] = { xb[0], xb[1], xb[2] };
    assert_int_equal(be->concat_fwd(ctx, p, xs, yb, err, sizeof err), 0);
    download(yb, y, cnt);
    for (int n = 0; n < d.n; n++) {
        int c0 = 0;
        for (int i = 0; i < d.k; i++) {
            for (int c = 0; c < d.c[i]; c++)
                for (size_t s = 0; s < hw; s++)
                    assert_true(y[((size_t)n * C + c0 + c) * hw + s] ==
                                x[i][((size_t)n * d.c[i] + c) * hw + s]);
            c0 += d.c[i];
        }
    }
    int c0 = 0;
    for (int i = 0; i < d.k; i++) {
        size_t ni = (size_t)d.n * d.c[i] * hw;
        float *dx = malloc(ni * sizeof *dx);
        assert_int_equal(be->concat_bwd(ctx, p, dyb, i, xb[i], 0.0f, err, sizeof err), 0);
        download(xb[i], dx, ni);
        for (int n = 0; n < d.n; n++)
            for (int c = 0; c < d.c[i]; c++)
                for (size_t s = 0; s < hw; s++)
                    assert_true(dx[((size_t)n * d.c[i] + c) * hw + s] ==
                                dy[((size_t)n * C + c0 + c) * hw + s]);
        reupload(xb[i], x[i], ni);
        assert_int_equal(be->concat_bwd(ctx, p, dyb, i, xb[i], 1.0f, err, sizeof err), 0);
        download(xb[i], dx, ni);
        for (int n = 0; n < d.n; n++)
            for (int c = 0; c < d.c[i]; c++)
                for (size_t s = 0; s < hw; s++) {
                    size_t j = ((size_t)n * d.c[i] + c) * hw + s;
                    assert_true(dx[j] == dy[((size_t)n * C + c0 + c) * hw + s] + x[i][j]);
                }
        c0 += d.c[i];
        free(dx);
    }
    assert_int_equal(be->concat_bwd(ctx, p, dyb, 3, xb[0], 0.0f, err, sizeof err), -1);
    be->plan_free(ctx, p);
    for (int i = 0; i < d.k; i++) {
        free(x[i]);
        be->buf_free(ctx, xb[i]);
    }
    be->buf_free(ctx, yb);
    be->buf_free(ctx, dyb);
    free(y);
    free(dy);
}

/* ---- blocked layouts ---------------------------------------------------------------------- */

/* Plain NCHW <-> nChw16c on the host, channels padded to a multiple of 16
 * (the padding of dst is left alone). */
static void to_blocked(be_layout l, const float *src, float *dst, int n, int c, size_t hw,
                       bool back)
{
    const int cb = (c + 15) / 16;
    for (int b = 0; b < n; b++)
        for (int ch = 0; ch < c; ch++)
            for (size_t s = 0; s < hw; s++) {
                size_t pi = ((size_t)b * c + ch) * hw + s;
                size_t bi = l == BE_NHWC ? ((size_t)b * hw + s) * c + ch :
                            (((size_t)b * cb + ch / 16) * hw + s) * 16 + ch % 16;
                if (back)
                    dst[pi] = src[bi];
                else
                    dst[bi] = src[pi];
            }
}

/* Runs one op on plain and on blocked (or channels-last) operands,
 * converted on the host, and requires the same results bit for bit: the
 * blocked kernels are the ones the plain path reorders into, or element-wise,
 * so any difference is a layout bug. The plain path itself is checked against
 * references above. */
typedef struct blk_io {
    be_layout l;                    /* the other layout: BE_BLOCKED16 or BE_NHWC */
    int n, c;
    size_t hw;
    float *plain, *blk;             /* host copies */
    be_buf *pb, *bb;                /* device buffers, plain and blocked */
} blk_io;

static size_t blk_count(const blk_io *io)    /* floats of the blocked buffer */
{
    return (size_t)io->n * be_act_elems(io->c, io->hw, io->l);
}

/* Random values; the blocked copy's padding channels hold zeros. */
static blk_io blk_in(rng *r, be_layout l, int n, int c, size_t hw)
{
    size_t cnt = (size_t)n * c * hw;
    blk_io io = { .l = l, .n = n, .c = c, .hw = hw, .plain = rand_floats(r, cnt, -1, 1) };
    io.blk = calloc(blk_count(&io), sizeof(float));
    assert_non_null(io.blk);
    to_blocked(l, io.plain, io.blk, n, c, hw, false);
    io.pb = upload(io.plain, cnt);
    io.bb = upload(io.blk, blk_count(&io));
    return io;
}

/* Downloads both results and compares them in plain order, bit for bit (tol
 * 0) or within tol; the blocked result's padding channels must still be zero
 * (the layout's invariant). */
static void blk_near(const char *what, blk_io *io, double tol)
{
    size_t cnt = (size_t)io->n * io->c * io->hw, bcnt = blk_count(io);
    float *back = malloc(cnt * sizeof *back);
    download(io->pb, io->plain, cnt);
    download(io->bb, io->blk, bcnt);
    to_blocked(io->l, io->blk, back, io->n, io->c, io->hw, true);
    for (size_t i = 0; i < cnt; i++)
        if (tol > 0 ? !(fabs((double)back[i] - io->plain[i]) <= tol)
                    : memcmp(&back[i], &io->plain[i], sizeof(float)) != 0) {
            print_error("%s[%zu]: blocked %.9g, plain %.9g\n", what, i, (double)back[i],
                        (double)io->plain[i]);
            fail();
        }
    for (size_t i = 0; i < bcnt; i++)
        if (io->l == BE_BLOCKED16 &&
            (int)(i % 16) + (int)(i / (16 * io->hw) % ((size_t)(io->c + 15) / 16)) * 16 >= io->c &&
            io->blk[i] != 0.0f) {
            print_error("%s: padding element %zu of the blocked buffer is %.9g\n", what, i,
                        (double)io->blk[i]);
            fail();
        }
    free(back);
}

static void blk_same(const char *what, blk_io *io)
{
    blk_near(what, io, 0);
}

/* The blocked buffer made the plain one's copy again (after blk_near passed
 * two results that differ by rounding, so later ops read the same inputs). */
static void blk_resync(blk_io *io)
{
    size_t bcnt = blk_count(io);
    memset(io->blk, 0, bcnt * sizeof(float));
    to_blocked(io->l, io->plain, io->blk, io->n, io->c, io->hw, false);
    reupload(io->bb, io->blk, bcnt);
}

static void blk_free(blk_io *io)
{
    free(io->plain);
    free(io->blk);
    be->buf_free(ctx, io->pb);
    be->buf_free(ctx, io->bb);
}

/* Every op with a layout field, plain against L (blocked or channels-last),
 * for C input and K output channels (not multiples of 16: padded blocks). */
static void run_blocked_layouts(be_layout L, int C, int K, uint64_t seed)
{
    char err[256] = "";
    rng r;
    const int N = 2, H = 7, W = 5;
    const size_t HW = (size_t)H * W;
    assert_true(C <= 32 && K <= 32);
    print_message("%s layouts: %d channels in, %d out\n", L == BE_NHWC ? "nhwc" : "blocked", C,
                  K);
    rng_seed(&r, seed);
    blk_io x = blk_in(&r, L, N, C, HW), y = blk_in(&r, L, N, K, HW), dy = blk_in(&r, L, N, K, HW),
           dx = blk_in(&r, L, N, C, HW);
    float *wh = rand_floats(&r, (size_t)K * C * 9, -1, 1), *bh = rand_floats(&r, K, -1, 1);
    be_buf *wb = upload(wh, (size_t)K * C * 9), *bb = upload(bh, K),
           *dw = upload(NULL, (size_t)K * C * 9), *db = upload(NULL, K);
    float *g1 = malloc((size_t)K * C * 9 * sizeof *g1), *g2 = malloc((size_t)K * C * 9 * 4);

    /* convolution, blocked in and out against plain */
    for (int k = 0; k < 2; k++) {
        be_plan *p = NULL;
        be_conv_desc d = { .n = N, .c = C, .h = H, .w = W, .k = K, .oh = H, .ow = W, .kh = 3,
                           .kw = 3, .stride_h = 1, .stride_w = 1, .pad_t = 1, .pad_l = 1,
                           .pad_b = 1, .pad_r = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                           .bias = true, .src_layout = k ? L : BE_PLAIN,
                           .dst_layout = k ? L : BE_PLAIN };
        assert_int_equal(be->conv_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err,
                                       sizeof err), 0);
        assert_int_equal(be->conv_fwd(ctx, p, k ? x.bb : x.pb, wb, bb, k ? y.bb : y.pb, err,
                                      sizeof err), 0);
        assert_int_equal(be->conv_bwd_data(ctx, p, k ? dy.bb : dy.pb, wb, k ? dx.bb : dx.pb,
                                           err, sizeof err), 0);
        assert_int_equal(be->conv_bwd_weights(ctx, p, k ? x.bb : x.pb, k ? dy.bb : dy.pb, dw,
                                              db, err, sizeof err), 0);
        download(dw, k ? g2 : g1, (size_t)K * C * 9);
        be->plan_free(ctx, p);
    }
    /* A blocked input whose channels the blocks pad runs on channels-last
     * kernels (engine/cpu/conv.c, conv_channels_last), as does a channels-last
     * one: the same sums in another order, each within gamma_(K+1) (K+1) of
     * the exact one (K terms and the bias, all of |.| <= 1), so the two within
     * twice that. */
    const bool nhwc = L == BE_NHWC || C % 16 != 0;
    const double ty = nhwc ? 2 * gamma_k(C * 9 + 1) * (C * 9 + 1) : 0,
                 tx = nhwc ? 2 * gamma_k(K * 9 + 1) * (K * 9 + 1) : 0,
                 tw = nhwc ? 2 * gamma_k(N * HW + 1) * (N * HW + 1) : 0;
    blk_near("conv y", &y, ty);
    blk_near("conv dx", &dx, tx);
    for (size_t i = 0; i < (size_t)K * C * 9; i++)
        if (nhwc ? !(fabs((double)g1[i] - g2[i]) <= tw) : memcmp(&g1[i], &g2[i], sizeof *g1)) {
            print_error("conv dw[%zu]: blocked %.9g, plain %.9g\n", i, (double)g2[i], (double)g1[i]);
            fail();
        }
    blk_resync(&y);
    blk_resync(&dx);

    /* pooling: blocked in, blocked or plain out (a global pool feeding dense) */
    for (int out_blk = 0; out_blk < 2; out_blk++) {
        blk_io py = blk_in(&r, L, N, C, 1), pdy = blk_in(&r, L, N, C, 1),
               pdx = blk_in(&r, L, N, C, HW);
        for (int k = 0; k < 2; k++) {
            be_plan *p = NULL;
            be_pool_desc d = { .alg = BE_POOL_AVG_EXCLUDE_PAD, .n = N, .c = C, .h = H, .w = W,
                               .oh = 1, .ow = 1, .kh = H, .kw = W, .stride_h = 1, .stride_w = 1,
                               .src_layout = k ? L : BE_PLAIN,
                               .dst_layout = k && out_blk ? L : BE_PLAIN };
            assert_int_equal(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err),
                             0);
            /* a plain output of the blocked run goes where the plain run's went */
            be_buf *yo = k && out_blk ? py.bb : k ? pdy.bb : py.pb;
            be_buf *dyi = k && out_blk ? pdy.bb : pdy.pb;
            assert_int_equal(be->pool_fwd(ctx, p, k ? x.bb : x.pb, yo, err, sizeof err), 0);
            assert_int_equal(be->pool_bwd(ctx, p, dyi, k ? pdx.bb : pdx.pb, err, sizeof err), 0);
            be->plan_free(ctx, p);
        }
        if (out_blk) {
            blk_same("global pool y", &py);
        } else {
            float a[64], b[64];
            download(py.pb, a, (size_t)N * C);
            download(pdy.bb, b, (size_t)N * C);
            assert_memory_equal(a, b, (size_t)N * C * sizeof(float));
        }
        blk_same("global pool dx", &pdx);
        blk_free(&py);
        blk_free(&pdy);
        blk_free(&pdx);
    }
    /* max pooling 2x2 (odd size: the last row and column dropped) */
    {
        blk_io py = blk_in(&r, L, N, C, 6), pdy = blk_in(&r, L, N, C, 6),
               pdx = blk_in(&r, L, N, C, HW);
        for (int k = 0; k < 2; k++) {
            be_plan *p = NULL;
            be_layout l = k ? L : BE_PLAIN;
            be_pool_desc d = { .alg = BE_POOL_MAX, .n = N, .c = C, .h = H, .w = W, .oh = 3,
                               .ow = 2, .kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2,
                               .src_layout = l, .dst_layout = l };
            assert_int_equal(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err),
                             0);
            assert_int_equal(be->pool_fwd(ctx, p, k ? x.bb : x.pb, k ? py.bb : py.pb, err,
                                          sizeof err), 0);
            assert_int_equal(be->pool_bwd(ctx, p, k ? pdy.bb : pdy.pb, k ? pdx.bb : pdx.pb, err,
                                          sizeof err), 0);
            be->plan_free(ctx, p);
        }
        blk_same("maxpool y", &py);
        blk_same("maxpool dx", &pdx);
        blk_free(&py);
        blk_free(&pdy);
        blk_free(&pdx);
    }
    /* activations, batch norm and add on x's shape */
    blk_io ay = blk_in(&r, L, N, C, HW), ady = blk_in(&r, L, N, C, HW),
           adx = blk_in(&r, L, N, C, HW);
    const be_act_alg algs[] = { BE_ACT_RELU, BE_ACT_SIGMOID, BE_ACT_TANH, BE_ACT_RELU };
    for (int a = 0; a < 4; a++) {
        if (algs[a] == BE_ACT_SIGMOID && C % 16 && L == BE_BLOCKED16)
            continue;       /* oneDNN's reference kernel on padded blocks; the net avoids it */
        for (int k = 0; k < 2; k++) {
            be_plan *p = NULL;
            be_act_desc d = { .alg = algs[a], .n = N, .size = C * HW, .alpha = a == 3 ? 0.1f : 0,
                              .layout = k ? L : BE_PLAIN, .c = C };
            assert_int_equal(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err),
                             0);
            assert_int_equal(be->act_fwd(ctx, p, k ? x.bb : x.pb, k ? ay.bb : ay.pb, err,
                                         sizeof err), 0);
            assert_int_equal(be->act_bwd(ctx, p, k ? ay.bb : ay.pb, k ? ady.bb : ady.pb,
                                         k ? adx.bb : adx.pb, err, sizeof err), 0);
            be->plan_free(ctx, p);
        }
        blk_same("act y", &ay);
        blk_same("act dx", &adx);
    }
    {
        float ones[32], zeros[32], m1[32], m2[32], s1[32], s2[32];
        for (int i = 0; i < C; i++) {
            ones[i] = 1.0f + 0.01f * (float)i;
            zeros[i] = 0.1f * (float)i;
        }
        be_buf *gb = upload(ones, C), *hb = upload(zeros, C), *mb = upload(NULL, C),
               *vb = upload(NULL, C), *dgb = upload(NULL, C), *dhb = upload(NULL, C);
        for (int k = 0; k < 2; k++) {
            be_plan *p = NULL;
            be_bn_desc d = { .n = N, .c = C, .h = H, .w = W, .eps = 1e-5f,
                             .layout = k ? L : BE_PLAIN };
            assert_int_equal(be->bn_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p,
                                         err, sizeof err), 0);
            assert_int_equal(be->bn_fwd(ctx, p, true, k ? x.bb : x.pb, gb, hb, mb, vb,
                                        k ? ay.bb : ay.pb, err, sizeof err), 0);
            assert_int_equal(be->bn_bwd(ctx, p, k ? x.bb : x.pb, k ? ady.bb : ady.pb, gb, hb, mb,
                                        vb, k ? adx.bb : adx.pb, dgb, dhb, err, sizeof err), 0);
            download(dgb, k ? m2 : m1, C);
            download(dhb, k ? s2 : s1, C);
            be->plan_free(ctx, p);
        }
        blk_same("bn y", &ay);
        blk_same("bn dx", &adx);
        assert_memory_equal(m1, m2, (size_t)C * sizeof *m1);
        assert_memory_equal(s1, s2, (size_t)C * sizeof *s1);
        be_buf *bufs[] = { gb, hb, mb, vb, dgb, dhb };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            be->buf_free(ctx, bufs[i]);
    }
    for (int k = 0; k < 2; k++) {
        be_plan *p = NULL;
        be_add_desc d = { .n = N, .k = 2, .size = C * HW, .layout = k ? L : BE_PLAIN,
                          .c = C };
        const be_buf *xs[2] = { k ? x.bb : x.pb, k ? dx.bb : dx.pb };
        assert_int_equal(be->add_plan(ctx, &d, &p, err, sizeof err), 0);
        assert_int_equal(be->add_fwd(ctx, p, xs, k ? ay.bb : ay.pb, err, sizeof err), 0);
        be->plan_free(ctx, p);
    }
    blk_same("add y", &ay);
    /* dropout draws by the plain index: the same elements drop in both layouts */
    for (int k = 0; k < 2; k++) {
        be_dropout_desc d = { .count = (size_t)N * be_act_elems(C, HW, k ? L : BE_PLAIN),
                              .rate = 0.4f, .layout = k ? L : BE_PLAIN, .c = C,
                              .hw = HW };
        assert_int_equal(be->dropout_fwd(ctx, &d, true, k ? x.bb : x.pb, k ? adx.bb : adx.pb,
                                         k ? ay.bb : ay.pb, 77, err, sizeof err), 0);
    }
    blk_same("dropout y", &ay);
    blk_same("dropout mask", &adx);
    /* the gradient of an add's inputs: accumulation over the whole padded buffer */
    for (int k = 0; k < 2; k++) {
        size_t cnt = (size_t)N * be_act_elems(C, HW, k ? L : BE_PLAIN);
        assert_int_equal(be->acc(ctx, k ? adx.bb : adx.pb, k ? x.bb : x.pb, cnt, BE_F32, 0.5f, err,
                                 sizeof err), 0);
    }
    blk_same("acc", &adx);
    blk_free(&ay);
    blk_free(&ady);
    blk_free(&adx);
    blk_free(&x);
    blk_free(&y);
    blk_free(&dy);
    blk_free(&dx);
    be->buf_free(ctx, wb);
    be->buf_free(ctx, bb);
    be->buf_free(ctx, dw);
    be->buf_free(ctx, db);
    free(wh);
    free(bh);
    free(g1);
    free(g2);
}

static void test_blocked_layouts(void **state)
{
    run_blocked_layouts(BE_BLOCKED16, 32, 16, 121);     /* whole blocks */
    run_blocked_layouts(BE_BLOCKED16, 20, 12, 122);     /* padded blocks, as lenet's 20 and 50 */
    run_blocked_layouts(BE_BLOCKED16, 9, 30, 123);
    run_blocked_layouts(BE_NHWC, 20, 12, 124);          /* channels-last (bfloat16 nets') */
    run_blocked_layouts(BE_NHWC, 32, 9, 125);
}

/* ---- softmax cross-entropy ------------------------------------------------------------ */

typedef struct xent_case {
    be_plan *plan;
    be_buf *zb, *lb;
    int n, classes;
    float eps;                                 /* label smoothing */
} xent_case;

static double xent_loss(xent_case *xc)
{
    char err[256] = "";
    double loss = 0;
    int correct = 0;
    assert_int_equal(be->xent(ctx, xc->plan, xc->zb, xc->lb, xc->eps, 1.0f, NULL, NULL, &loss,
                              &correct, err, sizeof err), 0);
    return loss;
}

/* Rounding bound of one row's float loss: the sum of `classes` exponentials
 * (each within an ulp), its log, and the final subtraction. */
static double row_loss_bound(int classes, double lse, double zl_shift)
{
    return (classes + 4) * U * (1.0 + fabs(lse) + fabs(zl_shift));
}

/* n rows of `classes` logits in [-spread, spread], label smoothing eps: the
 * loss, probabilities and gradient against a double-precision reference of
 * -sum_c q_c log p_c with q = (1 - eps) onehot + eps / classes, and the
 * gradient against finite differences of the loss. */
static void run_xent_case(int n, int classes, double spread, float eps, uint64_t seed)
{
    char err[256] = "";
    rng r;
    xent_case xc = { .n = n, .classes = classes, .eps = eps };
    size_t nz = (size_t)n * classes;
    rng_seed(&r, seed);
    float *z = rand_floats(&r, nz, -spread, spread);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)(rng_next(&r) % (uint64_t)classes);
    lab[0] = 0;                                /* make row 0 a sure hit: its label wins */
    z[0] = (float)(spread + 1.0);
    xc.zb = upload(z, nz);
    xc.lb = be->buf_alloc(ctx, (size_t)n * sizeof *lab, err, sizeof err);
    assert_non_null(xc.lb);
    assert_int_equal(be->buf_upload(ctx, xc.lb, 0, lab, (size_t)n * sizeof *lab, err, sizeof err), 0);
    be_buf *db = upload(NULL, nz), *pb = upload(NULL, nz);
    be_xent_desc d = { .n = n, .classes = classes };
    assert_int_equal(be->xent_plan(ctx, &d, &xc.plan, err, sizeof err), 0);

    double loss = 0;
    int correct = -1;
    const float scale = 0.25f;                 /* a grad_scale that is not 1 */
    assert_int_equal(be->xent(ctx, xc.plan, xc.zb, xc.lb, eps, scale, db, pb, &loss, &correct,
                              err, sizeof err), 0);
    float *dz = malloc(nz * sizeof *dz), *p = malloc(nz * sizeof *p);
    download(db, dz, nz);
    download(pb, p, nz);

    double loss_ref = 0, loss_tol = 0;
    int correct_ref = 0;
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * classes;
        double m = zi[0], s = 0, psum = 0;
        int top = 0;
        for (int c = 1; c < classes; c++)
            if (zi[c] > m) {
                m = zi[c];
                top = c;
            }
        for (int c = 0; c < classes; c++)
            s += exp(zi[c] - m);
        double lse = log(s), on = 1.0 - (double)eps, off = (double)eps / classes, far = 0;
        for (int c = 0; c < classes; c++) {
            loss_ref += ((c == lab[i] ? on : 0.0) + off) * (lse - (zi[c] - m));
            far = fmax(far, fabs(zi[c] - m));
        }
        /* With smoothing the row's loss also sums every shifted logit. */
        loss_tol += row_loss_bound(classes, lse, eps > 0 ? far : zi[lab[i]] - m) *
                    (eps > 0 ? 2.0 : 1.0);
        correct_ref += top == lab[i];
        for (int c = 0; c < classes; c++) {
            size_t k = (size_t)i * classes + c;
            double pr = exp(zi[c] - m - lse);
            /* exp's argument carries the loss-sized error; exp turns it relative. */
            double ptol = pr * row_loss_bound(classes, lse, zi[c] - m) + U * pr + 1e-38;
            double g = (pr - ((c == lab[i] ? on : 0.0) + off)) * scale;
            if (!(fabs(p[k] - pr) <= ptol)) {
                print_error("p[%d][%d] %.9g vs %.9g\n", i, c, (double)p[k], pr);
                fail();
            }
            /* dz = (p - onehot) * scale: p's error, the subtraction and the scaling. */
            if (!(fabs(dz[k] - g) <= ptol * scale + 2 * U * fabs(g) + 1e-38)) {
                print_error("dz[%d][%d] %.9g vs %.9g\n", i, c, (double)dz[k], g);
                fail();
            }
            psum += p[k];
        }
        assert_true(fabs(psum - 1.0) <= (classes + 1) * U * 2);
    }
    if (!(fabs(loss - loss_ref) <= loss_tol + 1e-15 * loss_ref)) {
        print_error("loss %.12g vs reference %.12g (tol %.3g)\n", loss, loss_ref, loss_tol);
        fail();
    }
    assert_int_equal(correct, correct_ref);
    assert_true(correct >= 1);

    /* Without labels: probabilities only, no loss. */
    float *p2 = malloc(nz * sizeof *p2);
    assert_int_equal(be->xent(ctx, xc.plan, xc.zb, NULL, eps, 1.0f, NULL, pb, &loss, &correct,
                              err, sizeof err), 0);
    download(pb, p2, nz);
    assert_memory_equal(p, p2, nz * sizeof *p);
    assert_true(loss == 0 && correct == 0);

    /* Finite differences of the summed loss against dz / scale. Only the
     * probed row's loss changes; its two evaluations each carry the row bound. */
    const double h = 0.1, trunc = h * h / 6.0 / (6.0 * sqrt(3.0));
    for (size_t k = 0; k < nz; k += fd_step(nz)) {
        float keep = z[k], up = (float)(keep + h), dn = (float)(keep - h);
        z[k] = up;
        reupload(xc.zb, z, nz);
        double lp = xent_loss(&xc);
        z[k] = dn;
        reupload(xc.zb, z, nz);
        double lm = xent_loss(&xc);
        z[k] = keep;
        reupload(xc.zb, z, nz);
        double step = (double)up - (double)dn, fd = (lp - lm) / step;
        /* At the probes: lse = log sum exp(z - max) <= log(classes), and the
         * label's logit is within 2 * spread + 1 + h of the row maximum. */
        double tol = 2 * row_loss_bound(classes, log((double)classes), 2 * spread + 1 + h) *
                         (eps > 0 ? 2.0 : 1.0) / step +
                     trunc + (classes + 4) * U * 2 + 1e-15 * fabs(lp) / step;
        double g = dz[k] / scale;
        if (!(fabs(fd - g) <= tol)) {
            print_error("xent dz[%zu]: fd %.9g vs grad %.9g (tol %.3g)\n", k, fd, g, tol);
            fail();
        }
    }
    free(z);
    free(lab);
    free(dz);
    free(p);
    free(p2);
    be->plan_free(ctx, xc.plan);
    be->buf_free(ctx, xc.zb);
    be->buf_free(ctx, xc.lb);
    be->buf_free(ctx, db);
    be->buf_free(ctx, pb);
}

static void test_softmax_xent(void **state)
{
    run_xent_case(4, 10, 3.0, 0.0f, 41);
    run_xent_case(7, 3, 1.0, 0.0f, 42);
    run_xent_case(33, 17, 8.0, 0.0f, 43);   /* large logits: the shift by the max matters */
}

/* Label smoothing: the same checks against the smoothed target. */
static void test_softmax_xent_smoothing(void **state)
{
    run_xent_case(4, 10, 3.0, 0.1f, 44);
    run_xent_case(7, 3, 1.0, 0.3f, 45);
    run_xent_case(33, 17, 8.0, 0.05f, 46);
}

/* Smoothing 0 is the plain loss bit for bit (runs stay reproducible), and
 * with smoothing a confident right answer still costs something: with eps
 * 0.1 over 3 classes a one-hot-like row has loss about eps / 3 * 2000. */
static void test_softmax_xent_smoothing_values(void **state)
{
    float z[3] = { 2.5f, -1.0f, 0.25f }, p0[3], d0[3], p1[3], d1[3];
    int top = -1;
    float l0 = ew_softmax_xent_row(z, 3, 0, 0.0f, 1.0f, p0, d0, &top);
    double s = exp(0.0) + exp(-3.5) + exp(-2.25), lse = log(s);
    assert_true(fabs(l0 - lse) <= 8 * U);
    float l1 = ew_softmax_xent_row(z, 3, 0, 0.3f, 1.0f, p1, d1, &top);
    double ref = (0.7 + 0.1) * lse + 0.1 * (lse + 3.5) + 0.1 * (lse + 2.25);
    assert_true(fabs(l1 - ref) <= 16 * U * ref);
    assert_memory_equal(p0, p1, sizeof p0);
    double sum = 0;
    for (int c = 0; c < 3; c++) {
        double q = (c == 0 ? 0.7 : 0.0) + 0.1;
        assert_true(fabs(d1[c] - (p1[c] - q)) <= 4 * U);
        sum += d1[c];
    }
    assert_true(fabs(sum) <= 8 * U);           /* p and q both sum to 1 */

    float big[3] = { 1000.0f, 0.0f, -1000.0f };
    float lb = ew_softmax_xent_row(big, 3, 0, 0.1f, 1.0f, NULL, NULL, &top);
    double want = (0.1 / 3) * (1000.0 + 2000.0);  /* lse = 0 after the shift */
    assert_true(isfinite(lb) && fabs(lb - want) <= 1e-4 * want);
}

/* Large logits must not overflow: a naive softmax gives NaN here. */
static void test_softmax_xent_stable(void **state)
{
    float z[3] = { 1000.0f, 0.0f, -1000.0f }, p[3], dz[3];
    int top = -1;
    float loss = ew_softmax_xent_row(z, 3, 1, 0.0f, 1.0f, p, dz, &top);
    assert_true(isfinite(loss));
    assert_true(fabs(loss - 1000.0) <= 1000.0 * 4 * U);
    assert_int_equal(top, 0);
    assert_true(p[0] == 1.0f && p[1] == 0.0f && p[2] == 0.0f);
    assert_true(dz[0] == 1.0f && dz[1] == -1.0f && dz[2] == 0.0f);
}

/* ---- SGD ------------------------------------------------------------------------------- */

static void test_sgd_momentum(void **state)
{
    char err[256] = "";
    rng r;
    const size_t n = 70000;                   /* past the threshold for threads */
    rng_seed(&r, 51);
    float *w = rand_floats(&r, n, -1, 1), *g1 = rand_floats(&r, n, -1, 1),
          *g2 = rand_floats(&r, n, -1, 1), *v = calloc(n, sizeof *v);
    be_buf *wb = upload(w, n), *vb = upload(v, n), *gb = upload(g1, n);
    /* Two steps with different learning rates: PyTorch's form keeps v in
     * gradient units, so the second step is w -= lr2 * (mu v1 + d2). */
    const be_sgd s1 = { .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f };
    const be_sgd s2 = { .lr = 0.02f, .momentum = 0.9f, .weight_decay = 0.01f };
    assert_int_equal(be->sgd_update(ctx, wb, vb, gb, n, &s1, err, sizeof err), 0);
    reupload(gb, g2, n);
    assert_int_equal(be->sgd_update(ctx, wb, vb, gb, n, &s2, err, sizeof err), 0);
    float *wo = malloc(n * sizeof *wo), *vo = malloc(n * sizeof *vo);
    download(wb, wo, n);
    download(vb, vo, n);
    for (size_t i = 0; i < n; i++) {
        double W = w[i], V = 0, wtol = 0, vtol = 0;
        const float *gs[2] = { g1, g2 };
        const be_sgd *ss[2] = { &s1, &s2 };
        for (int k = 0; k < 2; k++) {
            double lr = ss[k]->lr, mu = ss[k]->momentum, wd = ss[k]->weight_decay;
            double d = gs[k][i] + wd * W;
            /* each step: 2 roundings for d, 2 for v, 2 for w, on these magnitudes */
            vtol = mu * vtol + wd * wtol + gamma_k(4) * (fabs(gs[k][i]) + fabs(wd * W) +
                                                         fabs(mu * V));
            V = mu * V + d;
            wtol = wtol + lr * vtol + gamma_k(2) * (fabs(W) + fabs(lr * V));
            W = W - lr * V;
        }
        if (!(fabs(vo[i] - V) <= vtol && fabs(wo[i] - W) <= wtol)) {
            print_error("sgd[%zu]: w %.9g vs %.9g (tol %.3g), v %.9g vs %.9g (tol %.3g)\n", i,
                        (double)wo[i], W, wtol, (double)vo[i], V, vtol);
            fail();
        }
    }
    free(w);
    free(g1);
    free(g2);
    free(v);
    free(wo);
    free(vo);
    be->buf_free(ctx, wb);
    be->buf_free(ctx, vb);
    be->buf_free(ctx, gb);
}

/* Buffers: zeroed on allocation, bounds-checked copies. */
static void test_buffers(void **state)
{
    char err[256] = "";
    float z[5] = { 1, 1, 1, 1, 1 }, src[2] = { 3.5f, -2.0f };
    be_buf *b = be->buf_alloc(ctx, 5 * sizeof(float), err, sizeof err);
    assert_non_null(b);
    assert_int_equal(be->buf_download(ctx, b, 0, z, sizeof z, err, sizeof err), 0);
    for (int i = 0; i < 5; i++)
        assert_true(z[i] == 0.0f);
    assert_int_equal(be->buf_upload(ctx, b, 3 * sizeof(float), src, sizeof src, err, sizeof err), 0);
    assert_int_equal(be->buf_download(ctx, b, 0, z, sizeof z, err, sizeof err), 0);
    assert_true(z[3] == 3.5f && z[4] == -2.0f && z[2] == 0.0f);
    assert_int_equal(be->buf_upload(ctx, b, 4 * sizeof(float), src, sizeof src, err, sizeof err), -1);
    assert_non_null(strstr(err, "overruns"));
    be->buf_free(ctx, b);
    be->buf_free(ctx, NULL);
    be->plan_free(ctx, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_conv_basic),
        cmocka_unit_test(test_conv_stride_pad_odd),
        cmocka_unit_test(test_conv_same_even_kernel),
        cmocka_unit_test(test_conv_same_stride2),
        cmocka_unit_test(test_conv_dilation),
        cmocka_unit_test(test_conv_groups),
        cmocka_unit_test(test_conv_1x1_and_wide),
        cmocka_unit_test(test_conv_winograd),
        cmocka_unit_test(test_conv_wino16),
        cmocka_unit_test(test_wino16_threads),
        cmocka_unit_test(test_plan_without_pass),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_sigmoid_tanh),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_batchnorm_no_dx),
        cmocka_unit_test(test_batchnorm_relu),
        cmocka_unit_test(test_add_acc),
        cmocka_unit_test(test_acc_bf16),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_blocked_layouts),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_softmax_xent_smoothing),
        cmocka_unit_test(test_softmax_xent_smoothing_values),
        cmocka_unit_test(test_softmax_xent_stable),
        cmocka_unit_test(test_sgd_momentum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
