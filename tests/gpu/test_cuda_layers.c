/* The CUDA backend's layer ops (engine/cuda/layers.c: cuDNN convolution,
 * pooling and batch norm, cuBLAS dense layers, activation, add and concat
 * kernels) against naive references computed in double on the host, forward
 * and backward, in FP32, bfloat16 and FP16.
 *
 * Inputs are drawn exactly representable in both 16-bit types, so every type
 * sees the same values. Tolerances, in one table: an FP32 result may differ
 * from the exact one by reordered FP32 sums (K terms: about K 2^-24 max|term|,
 * taken as K 2^-22); a 16-bit result by that and its own rounding, u |ref|
 * (u = 2^-8 bfloat16, 2^-11 FP16). Two results are rounded twice in 16 bits
 * and get a second u |pre| for the value rounded first: a convolution's or
 * dense layer's output with bias (cuDNN and the cuBLAS call write y in the
 * 16-bit type, the bias is added after; PyTorch adds cuDNN's bias the same
 * way); and average pooling, whose 16-bit kernel rounds each of the window's
 * k - 1 partial sums (seen on an H100: bfloat16 averages two units off), so
 * its bound is u (k - 1) sum|x| / k. */
#include "gpu_test.h"

static const struct tol {
    be_dtype dt;
    const char *name;
    double u, acc;
} TOL[] = {
    { BE_F32, "fp32", 0.0, 0x1p-22 },
    { BE_BF16, "bf16", 0x1p-8, 0x1p-22 },
    { BE_F16, "fp16", 0x1p-11, 0x1p-22 },
};

/* Values in [-1, 1] representable in bfloat16 and FP16. */
static float *vals(rng *r, size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        float v = ew_bf16_to_f32(ew_f32_to_bf16((float)rng_range(r, -1, 1)));
        p[i] = fabsf(v) < 0x1p-10f ? 0x1p-10f : v;
    }
    return p;
}

static be_buf *up(const float *v, size_t n, be_dtype dt)
{
    void *h = malloc(n * 4);
    to_type(v, h, n, dt);
    be_buf *b = dev(h, n * be->dtype_bytes(dt));
    free(h);
    return b;
}

static float *down(const be_buf *b, size_t n, be_dtype dt)
{
    void *h = malloc(n * 4);
    float *o = malloc(n * sizeof *o);
    get(b, h, n * be->dtype_bytes(dt));
    for (size_t i = 0; i < n; i++)
        o[i] = from_type(h, i, dt);
    free(h);
    return o;
}

/* |got - ref| <= u |ref| (16-bit results; plus u |pre| where a value pre was
 * rounded before) + acc k scale. */
static void compare2(const char *what, const struct tol *t, bool out32, const float *got,
                     const double *ref, const double *pre, size_t n, double k, double scale)
{
    int bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = (out32 ? 0.0 : t->u * (fabs(ref[i]) + (pre ? fabs(pre[i]) : 0.0))) +
                     t->acc * k * scale + 1e-30;
        if (!(fabs(got[i] - ref[i]) <= tol) && !bad++)
            first = i;
    }
    CHECK(bad == 0, "%s, %s: %d of %zu wrong, first [%zu] %.9g vs %.9g", what, t->name, bad, n,
          first, bad ? (double)got[first] : 0.0, bad ? ref[first] : 0.0);
}

static void compare(const char *what, const struct tol *t, bool out32, const float *got,
                    const double *ref, size_t n, double k, double scale)
{
    compare2(what, t, out32, got, ref, NULL, n, k, scale);
}

/* ---- convolution -------------------------------------------------------------- */

typedef struct cc {
    int n, c, h, w, k, kh, kw, s, pad, dil, g;
    bool bias;
} cc;

