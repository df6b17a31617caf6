/* Mixed precision on whole nets (engine/net*.c with engine/amp.h): the loss
 * scaler under injected overflow (the step skipped with every weight and
 * optimizer state untouched, the scale halved, growth after the interval,
 * divergence at the floor), determinism, exact resume from checkpoints, and
 * accuracy parity with FP32 on synthetic CIFAR-shaped data. */
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
#include <unistd.h>

#include "tests/settings_util.h"
#include "engine/amp.h"
#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/net.h"
#include "engine/optim.h"
#include "engine/rng.h"

/* ---- a small net on 1x8x8 images of four classes (a bright quadrant) ------ */

#define SYN 64
#define SYN_CLASSES 4

/* (conv16b: 16 -> 16, 3x3, padding 1, kiln's own bfloat16 Winograd under
 * amp-bf16, so determinism and exact resume cover it) */
static const char *SMALL =
    "{\"name\": \"small\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"conv\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"conv2d\", \"name\": \"conv16a\", \"filters\": 16, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"conv2d\", \"name\": \"conv16b\", \"filters\": 16, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static void synth(rng *r, float *x, int32_t *labels, int count)
{
    for (int i = 0; i < count; i++) {
        int c = (int)(rng_next(r) % SYN_CLASSES);
        labels[i] = c;
        for (int h = 0; h < 8; h++)
            for (int w = 0; w < 8; w++) {
                int q = (h >= 4) * 2 + (w >= 4);
                x[(size_t)i * SYN + h * 8 + w] = (float)((q == c ? 1.0 : 0.0) + 0.5 * rng_normal(r));
            }
    }
}

static net *make(const char *spec_txt, net_shape in, int classes, int batch, const char *solver,
                 const char *precision, int loss_scaling, uint64_t seed)
{
    char err[512] = "";
    net_solver sv = { .lr = 0.05f, .momentum = 0.9f, .loss_scaling = loss_scaling };
    sv.type = solver_of(solver);
    sv.precision = prec_of(precision);
    if (strcmp(solver, "sgd") != 0) {
        sv.momentum = 0;
        sv.lr = 0.005f;
    }
    cJSON *spec = cJSON_Parse(spec_txt);
    assert_non_null(spec);
    net *n = net_create(spec, in, classes, batch, NULL, &sv, seed, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        print_error("net_create: %s\n", err);
        fail();
    }
    return n;
}

static net *make_small(const char *solver, const char *precision, int loss_scaling)
{
    return make(SMALL, (net_shape){ 1, 8, 8 }, SYN_CLASSES, 16, solver, precision, loss_scaling, 3);
}

/* Every trained tensor and optimizer state of n, downloaded, in one array
 * (*count floats): what an overflowing step must leave alone. */
static float *state_of(net *n, size_t *count)
{
    char err[256];
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    net_param p[64];
    optim_state o[128];
    size_t np = net_param_tensors(n, p, 64), no = optim_state_tensors(net_optim(n), o, 128);
    assert_true(np <= 64 && no <= 128);
    size_t total = 0;
    for (size_t i = 0; i < np; i++)
        total += p[i].count;
    for (size_t i = 0; i < no; i++)
        total += o[i].count;
    float *all = malloc(total * sizeof *all), *at = all;
    assert_non_null(all);
    for (size_t i = 0; i < np; i++, at += p[i - 1].count)
        assert_int_equal(be->buf_download(ctx, p[i].value, 0, at, p[i].count * sizeof *at, err,
                                          sizeof err), 0);
    for (size_t i = 0; i < no; i++, at += o[i - 1].count)
        assert_int_equal(be->buf_download(ctx, o[i].buf, 0, at, o[i].count * sizeof *at, err,
                                          sizeof err), 0);
    *count = total;
    return all;
}

static int step(net *n, const float *x, const int32_t *y, net_stats *st, char *err, size_t len)
{
    return net_train_step(n, x, y, 16, 0.05f, st, err, len);
}

/* An image of 1e30s overflows FP16 in the first convolution's output: the
 * loss is NaN, every gradient overflows, and the scaler must skip the step. */
