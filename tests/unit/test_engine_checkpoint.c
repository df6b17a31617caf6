/* Checkpoints (engine/checkpoint.h): "train k steps, checkpoint, train m
 * more" and "restore into a fresh net, train m" give identical losses and
 * weights bit for bit (batch norm's running statistics included), for every
 * solver and with batch norm and dropout in the net; a checkpoint also loads with net_load; bad files are refused
 * without changing the net; the latest checkpoint of a folder is found. */
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
#include "engine/checkpoint.h"
#include "engine/fileio.h"
#include "engine/net.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"

#define C 1
#define H 8
#define W 8
#define CLASSES 4
#define BATCH 8
#define K 5                     /* steps before the checkpoint */
#define M 6                     /* steps after it */

static const char *SPEC =
    "{\"name\": \"ck\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"conv\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dropout\", \"rate\": 0.3},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static char dir[64];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-ckpt-test-%d", (int)getpid());
    return fio_mkdir_p(dir);
}

static int teardown(void **state)
{
    return fio_rm_rf(dir);
}

static net *make(const net_solver *sv)
{
    char err[512] = "";
    cJSON *spec = cJSON_Parse(SPEC);
    net *n = net_create(spec, (net_shape){ C, H, W }, CLASSES, BATCH, NULL, sv, 5, err,
                        sizeof err);
    cJSON_Delete(spec);
    if (!n)
        print_error("net_create: %s\n", err);
    assert_non_null(n);
    return n;
}

/* Batch i of a fixed synthetic stream. */
static void batch(int i, float *x, int32_t *y)
{
    rng r;
    rng_seed(&r, 1000 + (uint64_t)i);
    for (int k = 0; k < BATCH * C * H * W; k++)
        x[k] = (float)rng_normal(&r);
    for (int k = 0; k < BATCH; k++)
        y[k] = (int32_t)(rng_next(&r) % CLASSES);
}

static double step(net *n, int i)
{
    char err[512] = "";
    float x[BATCH * C * H * W];
    int32_t y[BATCH];
    net_stats st;
    batch(i, x, y);
    int rc = net_train_step(n, x, y, BATCH, 0.05f / (float)(1 + i % 3), &st, err, sizeof err);
    if (rc != 0)
        print_error("step %d: %s\n", i, err);
    assert_int_equal(rc, 0);
    return st.loss;
}

/* Every saved tensor of two nets, compared bit for bit. */
static void same_weights(net *a, net *b)
{
    char pa[256], pb[256], err[256];
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
    ckpt_info ci = { 0 };
    assert_int_equal(ckpt_save(a, pa, &ci, err, sizeof err), 0);
    assert_int_equal(ckpt_save(b, pb, &ci, err, sizeof err), 0);
    st_file *fa = st_open(pa, err, sizeof err), *fb = st_open(pb, err, sizeof err);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(st_count(fa), st_count(fb));
    for (int i = 0; i < st_count(fa); i++) {
        const st_tensor *ta = st_get(fa, i), *tb = st_find(fb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->bytes, tb->bytes);
        assert_memory_equal(ta->data, tb->data, ta->bytes);
    }
    st_close(fa);
    st_close(fb);
}

static void resume_exact(const net_solver *sv, bool expect_optim_tensors)
{
    char path[256], err[512] = "";
    double first[M], second[M];
    snprintf(path, sizeof path, "%s/checkpoints/step-%d.safetensors", dir, K);
    char cdir[128];
    snprintf(cdir, sizeof cdir, "%s/checkpoints", dir);
    assert_int_equal(fio_mkdir_p(cdir), 0);

    net *a = make(sv);
    for (int i = 0; i < K; i++)
        step(a, i);
    ckpt_info ci = { .step = K, .epoch = 0, .epoch_step = K, .seed = 5 };
    assert_int_equal(ckpt_save(a, path, &ci, err, sizeof err), 0);
    for (int i = 0; i < M; i++)
        first[i] = step(a, K + i);

    net *b = make(sv);                       /* fresh: other weights until restored */
    ckpt_info got;
    assert_int_equal(ckpt_load(b, path, &got, err, sizeof err), 0);
    assert_int_equal(got.step, K);
    assert_int_equal(got.epoch_step, K);
    assert_int_equal(got.seed, 5);
    assert_int_equal(net_get_step(b), K);
    assert_int_equal(optim_steps(net_optim(b)), K);
    for (int i = 0; i < M; i++)
        second[i] = step(b, K + i);
    for (int i = 0; i < M; i++) {
        if (memcmp(&first[i], &second[i], sizeof first[i]) != 0) {
            print_error("%s: step %d: loss %.17g after the checkpoint, %.17g restored\n",
                        solver_type_name(sv->type), K + i + 1, first[i], second[i]);
            fail();
        }
    }
    same_weights(a, b);

    /* the optimizer state is in the file, under its names */
    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    assert_true((st_find(f, "optim/out.weight/exp_avg_sq") != NULL) == expect_optim_tensors);
    assert_non_null(st_find(f, "optim/out.weight/momentum") ? st_find(f, "optim/out.weight/momentum")
                                                           : st_find(f, "optim/out.weight/exp_avg"));
    assert_non_null(st_find(f, "bn.running_var"));
    assert_non_null(st_find(f, "optim/bn.weight/momentum") ? st_find(f, "optim/bn.weight/momentum")
                                                          : st_find(f, "optim/bn.weight/exp_avg"));
    st_close(f);

    /* a net restored with net_load alone (weights, no state) goes elsewhere:
     * the test can tell a missing state from a restored one */
    net *c = make(sv);
    assert_int_equal(net_load(c, path, err, sizeof err), 0);
    net_set_step(c, K);
    double other = step(c, K);
    if (sv->momentum > 0 || sv->type != SOLVER_SGD)
        assert_true(other == first[0]);      /* the first step after only needs weights... */
    double later = 0;
    for (int i = 1; i < M; i++)
        later = step(c, K + i);
    assert_true(later != first[M - 1]);      /* ...the following ones need the state */
    net_free(a);
    net_free(b);
    net_free(c);
}