static void conv_case(const cc *q, rng *r)
{
    int oh = (q->h + 2 * q->pad - (q->dil * (q->kh - 1) + 1)) / q->s + 1;
    int ow = (q->w + 2 * q->pad - (q->dil * (q->kw - 1) + 1)) / q->s + 1;
    int cg = q->c / q->g, kg = q->k / q->g;
    size_t nx = (size_t)q->n * q->c * q->h * q->w, ny = (size_t)q->n * q->k * oh * ow;
    size_t nw = (size_t)q->k * cg * q->kh * q->kw;
    float *x = vals(r, nx), *w = vals(r, nw), *b = vals(r, q->k), *dy = vals(r, ny);
    double *y = calloc(ny, 8), *dx = calloc(nx, 8), *dw = calloc(nw, 8), *db = calloc(q->k, 8),
           *pre = calloc(ny, 8);
#define X(n_, c_, h_, w_) x[(((size_t)(n_) * q->c + (c_)) * q->h + (h_)) * q->w + (w_)]
#define W(k_, c_, h_, w_) w[(((size_t)(k_) * cg + (c_)) * q->kh + (h_)) * q->kw + (w_)]
    for (int n = 0; n < q->n; n++)
        for (int k = 0; k < q->k; k++)
            for (int i = 0; i < oh; i++)
                for (int j = 0; j < ow; j++) {
                    size_t yi = (((size_t)n * q->k + k) * oh + i) * ow + j;
                    double s = q->bias ? b[k] : 0.0, g = dy[yi];
                    int gi = k / kg;
                    for (int c = 0; c < cg; c++)
                        for (int u = 0; u < q->kh; u++)
                            for (int v = 0; v < q->kw; v++) {
                                int hh = i * q->s - q->pad + u * q->dil, ww = j * q->s - q->pad + v * q->dil;
                                if (hh < 0 || hh >= q->h || ww < 0 || ww >= q->w)
                                    continue;
                                int ci = gi * cg + c;
                                s += (double)X(n, ci, hh, ww) * W(k, c, u, v);
                                dx[(((size_t)n * q->c + ci) * q->h + hh) * q->w + ww] += g * W(k, c, u, v);
                                dw[(((size_t)k * cg + c) * q->kh + u) * q->kw + v] += g * X(n, ci, hh, ww);
                            }
                    y[yi] = s;
                    pre[yi] = q->bias ? s - b[k] : 0.0;
                    db[k] += g;
                }
    for (size_t t = 0; t < sizeof TOL / sizeof TOL[0]; t++) {
        be_dtype dt = TOL[t].dt;
        be_conv_desc d = { .n = q->n, .c = q->c, .h = q->h, .w = q->w, .k = q->k, .oh = oh, .ow = ow,
                           .kh = q->kh, .kw = q->kw, .stride_h = q->s, .stride_w = q->s,
                           .pad_t = q->pad, .pad_l = q->pad, .pad_b = q->pad, .pad_r = q->pad,
                           .dil_h = q->dil, .dil_w = q->dil, .groups = q->g, .bias = q->bias,
                           .src_dtype = dt, .dst_dtype = dt, .wdtype = dt };
        be_plan *p = NULL;
        OK(be->conv_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err, sizeof err));
        be_buf *bx = up(x, nx, dt), *bw = up(w, nw, dt), *bb = up(b, q->k, BE_F32),
               *bdy = up(dy, ny, dt), *by = dev(NULL, ny * 4), *bdx = dev(NULL, nx * 4),
               *bdw = dev(NULL, nw * 4), *bdb = dev(NULL, q->k * 4);
        OK(be->conv_fwd(ctx, p, bx, bw, q->bias ? bb : NULL, by, err, sizeof err));
        OK(be->conv_bwd_data(ctx, p, bdy, bw, bdx, err, sizeof err));
        OK(be->conv_bwd_weights(ctx, p, bx, bdy, bdw, q->bias ? bdb : NULL, err, sizeof err));
        float *gy = down(by, ny, dt), *gdx = down(bdx, nx, dt), *gdw = down(bdw, nw, BE_F32),
              *gdb = down(bdb, q->k, BE_F32);
        double kf = (double)cg * q->kh * q->kw, kd = (double)kg * q->kh * q->kw,
               kw = (double)q->n * oh * ow;
        char what[64];
        snprintf(what, sizeof what, "conv %dx%dx%d k%d s%d g%d y", q->c, q->h, q->w, q->k, q->s, q->g);
        compare2(what, &TOL[t], false, gy, y, pre, ny, kf + 1, 1.0);
        what[strlen(what) - 1] = 'x', what[strlen(what) - 2] = 'd';
        compare(what, &TOL[t], false, gdx, dx, nx, kd, 1.0);
        /* the weight gradient of a 16-bit conv is written 16-bit, then cast */
        compare("conv dw", &TOL[t], dt == BE_F32, gdw, dw, nw, kw, 1.0);
        if (q->bias)
            compare("conv db", &TOL[t], true, gdb, db, q->k, kw, 1.0);
        be_buf *all[] = { bx, bw, bb, bdy, by, bdx, bdw, bdb };
        for (int i = 0; i < 8; i++)
            be->buf_free(ctx, all[i]);
        be->plan_free(ctx, p);
        free(gy), free(gdx), free(gdw), free(gdb);
    }