static void run_overflow_skips(const char *solver)
{
    char err[512] = "";
    net *n = make_small(solver, "amp-fp16", 0);
    rng r;
    rng_seed(&r, 5);
    float x[16 * SYN], big[16 * SYN];
    int32_t y[16];
    net_stats st;
    net_amp_state a;
    for (int i = 0; i < 16 * SYN; i++)
        big[i] = 1e30f;
    for (int s = 0; s < 3; s++) {                  /* momentum / moments not all zero */
        synth(&r, x, y, 16);
        assert_int_equal(step(n, x, y, &st, err, sizeof err), 0);
        assert_false(st.skipped);
        assert_true(st.loss_scale == 65536.0f);
    }
    net_amp_get(n, &a);
    assert_true(a.dynamic && a.scale == 65536.0 && a.skipped == 0);
    uint64_t t = optim_steps(net_optim(n));
    size_t cnt, cnt2;
    float *before = state_of(n, &cnt);
    assert_int_equal(step(n, big, y, &st, err, sizeof err), 0);
    assert_true(st.skipped);
    float *after = state_of(n, &cnt2);
    assert_int_equal(cnt, cnt2);
    assert_memory_equal(before, after, cnt * sizeof *before);
    assert_int_equal(optim_steps(net_optim(n)), t);        /* Adam's t did not advance */
    net_amp_get(n, &a);
    assert_true(a.scale == 32768.0 && a.skipped == 1 && a.clean == 0);
    /* a normal step applies again, at the halved scale */
    synth(&r, x, y, 16);
    assert_int_equal(step(n, x, y, &st, err, sizeof err), 0);
    assert_false(st.skipped);
    assert_true(st.loss_scale == 32768.0f);
    free(after);
    after = state_of(n, &cnt2);
    assert_true(memcmp(before, after, cnt * sizeof *before) != 0);
    assert_int_equal(optim_steps(net_optim(n)), t + 1);
    free(before);
    free(after);
    net_free(n);
}

static void test_overflow_skips_sgd(void **state)
{
    run_overflow_skips("sgd");
}

static void test_overflow_skips_adam(void **state)
{
    run_overflow_skips("adam");
}

/* Overflow after overflow halves the scale down to the floor, then the run
 * has diverged: 2^16 halves 16 times to 1 (skips), the 17th is fatal. */
static void test_floor_diverges(void **state)
{
    char err[512] = "";
    net *n = make_small("sgd", "amp-fp16", 0);
    float big[16 * SYN];
    int32_t y[16] = { 0 };
    net_stats st;
    for (int i = 0; i < 16 * SYN; i++)
        big[i] = 1e30f;
    for (int s = 0; s < 16; s++) {
        assert_int_equal(step(n, big, y, &st, err, sizeof err), 0);
        assert_true(st.skipped);
    }
    assert_int_equal(step(n, big, y, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "diverged"));
    assert_non_null(strstr(err, "loss scale"));
    net_free(n);
}

/* AMP_GROWTH_INTERVAL clean steps double the scale. */
static void test_growth(void **state)
{
    char err[512] = "";
    net *n = make_small("sgd", "amp-fp16", 0);
    rng r;
    rng_seed(&r, 9);
    float x[16 * SYN];
    int32_t y[16];
    net_stats st;
    net_amp_state a;
    synth(&r, x, y, 16);
    for (int s = 0; s < AMP_GROWTH_INTERVAL - 1; s++)
        assert_int_equal(net_train_step(n, x, y, 16, 0.001f, &st, err, sizeof err), 0);
    net_amp_get(n, &a);
    assert_true(a.scale == 65536.0 && a.clean == AMP_GROWTH_INTERVAL - 1 && a.skipped == 0);
    assert_int_equal(net_train_step(n, x, y, 16, 0.001f, &st, err, sizeof err), 0);
    net_amp_get(n, &a);
    assert_true(a.scale == 131072.0 && a.clean == 0);
    net_free(n);
}

/* bfloat16 has FP32's range: no scaling by default (scale 1), and an
 * overflow is divergence at once, as in FP32; asked for, it scales. */
static void test_bf16_scaling(void **state)
{
    char err[512] = "";
    float big[16 * SYN];
    int32_t y[16] = { 0 };
    net_stats st;
    net_amp_state a;
    for (int i = 0; i < 16 * SYN; i++)
        big[i] = 3e38f;
    net *n = make_small("sgd", "amp-bf16", 0);
    net_amp_get(n, &a);
    assert_true(!a.dynamic && a.scale == 1.0);
    assert_int_equal(step(n, big, y, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "diverged"));
    net_free(n);
    n = make_small("sgd", "amp-bf16", 1);
    net_amp_get(n, &a);
    assert_true(a.dynamic && a.scale == 65536.0);
    assert_int_equal(step(n, big, y, &st, err, sizeof err), 0);
    assert_true(st.skipped);
    net_free(n);
}

