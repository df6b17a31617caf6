/* The CUDA backend's element-wise operations (engine/cuda/ew.cu) against the
 * same functions of engine/elementwise.h run on the host, which is what the
 * CPU backend runs: accumulation, casts (bfloat16, FP16), dropout in plain
 * and blocked layouts, softmax cross-entropy with label smoothing, SGD,
 * Nesterov, Adam and AdamW updates, the loss scaler's unscale-and-check, the
 * gradient check, sums of squares and batch-norm running statistics.
 *
 * Formulas without transcendental functions must agree bit for bit (the
 * kernels are compiled without fused multiply-adds); the loss and the
 * probabilities, which call expf and logf, within a few units in the last
 * place; sums of squares, added in another order, within 1e-12 relative. */
#include "gpu_test.h"

static void test_cast_acc(rng *r)
{
    const size_t n = 300001;
    float *v = randf(r, n, 1000.0);
    v[0] = 70000.0f;                      /* past FP16 */
    v[1] = NAN;
    v[2] = 1e-9f;
    const be_dtype types[] = { BE_BF16, BE_F16, BE_F32 };
    for (int t = 0; t < 3; t++) {
        be_dtype dt = types[t];
        size_t es = be->dtype_bytes(dt);
        be_buf *src = dev(v, n * 4), *dst = dev(NULL, n * es), *back = dev(NULL, n * 4);
        OK(be->cast(ctx, src, BE_F32, dst, dt, n, err, sizeof err));
        OK(be->cast(ctx, dst, dt, back, BE_F32, n, err, sizeof err));
        float *got = malloc(n * 4);
        get(back, got, n * 4);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = dt == BE_F32 ? v[i] : dt == BE_BF16 ? ew_bf16_to_f32(ew_f32_to_bf16(v[i]))
                                                              : ew_round_f16(v[i]);
            bad += !same(got[i], want);
        }
        CHECK(bad == 0, "cast f32 -> %d -> f32: %d of %zu differ", (int)dt, bad, n);
        /* acc in the type: d = s + d */
        void *h1 = malloc(n * es), *h2 = malloc(n * es), *out = malloc(n * es);
        float *w = randf(r, n, 1.0);
        to_type(v, h1, n, dt);
        to_type(w, h2, n, dt);
        be_buf *a = dev(h1, n * es), *b = dev(h2, n * es);
        OK(be->acc(ctx, b, a, n, dt, 1.0f, err, sizeof err));
        get(b, out, n * es);
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            float s = from_type(h1, i, dt) + from_type(h2, i, dt), want;
            uint16_t h;
            if (dt == BE_F32)
                want = s;
            else if (dt == BE_BF16)
                h = ew_f32_to_bf16(s), want = ew_bf16_to_f32(h);
            else
                h = ew_f32_to_f16(s), want = ew_f16_to_f32(h);
            bad += !same(from_type(out, i, dt), want);
        }
        CHECK(bad == 0, "acc in type %d: %d of %zu differ", (int)dt, bad, n);
        be->buf_free(ctx, src);
        be->buf_free(ctx, dst);
        be->buf_free(ctx, back);
        be->buf_free(ctx, a);
        be->buf_free(ctx, b);
        free(got);
        free(h1);
        free(h2);
        free(out);
        free(w);
    }
    free(v);
}

static void test_dropout(rng *r)
{
    for (int blocked = 0; blocked < 2; blocked++) {
        const int N = 3, C = 20, HW = 7;
        size_t c16 = blocked ? 32 : C, n = (size_t)N * c16 * HW;
        float *x = randf(r, n, 1.0), *dy = randf(r, n, 1.0);
        be_dropout_desc d = { .count = n, .rate = 0.3f, .layout = blocked ? BE_BLOCKED16 : BE_PLAIN,
                              .c = C, .hw = HW, .dtype = BE_F32 };
        be_buf *bx = dev(x, n * 4), *bm = dev(NULL, n * 4), *by = dev(NULL, n * 4),
               *bdy = dev(dy, n * 4), *bdx = dev(NULL, n * 4);
        OK(be->dropout_fwd(ctx, &d, true, bx, bm, by, 1234, err, sizeof err));
        OK(be->dropout_bwd(ctx, &d, bm, bdy, bdx, 0.0f, err, sizeof err));
        float *m = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4);
        get(bm, m, n * 4);
        get(by, y, n * 4);
        get(bdx, dx, n * 4);
        int bad = 0;
        const float keep = 1.0f / (1.0f - 0.3f);
        for (size_t i = 0; i < n; i++) {
            size_t li = i;
            if (blocked) {
                size_t img = i / (c16 * HW), rr = i % (c16 * HW), cb = rr / (HW * 16);
                size_t r2 = rr % (HW * 16), ch = cb * 16 + r2 % 16;
                li = ch < (size_t)C ? img * C * HW + ch * HW + r2 / 16 : SIZE_MAX;
            }
            float want = li != SIZE_MAX && ew_dropout_keep(1234, li, 0.3f) ? keep : 0.0f;
            bad += !same(m[i], want) || !same(y[i], x[i] * want) || !same(dx[i], dy[i] * want);
        }
        CHECK(bad == 0, "dropout (blocked %d): %d of %zu differ", blocked, bad, n);
        be_buf *all[] = { bx, bm, by, bdy, bdx };
        for (int i = 0; i < 5; i++)
            be->buf_free(ctx, all[i]);
        free(x);
        free(dy);
        free(m);
        free(y);
        free(dx);
    }
}