#undef X
#undef W
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(pre);
}

static void test_conv(rng *r)
{
    const cc cases[] = {
        { 2, 3, 9, 7, 8, 3, 3, 1, 1, 1, 1, true },
        { 2, 20, 11, 9, 12, 3, 3, 2, 0, 1, 1, true },
        { 3, 8, 10, 10, 8, 3, 3, 1, 2, 2, 2, false },
        { 2, 32, 6, 6, 48, 1, 1, 1, 0, 1, 1, false },
        { 4, 16, 13, 5, 17, 5, 3, 1, 1, 1, 1, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_case(&cases[i], r);
}

/* ---- dense -------------------------------------------------------------------- */

static void test_dense(rng *r)
{
    const int n = 7, in = 300, out = 21;
    float *x = vals(r, (size_t)n * in), *w = vals(r, (size_t)in * out), *b = vals(r, out),
          *dy = vals(r, (size_t)n * out);
    double *y = calloc((size_t)n * out, 8), *dx = calloc((size_t)n * in, 8),
           *dw = calloc((size_t)in * out, 8), *db = calloc(out, 8), *pre = calloc((size_t)n * out, 8);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o], g = dy[i * out + o];
            for (int j = 0; j < in; j++) {
                s += (double)x[i * in + j] * w[o * in + j];
                dx[i * in + j] += g * w[o * in + j];
                dw[o * in + j] += g * x[i * in + j];
            }
            y[i * out + o] = s;
            pre[i * out + o] = s - b[o];
            db[o] += g;
        }
    for (size_t t = 0; t < sizeof TOL / sizeof TOL[0]; t++) {
        for (int logits = 0; logits < 2; logits++) {
            be_dtype dt = TOL[t].dt, ydt = logits ? BE_F32 : dt;
            be_dense_desc d = { .n = n, .in = in, .out = out, .bias = true, .src_dtype = dt,
                                .dst_dtype = ydt, .wdtype = dt };
            be_plan *p = NULL;
            OK(be->dense_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err, sizeof err));
            be_buf *bx = up(x, (size_t)n * in, dt), *bw = up(w, (size_t)in * out, dt),
                   *bb = up(b, out, BE_F32), *bdy = up(dy, (size_t)n * out, ydt),
                   *by = dev(NULL, (size_t)n * out * 4), *bdx = dev(NULL, (size_t)n * in * 4),
                   *bdw = dev(NULL, (size_t)in * out * 4), *bdb = dev(NULL, out * 4);
            OK(be->dense_fwd(ctx, p, bx, bw, bb, by, err, sizeof err));
            OK(be->dense_bwd_data(ctx, p, bdy, bw, bdx, err, sizeof err));
            OK(be->dense_bwd_weights(ctx, p, bx, bdy, bdw, bdb, err, sizeof err));
            float *gy = down(by, (size_t)n * out, ydt), *gdx = down(bdx, (size_t)n * in, dt),
                  *gdw = down(bdw, (size_t)in * out, BE_F32), *gdb = down(bdb, out, BE_F32);
            compare2(logits ? "dense logits" : "dense y", &TOL[t], logits, gy, y, pre,
                     (size_t)n * out, in + 1, 1.0);
            compare("dense dx", &TOL[t], false, gdx, dx, (size_t)n * in, out, 1.0);
            compare("dense dw", &TOL[t], true, gdw, dw, (size_t)in * out, n, 1.0);
            compare("dense db", &TOL[t], true, gdb, db, out, n, 1.0);
            be_buf *all[] = { bx, bw, bb, bdy, by, bdx, bdw, bdb };
            for (int i = 0; i < 8; i++)
                be->buf_free(ctx, all[i]);
            be->plan_free(ctx, p);
            free(gy), free(gdx), free(gdw), free(gdb);
        }
    }
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(pre);
}