/* Same seed, same thread count: the same losses bit for bit, per precision. */
static void test_deterministic(void **state)
{
    const char *const precisions[] = { "amp-bf16", "amp-fp16" };
    for (int p = 0; p < 2; p++) {
        double losses[2][20];
        for (int k = 0; k < 2; k++) {
            char err[512] = "";
            net *n = make_small("sgd", precisions[p], 0);
            rng r;
            rng_seed(&r, 21);
            float x[16 * SYN];
            int32_t y[16];
            for (int s = 0; s < 20; s++) {
                net_stats st;
                synth(&r, x, y, 16);
                assert_int_equal(step(n, x, y, &st, err, sizeof err), 0);
                losses[k][s] = st.loss;
            }
            net_free(n);
        }
        assert_memory_equal(losses[0], losses[1], sizeof losses[0]);
        assert_true(losses[0][19] < losses[0][0]);           /* and it learns */
    }
}

/* Train k steps, checkpoint, train m more; a new net restored from the
 * checkpoint and trained m steps gives the same losses bit for bit, with the
 * scaler's state carried over (an overflow among the first steps makes the
 * saved scale 2^15, not the initial 2^16). */
static void test_resume_exact(void **state)
{
    const char *const precisions[] = { "amp-fp16", "amp-bf16" };
    char path[] = "/tmp/kiln-amp-ckpt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int p = 0; p < 2; p++) {
        char err[512] = "";
        const int k = 6, m = 8;
        float x[(k + m) * 16 * SYN], big[16 * SYN];
        int32_t y[(k + m) * 16];
        double first[m], second[m];
        net_stats st;
        rng r;
        rng_seed(&r, 33);
        synth(&r, x, y, (k + m) * 16);
        bool fp16 = p == 0;
        for (int i = 0; i < 16 * SYN; i++)
            big[i] = fp16 ? 1e30f : 3e38f;      /* past FP16's range; past FP32's in the conv */
        net *a = make_small("adam", precisions[p], fp16 ? 0 : 1);
        for (int s = 0; s < k; s++)
            assert_int_equal(step(a, s == 2 ? big : x + (size_t)s * 16 * SYN, y + s * 16, &st,
                                  err, sizeof err), 0);
        net_amp_state sa;
        net_amp_get(a, &sa);
        assert_true(sa.scale == 32768.0 && sa.skipped == 1);
        ckpt_info info = { .step = k, .epoch = 0, .epoch_step = k, .seed = 3 };
        assert_int_equal(ckpt_save(a, path, &info, err, sizeof err), 0);
        for (int s = 0; s < m; s++) {
            assert_int_equal(step(a, x + (size_t)(k + s) * 16 * SYN, y + (k + s) * 16, &st, err,
                                  sizeof err), 0);
            first[s] = st.loss;
        }
        net *b = make_small("adam", precisions[p], fp16 ? 0 : 1);
        if (ckpt_load(b, path, NULL, err, sizeof err) != 0) {
            print_error("ckpt_load: %s\n", err);
            fail();
        }
        net_amp_state sb;
        net_amp_get(b, &sb);
        assert_true(sb.scale == sa.scale && sb.clean == sa.clean && sb.skipped == sa.skipped);
        for (int s = 0; s < m; s++) {
            assert_int_equal(step(b, x + (size_t)(k + s) * 16 * SYN, y + (k + s) * 16, &st, err,
                                  sizeof err), 0);
            second[s] = st.loss;
        }
        assert_memory_equal(first, second, sizeof first);
        /* an fp32 net refuses the mixed-precision checkpoint, naming both */
        net *c = make_small("adam", "fp32", 0);
        assert_int_equal(ckpt_load(c, path, NULL, err, sizeof err), -1);
        assert_non_null(strstr(err, precisions[p]));
        assert_non_null(strstr(err, "fp32"));
        net_free(a);
        net_free(b);
        net_free(c);
    }
    unlink(path);
}

/* ---- parity on synthetic CIFAR-shaped data -------------------------------- */

#define CIFAR (3 * 32 * 32)
#define AMP_WAVE 1.5            /* the class signal's amplitude against noise of deviation 1 */

