/* Optimizers (engine/optim.h, formulas in engine/elementwise.h): SGD with
 * momentum and Nesterov, Adam, AdamW, weight decay with and without biases,
 * global-norm clipping and LARC, each checked over several steps against a
 * reference written from PyTorch's documented update rules and computed in
 * double; the state (velocity, moments, step count) is checked too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/settings_util.h"
#include "engine/backend.h"
#include "engine/elementwise.h"
#include "engine/net.h"
#include "engine/optim.h"
#include "engine/rng.h"

/* A dense layer (3 classes from 6 inputs, with bias) on batches of 4. */
#define IN 6
#define OUT 3
#define BATCH 4
#define STEPS 4

static const char *DENSE =
    "{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"fc\", "
    "\"units\": \"classes\"}]}";

/* The reference's state: weights W (OUT x IN) then bias (OUT), as two tensors. */
typedef struct ref {
    double w[2][OUT * IN], s1[2][OUT * IN], s2[2][OUT * IN];
    size_t count[2];
    bool decay[2];
    int t;
} ref;

static void download(net *n, int which, float *out)
{
    char err[256];
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    net_param p[2];
    assert_int_equal(net_param_tensors(n, p, 2), 2);
    assert_int_equal(be->buf_download(ctx, p[which].value, 0, out, p[which].count * sizeof(float),
                                      err, sizeof err), 0);
}

/* dL/dW, dL/db of the mean softmax cross-entropy, in double. */
static void ref_grads(const ref *r, const float *x, const int32_t *y, double g[2][OUT * IN])
{
    memset(g, 0, 2 * sizeof g[0]);
    for (int i = 0; i < BATCH; i++) {
        double z[OUT], m = -INFINITY, s = 0;
        for (int o = 0; o < OUT; o++) {
            z[o] = r->w[1][o];
            for (int k = 0; k < IN; k++)
                z[o] += r->w[0][o * IN + k] * x[i * IN + k];
            m = fmax(m, z[o]);
        }
        for (int o = 0; o < OUT; o++)
            s += exp(z[o] - m);
        for (int o = 0; o < OUT; o++) {
            double dz = (exp(z[o] - m) / s - (o == y[i])) / BATCH;
            g[1][o] += dz;
            for (int k = 0; k < IN; k++)
                g[0][o * IN + k] += dz * x[i * IN + k];
        }
    }
}

static double norm2(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return s;
}

/* One step of the solver in double, following torch.optim.SGD / Adam / AdamW,
 * torch.nn.utils.clip_grad_norm_ and apex's LARC. */
static void ref_step(ref *r, const net_solver *s, double lr, double g[2][OUT * IN])
{
    double total = norm2(g[0], r->count[0]) + norm2(g[1], r->count[1]);
    double c = s->clip_norm > 0 && sqrt(total) > s->clip_norm ? s->clip_norm / (sqrt(total) + 1e-6)
                                                             : 1.0;
    bool adam = s->type != SOLVER_SGD, adamw = s->type == SOLVER_ADAMW;
    r->t++;
    for (int p = 0; p < 2; p++) {
        double wd = r->decay[p] || s->decay_bias ? s->weight_decay : 0;
        double *w = r->w[p], *gp = g[p];
        double gsc = c;
        if (s->larc != LARC_NONE) {
            double wn = sqrt(norm2(w, r->count[p])), gn = sqrt(norm2(gp, r->count[p])) * c;
            double f = 1;
            if (wn > 0 && gn > 0) {
                double trust = s->larc_eta * wn / (gn + wd * wn + 1e-8);
                f = s->larc == LARC_CLIP ? fmin(trust / lr, 1.0) : trust;
            }
            gsc *= f;
            wd *= f;
        }
        for (size_t i = 0; i < r->count[p]; i++) {
            if (!adam) {
                double d = gsc * gp[i] + wd * w[i];
                r->s1[p][i] = s->momentum * r->s1[p][i] + d;
                w[i] -= lr * (s->nesterov ? d + s->momentum * r->s1[p][i] : r->s1[p][i]);
                continue;
            }
            if (adamw)
                w[i] *= 1 - lr * wd;
            double gg = gsc * gp[i] + (adamw ? 0 : wd * w[i]);
            r->s1[p][i] = s->beta1 * r->s1[p][i] + (1 - s->beta1) * gg;
            r->s2[p][i] = s->beta2 * r->s2[p][i] + (1 - s->beta2) * gg * gg;
            double mhat = r->s1[p][i] / (1 - pow(s->beta1, r->t));
            double vhat = r->s2[p][i] / (1 - pow(s->beta2, r->t));
            w[i] -= lr * mhat / (sqrt(vhat) + s->eps);
        }
    }
}