/* ---- pooling, activations, batch norm, add, concat ------------------------------- */

#define N 2
#define C 6
#define H 8
#define WD 6
#define HW (H * WD)
#define CNT ((size_t)N * C * HW)

/* Distinct values (no ties in a window), j / 512 for a shuffled j. */
static float *distinct(rng *r)
{
    float *p = malloc(CNT * sizeof *p);
    for (size_t i = 0; i < CNT; i++)
        p[i] = ((float)i - (float)CNT / 2) / 512.0f;
    for (size_t i = CNT - 1; i > 0; i--) {
        size_t j = rng_next(r) % (i + 1);
        float t = p[i];
        p[i] = p[j], p[j] = t;
    }
    return p;
}

static void test_pool(rng *r)
{
    float *x = distinct(r);
    const size_t ny = (size_t)N * C * (H / 2) * (WD / 2);
    float *dy = vals(r, ny);
    for (int avg = 0; avg < 2; avg++) {
        double *y = calloc(ny, 8), *dx = calloc(CNT, 8), *pre = calloc(ny, 8);
        for (int nc = 0; nc < N * C; nc++)
            for (int i = 0; i < H / 2; i++)
                for (int j = 0; j < WD / 2; j++) {
                    size_t yi = ((size_t)nc * (H / 2) + i) * (WD / 2) + j, best = 0;
                    double s = 0, m = -1e30;
                    for (int u = 0; u < 2; u++)
                        for (int v = 0; v < 2; v++) {
                            size_t xi = ((size_t)nc * H + 2 * i + u) * WD + 2 * j + v;
                            s += x[xi];
                            pre[yi] += 3.0 * fabs(x[xi]) / 4.0;
                            if (x[xi] > m)
                                m = x[xi], best = xi;
                        }
                    y[yi] = avg ? s / 4 : m;
                    if (avg)
                        for (int u = 0; u < 2; u++)
                            for (int v = 0; v < 2; v++)
                                dx[((size_t)nc * H + 2 * i + u) * WD + 2 * j + v] += dy[yi] / 4;
                    else
                        dx[best] += dy[yi];
                }
        for (size_t t = 0; t < sizeof TOL / sizeof TOL[0]; t++) {
            be_dtype dt = TOL[t].dt;
            be_pool_desc d = { .alg = avg ? BE_POOL_AVG_EXCLUDE_PAD : BE_POOL_MAX, .n = N, .c = C,
                               .h = H, .w = WD, .oh = H / 2, .ow = WD / 2, .kh = 2, .kw = 2,
                               .stride_h = 2, .stride_w = 2, .dtype = dt };
            be_plan *p = NULL;
            OK(be->pool_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err));
            be_buf *bx = up(x, CNT, dt), *bdy = up(dy, ny, dt), *by = dev(NULL, ny * 4),
                   *bdx = dev(NULL, CNT * 4);
            OK(be->pool_fwd(ctx, p, bx, by, err, sizeof err));
            OK(be->pool_bwd(ctx, p, bdy, bdx, err, sizeof err));
            float *gy = down(by, ny, dt), *gdx = down(bdx, CNT, dt);
            compare2(avg ? "avgpool y" : "maxpool y", &TOL[t], false, gy, y, avg ? pre : NULL, ny, 4,
                     8.0);
            compare(avg ? "avgpool dx" : "maxpool dx", &TOL[t], false, gdx, dx, CNT, 1, 1.0);
            be->buf_free(ctx, bx), be->buf_free(ctx, bdy), be->buf_free(ctx, by), be->buf_free(ctx, bdx);
            be->plan_free(ctx, p);
            free(gy), free(gdx);
        }
        free(y), free(dx), free(pre);
    }
    free(x), free(dy);
}

