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

static void run_conv_case(be_conv_desc d, uint64_t seed)
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

    /* Finite differences; |x|, |w|, |b| <= 1 bound how far a term can move. */
    const double h = 0.25;
    fd_check fx = { "conv x", &cc, conv_fwd_op, cc.x, cc.xb, cc.nx, dxo, &dx, cc.r, cc.ny,
                    h, &y, h, 0 };
    fd_run(&fx);
    fd_check fw = { "conv w", &cc, conv_fwd_op, cc.w, cc.wb, cc.nw, dwo, &dw, cc.r, cc.ny,
                    h, &y, h, 0 };
    fd_run(&fw);
    if (d.bias) {
        fd_check fb = { "conv b", &cc, conv_fwd_op, cc.b, cc.bb, (size_t)d.k, dbo, &db, cc.r,
                        cc.ny, h, &y, h, 0 };
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

/* ---- softmax cross-entropy ------------------------------------------------------------ */

typedef struct xent_case {
    be_plan *plan;
    be_buf *zb, *lb;
    int n, classes;
} xent_case;

static double xent_loss(xent_case *xc)
{
    char err[256] = "";
    double loss = 0;
    int correct = 0;
    assert_int_equal(be->xent(ctx, xc->plan, xc->zb, xc->lb, 1.0f, NULL, NULL, &loss, &correct,
                              err, sizeof err), 0);
    return loss;
}

/* Rounding bound of one row's float loss: the sum of `classes` exponentials
 * (each within an ulp), its log, and the final subtraction. */
static double row_loss_bound(int classes, double lse, double zl_shift)
{
    return (classes + 4) * U * (1.0 + fabs(lse) + fabs(zl_shift));
}

static void run_xent_case(int n, int classes, double spread, uint64_t seed)
{
    char err[256] = "";
    rng r;
    xent_case xc = { .n = n, .classes = classes };
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
    assert_int_equal(be->xent(ctx, xc.plan, xc.zb, xc.lb, scale, db, pb, &loss, &correct,
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
        double lse = log(s);
        loss_ref += lse - (zi[lab[i]] - m);
        loss_tol += row_loss_bound(classes, lse, zi[lab[i]] - m);
        correct_ref += top == lab[i];
        for (int c = 0; c < classes; c++) {
            size_t k = (size_t)i * classes + c;
            double pr = exp(zi[c] - m - lse);
            /* exp's argument carries the loss-sized error; exp turns it relative. */
            double ptol = pr * row_loss_bound(classes, lse, zi[c] - m) + U * pr + 1e-38;
            double g = (pr - (c == lab[i])) * scale;
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
    assert_int_equal(be->xent(ctx, xc.plan, xc.zb, NULL, 1.0f, NULL, pb, &loss, &correct,
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
        double tol = 2 * row_loss_bound(classes, log((double)classes), 2 * spread + 1 + h) / step +
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
    run_xent_case(4, 10, 3.0, 41);
    run_xent_case(7, 3, 1.0, 42);
    run_xent_case(33, 17, 8.0, 43);         /* large logits: the shift by the max matters */
}

/* Large logits must not overflow: a naive softmax gives NaN here. */
static void test_softmax_xent_stable(void **state)
{
    float z[3] = { 1000.0f, 0.0f, -1000.0f }, p[3], dz[3];
    int top = -1;
    float loss = ew_softmax_xent_row(z, 3, 1, 1.0f, p, dz, &top);
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
        cmocka_unit_test(test_plan_without_pass),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_softmax_xent_stable),
        cmocka_unit_test(test_sgd_momentum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
