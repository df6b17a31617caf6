/* Data parallelism (engine/net.h, net_create with several devices) on the
 * CPU backend's communicator (engine/cpu/comm.c), which keeps NCCL's
 * contract: the same code runs the GPUs' replicas. A batch split over
 * replicas trains as the whole batch on one net does (within the rounding
 * of a different summation order); with batch norm, each replica normalises
 * its own share, so two replicas fed the same images train exactly as one
 * net fed them once, running statistics included. Checkpoints reach every
 * replica, and a skipped (overflowed) step changes nothing, batch norm's
 * running statistics included. */
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
#include "engine/backend.h"
#include "engine/net.h"
#include "engine/rng.h"

#define C 3
#define H 8
#define W 8
#define SIZE (C * H * W)
#define CLASSES 5

static const char *PLAIN =
    "{\"name\": \"plain\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"d1\", \"units\": 16},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static const char *BN =
    "{\"name\": \"bn\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\","
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"global_avgpool\"},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static net *make(const char *spec_txt, const char *be_name, int batch, const net_solver *sv)
{
    char err[512] = "";
    cJSON *spec = cJSON_Parse(spec_txt);
    assert_non_null(spec);
    net_devices d = devices_of(be_name);
    net *n = net_create(spec, (net_shape){ C, H, W }, CLASSES, batch, &d, sv, 7, err,
                        sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        print_error("net_create(%s): %s\n", be_name, err);
        fail();
    }
    return n;
}

static void data(uint64_t seed, float *x, int32_t *y, int count)
{
    rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < count; i++) {
        y[i] = (int32_t)(rng_next(&r) % CLASSES);
        for (int k = 0; k < SIZE; k++)
            x[(size_t)i * SIZE + k] = (float)(rng_normal(&r) + (k % CLASSES == y[i]));
    }
}

static void step(net *n, const float *x, const int32_t *y, int count, net_stats *st)
{
    char err[512] = "";
    if (net_train_step(n, x, y, count, 0.05f, st, err, sizeof err) != 0) {
        print_error("step: %s\n", err);
        fail();
    }
}

/* Every parameter and statistic of a net (the primary's), in one array. */
static float *values(net *n, size_t *total)
{
    char err[512] = "";
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    net_param ps[64];
    size_t np = net_param_tensors(n, ps, 32);
    np += net_state_tensors(n, ps + np, 32);
    *total = 0;
    for (size_t i = 0; i < np; i++)
        *total += ps[i].count;
    float *v = malloc(*total * sizeof *v), *at = v;
    for (size_t i = 0; i < np; i++) {
        assert_int_equal(be->buf_download(ctx, ps[i].value, 0, at, ps[i].count * sizeof *at,
                                          err, sizeof err), 0);
        at += ps[i].count;
    }
    return v;
}

/* The largest difference between two nets' values, relative to max(1, |a|). */
static double values_diff(net *a, net *b)
{
    size_t na, nb;
    float *va = values(a, &na), *vb = values(b, &nb);
    assert_int_equal(na, nb);
    double worst = 0;
    for (size_t i = 0; i < na; i++) {
        double d = fabs((double)va[i] - vb[i]) / fmax(1.0, fabs((double)va[i]));
        worst = d > worst ? d : worst;
    }
    free(va);
    free(vb);
    return worst;
}

static const net_solver MOMENTUM = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };

/* The batch split over 2 and 3 replicas (16 = 8 + 8 = 6 + 5 + 5), one
 * bucket per layer or all in one, trains as the whole batch does. */