static void expect_close(const char *what, int step, const float *got, const double *want,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double tol = 2e-5 + 2e-5 * fabs(want[i]);
        if (!(fabs(got[i] - want[i]) <= tol)) {
            print_error("%s, step %d, [%zu]: %.9g, reference %.9g\n", what, step, i,
                        (double)got[i], want[i]);
            fail();
        }
    }
}

/* Trains STEPS steps with solver s (learning rates varying per step) and
 * compares weights and optimizer state with the reference after each. */
static void check_solver(const char *what, net_solver s, bool big_grads)
{
    char err[512] = "";
    cJSON *spec = cJSON_Parse(DENSE);
    net *n = net_create(spec, (net_shape){ 1, 2, 3 }, OUT, BATCH, NULL, &s, 7, err, sizeof err);
    cJSON_Delete(spec);
    if (!n)
        print_error("%s: %s\n", what, err);
    assert_non_null(n);
    net_solver resolved;
    assert_int_equal(optim_check(&s, &resolved, err, sizeof err), 0);

    ref r;
    memset(&r, 0, sizeof r);
    r.count[0] = OUT * IN;
    r.count[1] = OUT;
    r.decay[0] = true;
    float f[OUT * IN];
    /* a non-zero bias, so that decay on it shows */
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    net_param p[2];
    net_param_tensors(n, p, 2);
    float b0[OUT] = { 0.3f, -0.2f, 0.1f };
    assert_int_equal(be->buf_upload(ctx, p[1].value, 0, b0, sizeof b0, err, sizeof err), 0);
    for (int k = 0; k < 2; k++) {
        download(n, k, f);
        for (size_t i = 0; i < r.count[k]; i++)
            r.w[k][i] = f[i];
    }

    rng g;
    rng_seed(&g, 11);
    optim *o = net_optim(n);
    for (int step = 1; step <= STEPS; step++) {
        float x[BATCH * IN];
        int32_t y[BATCH];
        for (int i = 0; i < BATCH * IN; i++)
            x[i] = (float)(rng_normal(&g) * (big_grads ? 20.0 : 1.0));
        for (int i = 0; i < BATCH; i++)
            y[i] = (int32_t)(rng_next(&g) % OUT);
        float lr = 0.1f / (float)step;
        double gr[2][OUT * IN];
        ref_grads(&r, x, y, gr);
        ref_step(&r, &resolved, lr, gr);
        net_stats st;
        assert_int_equal(net_train_step(n, x, y, BATCH, lr, &st, err, sizeof err), 0);
        for (int k = 0; k < 2; k++) {
            download(n, k, f);
            expect_close(what, step, f, r.w[k], r.count[k]);
        }
        /* the state, slot by slot */
        optim_state os[4];
        size_t ns = optim_state_tensors(o, os, 4);
        assert_int_equal(ns, s.type != SOLVER_SGD ? 4 : 2);
        for (size_t k = 0; k < ns; k++) {
            int pi = (int)(ns == 4 ? k / 2 : k);
            bool second = ns == 4 && k % 2 == 1;
            assert_string_equal(os[k].param, pi == 0 ? "fc.weight" : "fc.bias");
            assert_int_equal(os[k].count, r.count[pi]);
            assert_int_equal(be->buf_download(ctx, os[k].buf, 0, f, os[k].count * sizeof(float),
                                              err, sizeof err), 0);
            double want[OUT * IN];
            for (size_t i = 0; i < r.count[pi]; i++)
                want[i] = second ? r.s2[pi][i] : r.s1[pi][i];
            expect_close(second ? "second moment" : "first state", step, f, want, r.count[pi]);
        }
        assert_int_equal(optim_steps(o), step);
    }
    net_free(n);
}

static void test_sgd_momentum(void **state)
{
    check_solver("sgd momentum", (net_solver){ .type = SOLVER_SGD, .momentum = 0.9f }, false);
}

static void test_sgd_nesterov_decay(void **state)
{
    check_solver("sgd nesterov + decay",
                 (net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .nesterov = true,
                               .weight_decay = 0.05f }, false);
    check_solver("sgd decay on biases",
                 (net_solver){ .type = SOLVER_SGD, .momentum = 0.5f, .weight_decay = 0.05f,
                               .decay_bias = true }, false);
}

static void test_adam(void **state)
{
    check_solver("adam", (net_solver){ .type = SOLVER_ADAM }, false);
    check_solver("adam l2", (net_solver){ .type = SOLVER_ADAM, .beta1 = 0.8f, .beta2 = 0.99f,
                                          .eps = 1e-6f, .weight_decay = 0.1f }, false);
}