static void test_resume_sgd(void **state)
{
    resume_exact(&(net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .weight_decay = 1e-3f }, false);
}

static void test_resume_sgd_options(void **state)
{
    resume_exact(&(net_solver){ .type = SOLVER_SGD, .momentum = 0.9f, .nesterov = true,
                                .clip_norm = 0.5f, .larc = LARC_CLIP }, false);
}

static void test_resume_adam(void **state)
{
    resume_exact(&(net_solver){ .type = SOLVER_ADAM }, true);
    resume_exact(&(net_solver){ .type = SOLVER_ADAMW, .weight_decay = 0.01f }, true);
}

static void test_refused(void **state)
{
    char path[256], plain[256], err[512] = "";
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    net *a = make(&(net_solver){ .type = SOLVER_SGD, .momentum = 0.9f });
    step(a, 0);
    ckpt_info ci = { .step = 1, .epoch = 0, .epoch_step = 1, .seed = 5 };
    assert_int_equal(ckpt_save(a, path, &ci, err, sizeof err), 0);
    assert_int_equal(net_save(a, plain, err, sizeof err), 0);

    net *b = make(&(net_solver){ .type = SOLVER_ADAM });
    assert_int_equal(ckpt_load(b, path, NULL, err, sizeof err), -1);
    char want[512];
    snprintf(want, sizeof want, "%s was written by solver sgd; this run uses adam", path);
    assert_string_equal(err, want);
    assert_int_equal(net_get_step(b), 0);
    assert_int_equal(ckpt_load(b, plain, NULL, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s is not a kiln checkpoint (no kiln_checkpoint metadata)", plain);
    assert_string_equal(err, want);
    assert_int_equal(ckpt_read_info(plain, &ci, err, sizeof err), -1);

    /* another network: a tensor is missing, and nothing changed */
    cJSON *spec = cJSON_Parse("{\"layers\": [{\"type\": \"maxpool\", \"kernel\": 2}, "
                              "{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                              "\"name\": \"out\", \"units\": \"classes\"}]}");
    net *d = net_create(spec, (net_shape){ C, H, W }, CLASSES, BATCH, NULL,
                        &(net_solver){ .type = SOLVER_SGD, .momentum = 0.9f }, 5, err, sizeof err);
    cJSON_Delete(spec);
    assert_non_null(d);
    assert_int_equal(ckpt_load(d, path, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "has another dtype or shape"));
    assert_int_equal(optim_steps(net_optim(d)), 0);
    net_free(a);
    net_free(b);
    net_free(d);
}

static void test_latest(void **state)
{
    char sub[128], path[256], found[256], err[512] = "";
    snprintf(sub, sizeof sub, "%s/latest", dir);
    assert_int_equal(fio_mkdir_p(sub), 0);
    ckpt_info ci;
    assert_int_equal(ckpt_latest(sub, found, sizeof found, &ci, err, sizeof err), 0);
    net *a = make(&(net_solver){ .type = SOLVER_SGD });
    const int steps[] = { 30, 120, 60 };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/epoch-%d.safetensors", sub, i + 1);
        ckpt_info w = { .step = steps[i], .epoch = i + 1, .seed = 9 };
        assert_int_equal(ckpt_save(a, path, &w, err, sizeof err), 0);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", sub);   /* not a checkpoint */
    assert_int_equal(net_save(a, path, err, sizeof err), 0);
    assert_int_equal(ckpt_latest(sub, found, sizeof found, &ci, err, sizeof err), 1);
    snprintf(path, sizeof path, "%s/epoch-2.safetensors", sub);
    assert_string_equal(found, path);
    assert_int_equal(ci.step, 120);
    assert_int_equal(ci.epoch, 2);
    assert_int_equal(ci.seed, 9);
    snprintf(path, sizeof path, "%s/none", dir);
    assert_int_equal(ckpt_latest(path, found, sizeof found, &ci, err, sizeof err), 0);
    net_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_sgd),
        cmocka_unit_test(test_resume_sgd_options),
        cmocka_unit_test(test_resume_adam),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_latest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