/* Ten classes of 3x32x32 images: class c is a plane wave of its own
 * frequency, direction and phase in colour channel c % 3 (AMP_WAVE), with
 * the other channels fainter, under Gaussian noise of deviation 1; one label
 * in ten is then replaced by a random class. A network that has learnt the
 * waves reaches about 0.91-0.93 (the noisy labels it cannot know), one that
 * has not 0.1: the precisions must agree on that plateau, not race to 100%.
 * (With a weaker signal, 1.0, FP32 itself had not reached the plateau in
 * three epochs, and the comparison measured training speed, not precision.) */
static void cifar_synth(rng *r, float *x, int32_t *labels, int count)
{
    const double TWO_PI = 6.283185307179586;
    for (int i = 0; i < count; i++) {
        int c = (int)(rng_next(r) % 10);
        labels[i] = rng_next(r) % 10 == 0 ? (int32_t)(rng_next(r) % 10) : c;
        double fx = 1 + c % 4, fy = 1 + (c * 3) % 5, ph = 0.7 * c;
        for (int ch = 0; ch < 3; ch++)
            for (int h = 0; h < 32; h++)
                for (int w = 0; w < 32; w++) {
                    double wave = sin(TWO_PI * (fx * w + fy * h) / 32.0 + ph);
                    double amp = ch == c % 3 ? AMP_WAVE : AMP_WAVE / 4;
                    x[(size_t)i * CIFAR + (size_t)ch * 1024 + h * 32 + w] =
                        (float)(amp * wave + rng_normal(r));
                }
    }
}

static double cifar_accuracy(const char *precision, const float *tx, const int32_t *ty, int ntrain,
                             const float *vx, const int32_t *vy, int nval, int epochs)
{
    char err[512] = "";
    const char *spec = net_builtin("cifar10-cnn");
    net *n = make(spec, (net_shape){ 3, 32, 32 }, 10, 64, "sgd", precision, 0, 17);
    for (int e = 0; e < epochs; e++)
        for (int s = 0; s + 64 <= ntrain; s += 64) {
            net_stats st;
            if (net_train_step(n, tx + (size_t)s * CIFAR, ty + s, 64, 0.01f, &st, err,
                               sizeof err) != 0) {
                print_error("%s: %s\n", precision, err);
                fail();
            }
        }
    net_stats v;
    assert_int_equal(net_eval(n, vx, vy, nval, &v, err, sizeof err), 0);
    net_free(n);
    return (double)v.correct / nval;
}

static void test_parity_cifar(void **state)
{
    const int ntrain = 1920, nval = 2000, epochs = 3;
    float *tx = malloc((size_t)ntrain * CIFAR * sizeof *tx), *vx = malloc((size_t)nval * CIFAR * sizeof *vx);
    int32_t *ty = malloc(ntrain * sizeof *ty), *vy = malloc(nval * sizeof *vy);
    assert_true(tx && vx && ty && vy);
    rng r;
    rng_seed(&r, 77);
    cifar_synth(&r, tx, ty, ntrain);
    cifar_synth(&r, vx, vy, nval);
    double f32 = cifar_accuracy("fp32", tx, ty, ntrain, vx, vy, nval, epochs);
    double b16 = cifar_accuracy("amp-bf16", tx, ty, ntrain, vx, vy, nval, epochs);
    double f16 = cifar_accuracy("amp-fp16", tx, ty, ntrain, vx, vy, nval, epochs);
    print_message("cifar10-cnn on synthetic data, %d epochs of %d: val accuracy fp32 %.4f, "
                  "amp-bf16 %.4f, amp-fp16 %.4f\n", epochs, ntrain, f32, b16, f16);
    assert_true(f32 > 0.8 && f32 < 0.95);            /* learnt, up to the label noise */
    assert_true(fabs(b16 - f32) <= 0.005 + 1e-9);
    assert_true(fabs(f16 - f32) <= 0.005 + 1e-9);
    free(tx);
    free(vx);
    free(ty);
    free(vy);
}

/* Under amp-bf16 the CPU keeps activations whose channel count the 16-blocks
 * would pad channels-last (BE_NHWC, backend.act_layout): here the 20- and
 * 12-channel ones, through a convolution, batch norm with its ReLU, an add,
 * dropout, max and average pooling; FP32 keeps them blocked. Four training
 * steps against the same net with every activation plain
 * (KILN_CPU_PLAIN_LAYOUTS): other kernels, the same sums in another order,
 * so the bfloat16 activations agree to a rounding, not bit for bit: the
 * losses within 2^-6 of each other, relative (a few bfloat16 units, whose
 * relative size is 2^-8), as are the untrained nets' predicted probabilities
 * (absolute); the weights and momenta differ by under an eighth of how far
 * they moved. */