static void test_adamw(void **state)
{
    check_solver("adamw", (net_solver){ .type = SOLVER_ADAMW, .weight_decay = 0.1f }, false);
    check_solver("adamw bias", (net_solver){ .type = SOLVER_ADAMW, .weight_decay = 0.1f,
                                             .decay_bias = true }, false);
}

static void test_clip_norm(void **state)
{
    /* large inputs: the global norm is far above 0.5, so every step clips */
    check_solver("sgd clip", (net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .clip_norm = 0.5f },
                 true);
    check_solver("adam clip", (net_solver){ .type = SOLVER_ADAM, .clip_norm = 0.5f }, true);
}

static void test_larc(void **state)
{
    check_solver("larc clip", (net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .weight_decay = 0.01f,
                                            .larc = LARC_CLIP, .larc_eta = 0.002f }, false);
    check_solver("larc scale", (net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .larc = LARC_SCALE,
                                             .larc_eta = 0.02f, .clip_norm = 1.0f }, true);
}

/* LARC's factor on hand-worked numbers. */
static void test_larc_factor(void **state)
{
    /* trust = 0.002 * 3 / (0.5 + 0.1 * 3 + 1e-8) = 0.0075 */
    assert_true(fabs(ew_larc_factor(3, 0.5, 0.1, 0.1, 0.002, 0) - 0.0075) < 1e-9);
    assert_true(fabs(ew_larc_factor(3, 0.5, 0.1, 0.1, 0.002, 1) - 0.075) < 1e-9);
    assert_true(ew_larc_factor(3, 0.5, 0.001, 0.1, 0.002, 1) == 1.0);   /* clipped at 1 */
    assert_true(ew_larc_factor(0, 0.5, 0.1, 0, 0.002, 0) == 1.0);
    assert_true(ew_larc_factor(3, 0, 0.1, 0, 0.002, 1) == 1.0);
}

/* The general SGD formula with no scaling is the plain one, bit for bit (the
 * default path's numerics did not change). */
static void test_sgd_forms_agree(void **state)
{
    rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 10000; i++) {
        float w = (float)rng_normal(&r), v = (float)rng_normal(&r), g = (float)rng_normal(&r);
        float w2 = w, v2 = v;
        ew_sgd_momentum(&w, &v, g, 0.01f, 0.9f, 5e-4f);
        ew_sgd(&w2, &v2, g, 1.0f, 0.01f, 0.9f, 5e-4f, 0);
        assert_memory_equal(&w, &w2, sizeof w);
        assert_memory_equal(&v, &v2, sizeof v);
    }
}