static void test_act_add_concat(rng *r)
{
    float *x = vals(r, CNT), *x2 = vals(r, CNT), *dy = vals(r, CNT);
    for (size_t t = 0; t < sizeof TOL / sizeof TOL[0]; t++) {
        be_dtype dt = TOL[t].dt;
        for (int alg = 0; alg < 3; alg++) {
            be_act_desc d = { .alg = (be_act_alg)alg, .n = N, .size = (size_t)C * HW, .alpha = 0.1f,
                              .c = C, .dtype = dt };
            be_plan *p = NULL;
            OK(be->act_plan(ctx, &d, BE_FWD | BE_BWD_DATA, &p, err, sizeof err));
            be_buf *bx = up(x, CNT, dt), *bdy = up(dy, CNT, dt), *by = dev(NULL, CNT * 4),
                   *bdx = dev(NULL, CNT * 4);
            OK(be->act_fwd(ctx, p, bx, by, err, sizeof err));
            OK(be->act_bwd(ctx, p, by, bdy, bdx, err, sizeof err));
            float *gy = down(by, CNT, dt), *gdx = down(bdx, CNT, dt);
            double *y = malloc(CNT * 8), *dx = malloc(CNT * 8);
            for (size_t i = 0; i < CNT; i++) {
                /* the backward pass reads the stored (rounded) y, as the op's contract says */
                double v = x[i], yy = alg == 0 ? (v > 0 ? v : 0.1 * v) : alg == 1 ? 1 / (1 + exp(-v)) : tanh(v);
                double ys = gy[i];
                y[i] = yy;
                dx[i] = alg == 0 ? (ys > 0 ? dy[i] : 0.1 * dy[i]) : alg == 1 ? dy[i] * ys * (1 - ys)
                                                                            : dy[i] * (1 - ys * ys);
            }
            static const char *const nm[] = { "relu", "sigmoid", "tanh" };
            char what[32];
            snprintf(what, sizeof what, "%s y", nm[alg]);
            compare(what, &TOL[t], false, gy, y, CNT, 8, 1.0);     /* expf, tanhf: a few ulps */
            snprintf(what, sizeof what, "%s dx", nm[alg]);
            compare(what, &TOL[t], false, gdx, dx, CNT, 8, 1.0);
            be->buf_free(ctx, bx), be->buf_free(ctx, bdy), be->buf_free(ctx, by), be->buf_free(ctx, bdx);
            be->plan_free(ctx, p);
            free(gy), free(gdx), free(y), free(dx);
        }
        /* add and concat */
        be_plan *p = NULL;
        be_add_desc ad = { .n = N, .k = 2, .size = (size_t)C * HW, .c = C, .dtype = dt };
        OK(be->add_plan(ctx, &ad, &p, err, sizeof err));
        be_buf *bx = up(x, CNT, dt), *bx2 = up(x2, CNT, dt), *by = dev(NULL, 2 * CNT * 4),
               *bdx = dev(NULL, CNT * 4);
        const be_buf *xs[2] = { bx, bx2 };
        OK(be->add_fwd(ctx, p, xs, by, err, sizeof err));
        float *gy = down(by, CNT, dt);
        double *ref = malloc(2 * CNT * 8);
        for (size_t i = 0; i < CNT; i++)
            ref[i] = (double)x[i] + x2[i];
        compare("add", &TOL[t], false, gy, ref, CNT, 1, 1.0);
        be->plan_free(ctx, p);
        free(gy);
        be_concat_desc cd = { .n = N, .k = 2, .h = H, .w = WD, .c = { C, C }, .dtype = dt };
        OK(be->concat_plan(ctx, &cd, &p, err, sizeof err));
        OK(be->concat_fwd(ctx, p, xs, by, err, sizeof err));
        OK(be->concat_bwd(ctx, p, by, 1, bdx, 0.0f, err, sizeof err));
        gy = down(by, 2 * CNT, dt);
        for (int n = 0; n < N; n++)
            for (size_t j = 0; j < (size_t)C * HW; j++) {
                ref[(size_t)n * 2 * C * HW + j] = x[(size_t)n * C * HW + j];
                ref[(size_t)n * 2 * C * HW + C * HW + j] = x2[(size_t)n * C * HW + j];
            }
        compare("concat y", &TOL[t], false, gy, ref, 2 * CNT, 0, 1.0);
        float *gdx = down(bdx, CNT, dt);
        double *r2 = malloc(CNT * 8);
        for (size_t i = 0; i < CNT; i++)
            r2[i] = x2[i];
        compare("concat dx", &TOL[t], false, gdx, r2, CNT, 0, 1.0);
        be->plan_free(ctx, p);
        be->buf_free(ctx, bx), be->buf_free(ctx, bx2), be->buf_free(ctx, by), be->buf_free(ctx, bdx);
        free(gy), free(gdx), free(ref), free(r2);
    }
    free(x), free(x2), free(dy);
}