static void split_matches(const char *be_name, const char *bucket)
{
    enum { B = 16, STEPS = 8 };
    static float x[B * SIZE];
    int32_t y[B];
    setenv("KILN_BUCKET_BYTES", bucket, 1);
    net *one = make(PLAIN, "cpu", B, &MOMENTUM), *dp = make(PLAIN, be_name, B, &MOMENTUM);
    unsetenv("KILN_BUCKET_BYTES");
    assert_float_equal(values_diff(one, dp), 0.0, 0.0);     /* the same initial weights */
    for (int s = 0; s < STEPS; s++) {
        net_stats a, b;
        data(100 + (uint64_t)s, x, y, B);
        step(one, x, y, B, &a);
        step(dp, x, y, B, &b);
        assert_int_equal(b.count, B);
        assert_int_equal(a.correct, b.correct);
        if (fabs(a.loss - b.loss) > 1e-5 * fabs(a.loss)) {
            print_error("%s step %d: loss %.9g whole, %.9g split\n", be_name, s, a.loss, b.loss);
            fail();
        }
    }
    double d = values_diff(one, dp);
    if (d > 2e-5) {
        print_error("%s: the weights differ by %g after %d steps\n", be_name, d, STEPS);
        fail();
    }
    /* and it learned something: not a net that stands still */
    net *fresh = make(PLAIN, "cpu", B, &MOMENTUM);
    assert_true(values_diff(fresh, dp) > 1e-3);
    net_free(fresh);
    net_free(one);
    net_free(dp);
}

static void test_two_replicas_match_whole_batch(void **state)
{
    (void)state;
    split_matches("cpu:0,1", "1");
    split_matches("cpu:0,1", "100000000");
}

static void test_three_replicas_match_whole_batch(void **state)
{
    (void)state;
    split_matches("cpu:0,1,2", "1");
}

/* Evaluation splits the images over the replicas too: the same loss and
 * hits as the whole net's, for fewer images than replicas, a batch, and more
 * than a batch (each replica then works through its share in chunks). */
static void test_eval_split(void **state)
{
    (void)state;
    enum { B = 16 };
    static float x[40 * SIZE];
    int32_t y[40];
    char err[512] = "", path[] = "/tmp/kiln-test-dp-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    net *one = make(BN, "cpu", B, &MOMENTUM), *dp = make(BN, "cpu:0,1,2", B, &MOMENTUM);
    for (int s = 0; s < 4; s++) {                  /* trained a little: running statistics */
        data(300 + (uint64_t)s, x, y, B);
        step(dp, x, y, B, NULL);
    }
    /* the same weights and statistics in the whole net (batch norm trains
     * per replica, so training the two would not give them) */
    assert_int_equal(net_save(dp, path, err, sizeof err), 0);
    assert_int_equal(net_load(one, path, err, sizeof err), 0);
    unlink(path);
    assert_float_equal(values_diff(one, dp), 0.0, 0.0);
    const int counts[] = { 1, 2, 7, 16, 40 };
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        net_stats a, b;
        data(400 + i, x, y, counts[i]);
        assert_int_equal(net_eval(one, x, y, counts[i], &a, err, sizeof err), 0);
        assert_int_equal(net_eval(dp, x, y, counts[i], &b, err, sizeof err), 0);
        assert_int_equal(b.count, counts[i]);
        assert_int_equal(a.correct, b.correct);
        if (fabs(a.loss - b.loss) > 1e-5 * fabs(a.loss)) {
            print_error("%d images: loss %.9g whole, %.9g split\n", counts[i], a.loss, b.loss);
            fail();
        }
    }
    net_free(one);
    net_free(dp);
}

/* Batches smaller than the maximum, down to one image (the second replica
 * then has none and contributes zeros), and Adam's state. */
static void test_short_batches(void **state)
{
    (void)state;
    static float x[16 * SIZE];
    int32_t y[16];
    const net_solver adam = { .type = SOLVER_ADAM, .lr = 0.01f };
    net *one = make(PLAIN, "cpu", 16, &adam), *dp = make(PLAIN, "cpu:0,1", 16, &adam);
    const int sizes[] = { 16, 1, 3, 16, 1, 9 };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        net_stats a, b;
        data(200 + s, x, y, sizes[s]);
        step(one, x, y, sizes[s], &a);
        step(dp, x, y, sizes[s], &b);
        assert_int_equal(b.count, sizes[s]);
        assert_true(fabs(a.loss - b.loss) <= 1e-5 * fabs(a.loss));
    }
    assert_true(values_diff(one, dp) < 2e-5);
    net_free(one);
    net_free(dp);
}

/* Batch norm normalises per replica: two replicas given the same 8 images
 * each train as one net given them once (the mean over 16 of the same
 * gradients twice is their mean over 8), the running statistics averaged
 * over the replicas being those of the 8. In FP32 and in bfloat16 AMP. */