static void test_xent(rng *r)
{
    const int n = 300, classes = 17;
    size_t nz = (size_t)n * classes;
    float *z = randf(r, nz, 4.0);
    int32_t *lab = malloc(n * sizeof *lab);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)(rng_next(r) % classes);
    be_xent_desc d = { .n = n, .classes = classes };
    be_plan *p = NULL;
    OK(be->xent_plan(ctx, &d, &p, err, sizeof err));
    be_buf *bz = dev(z, nz * 4), *bl = dev(lab, n * 4), *bd = dev(NULL, nz * 4), *bp = dev(NULL, nz * 4);
    double loss = 0;
    int correct = -1;
    OK(be->xent(ctx, p, bz, bl, 0.1f, 0.25f, bd, bp, &loss, &correct, err, sizeof err));
    float *dz = malloc(nz * 4), *pr = malloc(nz * 4), *hdz = malloc(nz * 4), *hp = malloc(nz * 4);
    get(bd, dz, nz * 4);
    get(bp, pr, nz * 4);
    double want = 0, worst = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        int top = 0;
        want += ew_softmax_xent_row(z + (size_t)i * classes, classes, lab[i], 0.1f, 0.25f,
                                    hp + (size_t)i * classes, hdz + (size_t)i * classes, &top);
        hits += top == lab[i];
    }
    for (size_t i = 0; i < nz; i++) {
        worst = fmax(worst, fabs(pr[i] - hp[i]) / (fabs(hp[i]) + 1e-30));
        CHECK(fabs(dz[i] - hdz[i]) <= 1e-6 * 0.25 + 8 * 0x1p-24 * fabs(hdz[i]),
              "xent dz[%zu] %.9g vs host %.9g", i, (double)dz[i], (double)hdz[i]);
    }
    CHECK(worst <= 16 * 0x1p-24 * classes, "xent probabilities differ by %.3g relative", worst);
    CHECK(fabs(loss - want) <= 1e-5 * fabs(want), "xent loss %.9g vs host %.9g", loss, want);
    CHECK(correct == hits, "xent hits %d vs host %d", correct, hits);
    be->plan_free(ctx, p);
    be_buf *all[] = { bz, bl, bd, bp };
    for (int i = 0; i < 4; i++)
        be->buf_free(ctx, all[i]);
    free(z);
    free(lab);
    free(dz);
    free(pr);
    free(hdz);
    free(hp);
}

static void test_optim(rng *r)
{
    const size_t n = 100003;
    for (int kind = 0; kind < 4; kind++) {    /* sgd, sgd nesterov, adam, adamw */
        float *w = randf(r, n, 1.0), *s1 = randf(r, n, 0.1), *s2 = randf(r, n, 0.01),
              *g = randf(r, n, 1.0);
        for (size_t i = 0; i < n; i++)
            s2[i] = fabsf(s2[i]);
        be_optim hp = { .kind = kind < 2 ? BE_OPT_SGD : BE_OPT_ADAM, .lr = 0.01f,
                        .grad_scale = 0.75f, .weight_decay = kind == 3 ? 0.0f : 1e-4f,
                        .momentum = 0.9f, .nesterov = kind == 1, .beta1 = 0.9f, .beta2 = 0.999f,
                        .eps = 1e-8f, .decoupled_wd = kind == 3 ? 0.01f : 0.0f, .bc1 = 0.271f,
                        .sbc2 = 0.0547f };
        be_buf *bw = dev(w, n * 4), *b1 = dev(s1, n * 4), *b2 = dev(s2, n * 4), *bg = dev(g, n * 4);
        OK(be->optim_update(ctx, &hp, bw, b1, kind >= 2 ? b2 : NULL, bg, n, err, sizeof err));
        float *gw = malloc(n * 4), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
        get(bw, gw, n * 4);
        get(b1, g1, n * 4);
        get(b2, g2, n * 4);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            if (kind < 2)
                ew_sgd(&w[i], &s1[i], g[i], hp.grad_scale, hp.lr, hp.momentum, hp.weight_decay,
                       hp.nesterov);
            else
                ew_adam(&w[i], &s1[i], &s2[i], g[i], hp.grad_scale, hp.lr, hp.beta1, hp.beta2,
                        hp.eps, hp.weight_decay, hp.decoupled_wd, hp.bc1, hp.sbc2);
            bad += !same(gw[i], w[i]) || !same(g1[i], s1[i]) || (kind >= 2 && !same(g2[i], s2[i]));
        }
        /* Adam divides by a square root: CUDA's sqrtf and division are IEEE by
         * default (no fast math), so these are exact too. */
        CHECK(bad == 0, "optimizer kind %d: %d of %zu elements differ from the host", kind, bad, n);
        be_buf *all[] = { bw, b1, b2, bg };
        for (int i = 0; i < 4; i++)
            be->buf_free(ctx, all[i]);
        free(w);
        free(s1);
        free(s2);
        free(g);
        free(gw);
        free(g1);
        free(g2);
    }
    /* the plain SGD path (ew_sgd_momentum) */
    float *w = randf(r, n, 1.0), *v = randf(r, n, 0.1), *g = randf(r, n, 1.0);
    be_sgd sp = { .lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f };
    be_buf *bw = dev(w, n * 4), *bv = dev(v, n * 4), *bg = dev(g, n * 4);
    OK(be->sgd_update(ctx, bw, bv, bg, n, &sp, err, sizeof err));
    float *gw = malloc(n * 4);
    get(bw, gw, n * 4);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        ew_sgd_momentum(&w[i], &v[i], g[i], sp.lr, sp.momentum, sp.weight_decay);
        bad += !same(gw[i], w[i]);
    }
    CHECK(bad == 0, "sgd_update: %d differ", bad);
    be->buf_free(ctx, bw);
    be->buf_free(ctx, bv);
    be->buf_free(ctx, bg);
    free(w);
    free(v);
    free(g);
    free(gw);
}