static void test_check(void **state)
{
    char err[256];
    net_solver out;
    struct {
        net_solver s;
        const char *msg;
    } bad[] = {
        /* a type or policy no name gives (the parsers refuse the names, below) */
        { { .type = SOLVER_COUNT }, "solver type 3 is unknown (use sgd, adam or adamw)" },
        { { .type = SOLVER_SGD, .nesterov = true }, "solver nesterov needs a momentum above 0" },
        { { .type = SOLVER_ADAM, .momentum = 0.9f },
          "solver adam takes beta1 and beta2, not momentum or nesterov" },
        { { .type = SOLVER_ADAM, .beta1 = 1.0f, .beta2 = 0.9f, .eps = 1e-8f },
          "solver beta1 and beta2 must be in [0, 1)" },
        { { .type = SOLVER_ADAMW, .beta1 = 0.9f, .beta2 = 0.9f }, "solver eps must be a finite number > 0" },
        { { .type = SOLVER_SGD, .clip_norm = -1 }, "solver clip_norm must be a finite number >= 0 (0: off)" },
        { { .type = SOLVER_SGD, .larc = LARC_COUNT }, "solver larc policy 3 is unknown (use clip or scale)" },
        { { .type = SOLVER_ADAM, .larc = LARC_CLIP }, "solver larc works with type sgd only" },
        { { .type = SOLVER_SGD, .larc = LARC_CLIP, .larc_eta = -1 }, "solver larc eta must be a finite number > 0" },
        { { .type = SOLVER_SGD, .lr = NAN }, "solver lr must be a finite number >= 0" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(optim_check(&bad[i].s, &out, err, sizeof err), -1);
        assert_string_equal(err, bad[i].msg);
    }
    /* Names are read once, at the border (engine/settings.h): unknown ones are
     * refused there and leave the value untouched. */
    solver_type t = SOLVER_ADAM;
    larc_policy l = LARC_SCALE;
    assert_int_equal(solver_type_parse("rmsprop", &t), -1);
    assert_int_equal(t, SOLVER_ADAM);
    assert_int_equal(larc_policy_parse("max", &l), -1);
    assert_int_equal(l, LARC_SCALE);
    assert_int_equal(optim_check(&(net_solver){ .type = SOLVER_ADAMW }, &out, err, sizeof err), 0);
    assert_true(out.beta1 == 0.9f && out.beta2 == 0.999f && out.eps == 1e-8f);
    assert_int_equal(optim_check(&(net_solver){ .type = SOLVER_SGD, .larc = LARC_SCALE }, &out, err,
                                 sizeof err), 0);
    assert_true(out.larc_eta == 0.001f);
}

/* An optimizer needs a backend and a parameter list, not a net: one
 * parameter made here on the CPU backend, updated by plain SGD with momentum
 * (the backend's sgd_update, ew_sgd_momentum element by element) and
 * compared bit for bit with that formula on the host; Adam keeps its second
 * moment beside the caller's momentum buffer. */
static void test_optim_without_net(void **state)
{
    (void)state;
    enum { N = 5 };
    char err[256] = "";
    const backend *be = &cpu_backend;
    be_ctx *ctx = NULL;
    assert_int_equal(be->ctx_create(0, &ctx, err, sizeof err), 0);
    float w[N] = { 0.5f, -1.0f, 2.0f, 0.0f, 3.0f }, g[N] = { 0.1f, 0.2f, -0.3f, 1.0f, -2.0f };
    float v[N] = { 0 }, got[N];
    be_buf *bw = be->buf_alloc(ctx, sizeof w, err, sizeof err);
    be_buf *bg = be->buf_alloc(ctx, sizeof g, err, sizeof err);
    be_buf *bv = be->buf_alloc(ctx, sizeof v, err, sizeof err);     /* zeroed */
    assert_true(bw && bg && bv);
    assert_int_equal(be->buf_upload(ctx, bw, 0, w, sizeof w, err, sizeof err), 0);
    assert_int_equal(be->buf_upload(ctx, bg, 0, g, sizeof g, err, sizeof err), 0);
    const net_param p = { .name = "w", .ndim = 1, .shape = { N }, .count = N, .decay = true,
                          .value = bw, .grad = bg, .momentum = bv };
    net_solver sv = { .type = SOLVER_SGD, .momentum = 0.9f, .weight_decay = 0.01f };
    optim *o = optim_create(be, ctx, &p, 1, &sv, err, sizeof err);
    assert_non_null(o);
    for (int step = 0; step < 3; step++) {
        assert_int_equal(optim_step(o, 0.1f, NULL, err, sizeof err), 0);
        for (int i = 0; i < N; i++)
            ew_sgd_momentum(&w[i], &v[i], g[i], 0.1f, 0.9f, 0.01f);
    }
    assert_int_equal(be->buf_download(ctx, bw, 0, got, sizeof got, err, sizeof err), 0);
    assert_memory_equal(got, w, sizeof w);
    assert_int_equal(be->buf_download(ctx, bv, 0, got, sizeof got, err, sizeof err), 0);
    assert_memory_equal(got, v, sizeof v);
    assert_int_equal(optim_steps(o), 3);
    optim_free(o);

    sv = (net_solver){ .type = SOLVER_ADAM };
    net_solver resolved;
    assert_int_equal(optim_check(&sv, &resolved, err, sizeof err), 0);
    assert_non_null(o = optim_create(be, ctx, &p, 1, &resolved, err, sizeof err));
    optim_state st[2];
    assert_int_equal(optim_state_tensors(o, st, 2), 2);
    assert_string_equal(st[0].slot, "exp_avg");
    assert_ptr_equal(st[0].buf, bv);
    assert_string_equal(st[1].slot, "exp_avg_sq");
    assert_true(st[1].buf != NULL && st[1].buf != bv);
    optim_free(o);

    /* a type no name gives is refused here too */
    sv.type = SOLVER_COUNT;
    assert_null(optim_create(be, ctx, &p, 1, &sv, err, sizeof err));
    assert_string_equal(err, "solver type 3 is unknown");
    be->buf_free(ctx, bw);
    be->buf_free(ctx, bg);
    be->buf_free(ctx, bv);
    be->ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov_decay),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_clip_norm),
        cmocka_unit_test(test_larc),
        cmocka_unit_test(test_larc_factor),
        cmocka_unit_test(test_sgd_forms_agree),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_optim_without_net),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