static void bn_duplicate(const char *precision)
{
    enum { B = 8, STEPS = 6 };
    static float x[B * SIZE], xx[2 * B * SIZE];
    int32_t y[B], yy[2 * B];
    net_solver sv = MOMENTUM;
    sv.precision = prec_of(precision);
    net *one = make(BN, "cpu", B, &sv), *dp = make(BN, "cpu:0,1", 2 * B, &sv);
    for (int s = 0; s < STEPS; s++) {
        net_stats a, b;
        data(300 + (uint64_t)s, x, y, B);
        memcpy(xx, x, sizeof x);
        memcpy(xx + B * SIZE, x, sizeof x);
        memcpy(yy, y, sizeof y);
        memcpy(yy + B, y, sizeof y);
        step(one, x, y, B, &a);
        step(dp, xx, yy, 2 * B, &b);
        assert_int_equal(b.correct, 2 * a.correct);
        assert_true(fabs(a.loss - b.loss) <= 1e-6 * fabs(a.loss));
    }
    double d = values_diff(one, dp);
    if (d > 1e-6) {
        print_error("%s: weights or running statistics differ by %g\n", precision, d);
        fail();
    }
    /* evaluation reads the running statistics */
    net_stats a, b;
    char err[512] = "";
    data(999, x, y, B);
    assert_int_equal(net_eval(one, x, y, B, &a, err, sizeof err), 0);
    assert_int_equal(net_eval(dp, x, y, B, &b, err, sizeof err), 0);
    assert_true(fabs(a.loss - b.loss) <= 1e-6 * fabs(a.loss));
    net_free(one);
    net_free(dp);
}

static void test_batchnorm_per_replica(void **state)
{
    (void)state;
    bn_duplicate("fp32");
    bn_duplicate("amp-bf16");
}

/* The running statistics each replica keeps are the average of theirs: at
 * learning rate 0 (the weights stay), two replicas given A and B end with
 * the mean of what one net given A and one given B end with. */
static void test_running_statistics_averaged(void **state)
{
    (void)state;
    enum { B = 8 };
    static float x[2 * B * SIZE];
    int32_t y[2 * B];
    char err[512] = "";
    net *a = make(BN, "cpu", B, &MOMENTUM), *b = make(BN, "cpu", B, &MOMENTUM);
    net *dp = make(BN, "cpu:0,1", 2 * B, &MOMENTUM);
    for (int s = 0; s < 3; s++) {
        data(700 + (uint64_t)s, x, y, 2 * B);
        assert_int_equal(net_train_step(a, x, y, B, 0.0f, NULL, err, sizeof err), 0);
        assert_int_equal(net_train_step(b, x + B * SIZE, y + B, B, 0.0f, NULL, err, sizeof err), 0);
        assert_int_equal(net_train_step(dp, x, y, 2 * B, 0.0f, NULL, err, sizeof err), 0);
    }
    size_t na, nb, nd;
    float *va = values(a, &na), *vb = values(b, &nb), *vd = values(dp, &nd);
    assert_int_equal(na, nd);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < na; i++) {
        worst = fmax(worst, fabs(vd[i] - 0.5 * ((double)va[i] + vb[i])));
        moved = fmax(moved, fabs((double)va[i] - vb[i]));
    }
    assert_true(moved > 1e-3);              /* A and B gave different statistics */
    if (worst > 1e-6) {
        print_error("the replicas' statistics are %g from the average\n", worst);
        fail();
    }
    free(va);
    free(vb);
    free(vd);
    net_free(a);
    net_free(b);
    net_free(dp);
}

/* A file saved from a data-parallel net and loaded into another reaches
 * every replica: the two then train alike. */