static void test_checks_and_norms(rng *r)
{
    const size_t n = 1000003;
    float *g = randf(r, n, 65536.0);
    be_buf *bg = dev(g, n * 4);
    bool found = false;
    OK(be->unscale(ctx, bg, n, 1.0f / 65536.0f, &found, err, sizeof err));
    CHECK(!found, "unscale found an overflow in finite data");
    float *got = malloc(n * 4);
    get(bg, got, n * 4);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = g[i];
        ew_unscale(&want, 1.0f / 65536.0f);
        bad += !same(got[i], want);
    }
    CHECK(bad == 0, "unscale: %d of %zu differ", bad, n);
    double ss = 0, want = 0;
    OK(be->sumsq(ctx, bg, n, &ss, err, sizeof err));
    for (size_t i = 0; i < n; i++)
        want += (double)got[i] * got[i];
    CHECK(fabs(ss - want) <= 1e-12 * want, "sumsq %.17g vs host %.17g", ss, want);
    double ss2 = 0;
    OK(be->sumsq(ctx, bg, n, &ss2, err, sizeof err));
    CHECK(ss2 == ss, "sumsq repeats exactly");
    found = false;
    OK(be->nonfinite(ctx, bg, n, &found, err, sizeof err));
    CHECK(!found, "nonfinite on finite data");
    float inf = INFINITY;
    OK(be->buf_upload(ctx, bg, (n - 1) * 4, &inf, 4, err, sizeof err));
    OK(be->nonfinite(ctx, bg, n, &found, err, sizeof err));
    CHECK(found, "nonfinite misses an infinity in the last element");
    found = false;
    OK(be->unscale(ctx, bg, n, 0.5f, &found, err, sizeof err));
    CHECK(found, "unscale misses an infinity");
    be->buf_free(ctx, bg);
    free(g);
    free(got);

    /* batch-norm running statistics */
    const int c = 37;
    float *rm = randf(r, c, 1.0), *rv = randf(r, c, 1.0), *m = randf(r, c, 1.0), *v = randf(r, c, 1.0);
    for (int i = 0; i < c; i++)
        rv[i] = fabsf(rv[i]), v[i] = fabsf(v[i]);
    be_buf *brm = dev(rm, c * 4), *brv = dev(rv, c * 4), *bm = dev(m, c * 4), *bv = dev(v, c * 4);
    OK(be->bn_running(ctx, brm, brv, bm, bv, c, 0.9f, 640, err, sizeof err));
    float grm[64], grv[64];
    get(brm, grm, c * 4);
    get(brv, grv, c * 4);
    bad = 0;
    for (int i = 0; i < c; i++) {
        ew_bn_running(&rm[i], &rv[i], m[i], v[i], 0.9f, 640);
        bad += !same(grm[i], rm[i]) || !same(grv[i], rv[i]);
    }
    CHECK(bad == 0, "bn_running: %d differ", bad);
    be_buf *all[] = { brm, brv, bm, bv };
    for (int i = 0; i < 4; i++)
        be->buf_free(ctx, all[i]);
    free(rm);
    free(rv);
    free(m);
    free(v);
}

int main(void)
{
    gpu_start();
    rng r;
    rng_seed(&r, 2026);
    test_cast_acc(&r);
    test_dropout(&r);
    test_xent(&r);
    test_optim(&r);
    test_checks_and_norms(&r);
    return gpu_finish();
}