static const char *CHLAST =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 20, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn\"},"
    " {\"type\": \"relu\", \"name\": \"r1\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 20, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"add\", \"name\": \"res\", \"inputs\": [\"c2\", \"r1\"]},"
    " {\"type\": \"relu\", \"name\": \"r2\"},"
    " {\"type\": \"maxpool\", \"name\": \"mp\", \"kernel\": 2},"
    " {\"type\": \"dropout\", \"name\": \"drop\", \"rate\": 0.25},"
    " {\"type\": \"conv2d\", \"name\": \"c3\", \"filters\": 12, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\", \"name\": \"r3\"},"
    " {\"type\": \"avgpool\", \"name\": \"ap\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static void test_channels_last(void **state)
{
    const net_shape in = { 3, 12, 10 };
    enum { B = 8, SZ = B * 3 * 12 * 10 };
    double loss[2][4];
    float probs[2][B * 4];
    float *w[2], *w0;
    size_t cnt[2], cnt0;
    net *f = make(CHLAST, in, 4, B, "sgd", "fp32", 0, 61);
    assert_int_equal(net_channels_last(f), 0);
    net_free(f);
    f = make(CHLAST, in, 4, B, "sgd", "amp-bf16", 0, 61);
    w0 = state_of(f, &cnt0);                  /* the weights both runs start from */
    net_free(f);
    for (int run = 0; run < 2; run++) {
        char err[512] = "";
        if (run)
            assert_int_equal(setenv("KILN_CPU_PLAIN_LAYOUTS", "1", 1), 0);
        net *n = make(CHLAST, in, 4, B, "sgd", "amp-bf16", 0, 61);
        unsetenv("KILN_CPU_PLAIN_LAYOUTS");
        /* c1, bn, r1 (with bn), c2, res, r2 (with res), mp, drop, c3, r3 */
        assert_int_equal(net_channels_last(n), run ? 0 : 10);
        rng r;
        rng_seed(&r, 62);
        float x[SZ];
        int32_t y[B];
        for (int i = 0; i < SZ; i++)
            x[i] = (float)rng_range(&r, -1, 1);
        assert_int_equal(net_predict(n, x, B, probs[run], err, sizeof err), 0);
        for (int s = 0; s < 4; s++) {
            net_stats st;
            for (int i = 0; i < SZ; i++)
                x[i] = (float)rng_range(&r, -1, 1);
            for (int i = 0; i < B; i++)
                y[i] = (int32_t)(rng_next(&r) % 4);
            assert_int_equal(net_train_step(n, x, y, B, 0.05f, &st, err, sizeof err), 0);
            assert_false(st.skipped);
            loss[run][s] = st.loss;
        }
        w[run] = state_of(n, &cnt[run]);
        net_free(n);
    }
    for (int i = 0; i < B * 4; i++)         /* the inference plans (batch norm folded) */
        assert_true(fabs((double)probs[0][i] - probs[1][i]) <= 0x1p-6);
    for (int s = 0; s < 4; s++) {
        print_message("step %d: loss %.9g channels-last, %.9g plain\n", s, loss[0][s], loss[1][s]);
        assert_true(isfinite(loss[0][s]));
        assert_true(fabs(loss[0][s] - loss[1][s]) <= 0x1p-6 * fabs(loss[1][s]));
    }
    assert_int_equal(cnt[0], cnt[1]);
    assert_int_equal(cnt[0], cnt0);
    double diff = 0, moved = 0;
    for (size_t i = 0; i < cnt[0]; i++) {
        diff = fmax(diff, fabs((double)w[0][i] - w[1][i]));
        moved = fmax(moved, fabs((double)w[1][i] - w0[i]));
    }
    print_message("weights and momenta: moved up to %.3g, the runs differ by up to %.3g\n",
                  moved, diff);
    assert_true(diff <= moved / 8);
    free(w0);
    free(w[0]);
    free(w[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overflow_skips_sgd),
        cmocka_unit_test(test_overflow_skips_adam),
        cmocka_unit_test(test_floor_diverges),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_bf16_scaling),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_resume_exact),
        cmocka_unit_test(test_parity_cifar),
        cmocka_unit_test(test_channels_last),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