static void test_load_reaches_every_replica(void **state)
{
    (void)state;
    static float x[16 * SIZE];
    int32_t y[16];
    char err[512] = "", path[] = "/tmp/kiln-test-dp-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    net *a = make(BN, "cpu:0,1", 16, &MOMENTUM);
    for (int s = 0; s < 3; s++) {
        data(400 + (uint64_t)s, x, y, 16);
        step(a, x, y, 16, NULL);
    }
    assert_int_equal(net_save(a, path, err, sizeof err), 0);
    net *b = make(BN, "cpu:0,1", 16, &MOMENTUM);
    assert_int_equal(net_load(b, path, err, sizeof err), 0);
    /* momentum differs (a has some, b none), so compare with lr 0 steps:
     * the loss of each replica's share comes from the loaded weights */
    for (int s = 0; s < 2; s++) {
        net_stats sa, sb;
        data(500 + (uint64_t)s, x, y, 16);
        assert_int_equal(net_train_step(a, x, y, 16, 0.0f, &sa, err, sizeof err), 0);
        assert_int_equal(net_train_step(b, x, y, 16, 0.0f, &sb, err, sizeof err), 0);
        assert_float_equal(sa.loss, sb.loss, 0.0);
        assert_int_equal(sa.correct, sb.correct);
    }
    assert_float_equal(values_diff(a, b), 0.0, 0.0);
    net_free(a);
    net_free(b);
    unlink(path);
}

/* A step the loss scaler skips changes nothing: not the weights, not the
 * running statistics (a NaN there would poison every later evaluation). */
static void test_skipped_step_changes_nothing(void **state)
{
    (void)state;
    static float x[8 * SIZE];
    int32_t y[8];
    char err[512] = "";
    net_solver sv = MOMENTUM;
    sv.precision = PREC_AMP_FP16;
    const char *backends[] = { "cpu", "cpu:0,1" };
    for (int k = 0; k < 2; k++) {
        net *n = make(BN, backends[k], 8, &sv);
        data(600, x, y, 8);
        step(n, x, y, 8, NULL);                 /* running statistics away from 0 and 1 */
        net_amp_state amp;
        net_amp_get(n, &amp);
        amp.scale = 4294967296.0;               /* 2^32: FP16 gradients overflow */
        amp.clean = 0;
        assert_int_equal(net_amp_set(n, &amp, err, sizeof err), 0);
        size_t count;
        float *before = values(n, &count);
        net_stats st;
        data(601, x, y, 8);
        step(n, x, y, 8, &st);
        assert_true(st.skipped);
        float *after = values(n, &count);
        assert_memory_equal(before, after, count * sizeof *before);
        net_amp_get(n, &amp);
        assert_float_equal(amp.scale, 2147483648.0, 0.0);
        assert_int_equal(amp.skipped, 1);
        free(before);
        free(after);
        net_free(n);
    }
}

static void test_refused(void **state)
{
    (void)state;
    char err[512] = "";
    cJSON *spec = cJSON_Parse(PLAIN);
    struct { const char *backend; int batch; const char *msg; } bad[] = {
        { "cpu:0,0", 16, "listed twice" },
        { "cpu:0,x", 16, "devices must be numbers" },
        { "cpu:", 16, "devices must be numbers" },
        { "cpu:0,1,2", 2, "batch size 2 is smaller than the 3 devices" },
        { "tpu:0,1", 16, "\"tpu\" is unknown" },
    };
    /* The device list is read once, at the border (net_devices_parse); what
     * it lets through, net_create checks against the net. */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        net_devices d;
        if (net_devices_parse(bad[i].backend, &d, err, sizeof err) == 0) {
            net *n = net_create(spec, (net_shape){ C, H, W }, CLASSES, bad[i].batch, &d,
                                &MOMENTUM, 1, err, sizeof err);
            assert_null(n);
        }
        if (!strstr(err, bad[i].msg)) {
            print_error("%s: \"%s\" does not say \"%s\"\n", bad[i].backend, err, bad[i].msg);
            fail();
        }
    }
    /* a batch larger than the net was made for */
    net *n = make(PLAIN, "cpu:0,1", 4, &MOMENTUM);
    static float x[5 * SIZE];
    int32_t y[5] = { 0 };
    assert_int_equal(net_train_step(n, x, y, 5, 0.1f, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "must be 1 to 4"));
    net_free(n);
    cJSON_Delete(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_replicas_match_whole_batch),
        cmocka_unit_test(test_three_replicas_match_whole_batch),
        cmocka_unit_test(test_short_batches),
        cmocka_unit_test(test_eval_split),
        cmocka_unit_test(test_batchnorm_per_replica),
        cmocka_unit_test(test_running_statistics_averaged),
        cmocka_unit_test(test_load_reaches_every_replica),
        cmocka_unit_test(test_skipped_step_changes_nothing),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