static void test_bn(rng *r)
{
    float *x = vals(r, CNT), *dy = vals(r, CNT), *g = vals(r, C), *b = vals(r, C);
    double *y = malloc(CNT * 8), *dx = malloc(CNT * 8), mean[C], var[C], dg[C], dbeta[C];
    const double eps = 1e-5, m = (double)N * HW;
    for (int c = 0; c < C; c++) {
        double s = 0, q = 0, sdy = 0, sdyx = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++)
                s += x[((size_t)n * C + c) * HW + i];
        mean[c] = s / m;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                double d = x[((size_t)n * C + c) * HW + i] - mean[c];
                q += d * d;
            }
        var[c] = q / m;
        double inv = 1 / sqrt(var[c] + eps);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t k = ((size_t)n * C + c) * HW + i;
                double xh = (x[k] - mean[c]) * inv;
                y[k] = g[c] * xh + b[c];
                sdy += dy[k];
                sdyx += dy[k] * xh;
            }
        dg[c] = sdyx;
        dbeta[c] = sdy;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t k = ((size_t)n * C + c) * HW + i;
                double xh = (x[k] - mean[c]) * inv;
                dx[k] = g[c] * inv * (dy[k] - sdy / m - xh * sdyx / m);
            }
    }
    for (size_t t = 0; t < sizeof TOL / sizeof TOL[0]; t++) {
        be_dtype dt = TOL[t].dt;
        be_bn_desc d = { .n = N, .c = C, .h = H, .w = WD, .eps = 1e-5f, .dtype = dt };
        be_plan *p = NULL;
        OK(be->bn_plan(ctx, &d, BE_FWD | BE_BWD_DATA | BE_BWD_WEIGHTS, &p, err, sizeof err));
        be_buf *bx = up(x, CNT, dt), *bdy = up(dy, CNT, dt), *bg = up(g, C, BE_F32),
               *bb = up(b, C, BE_F32), *bm = dev(NULL, C * 4), *bv = dev(NULL, C * 4),
               *by = dev(NULL, CNT * 4), *bdx = dev(NULL, CNT * 4), *bdg = dev(NULL, C * 4),
               *bdb = dev(NULL, C * 4);
        OK(be->bn_fwd(ctx, p, true, bx, bg, bb, bm, bv, by, err, sizeof err));
        OK(be->bn_bwd(ctx, p, bx, bdy, bg, bb, bm, bv, bdx, bdg, bdb, err, sizeof err));
        float *gy = down(by, CNT, dt), *gdx = down(bdx, CNT, dt), *gm = down(bm, C, BE_F32),
              *gv = down(bv, C, BE_F32), *gdg = down(bdg, C, BE_F32), *gdb = down(bdb, C, BE_F32);
        compare("bn y", &TOL[t], false, gy, y, CNT, 4 * m, 8.0);
        compare("bn dx", &TOL[t], false, gdx, dx, CNT, 4 * m, 32.0);
        compare("bn mean", &TOL[t], true, gm, mean, C, m, 1.0);
        compare("bn var", &TOL[t], true, gv, var, C, 4 * m, 1.0);
        compare("bn dscale", &TOL[t], true, gdg, dg, C, 4 * m, 4.0);
        compare("bn dshift", &TOL[t], true, gdb, dbeta, C, m, 1.0);
        be_buf *all[] = { bx, bdy, bg, bb, bm, bv, by, bdx, bdg, bdb };
        for (int i = 0; i < 10; i++)
            be->buf_free(ctx, all[i]);
        be->plan_free(ctx, p);
        free(gy), free(gdx), free(gm), free(gv), free(gdg), free(gdb);
    }
    free(x), free(dy), free(g), free(b), free(y), free(dx);
}

int main(void)
{
    gpu_start();
    rng r;
    rng_seed(&r, 7);
    test_conv(&r);
    test_dense(&r);
    test_pool(&r);
    test_act_add_concat(&r);
    test_bn(&r);
    return gpu_finish();
}
