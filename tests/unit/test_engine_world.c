/* Data parallelism across processes (engine/net_world.c) on the CPU
 * backend's Gloo communicator (engine/cpu/comm.c, comm_gloo.cc), with real
 * processes (fork) meeting through a temporary folder:
 * - the allreduce of 2 and 3 ranks gives every rank the rank-ordered sum
 *   of the in-process communicator, bit for bit, for sizes that do and do
 *   not divide by the ranks (a buffer smaller than the ranks included), and
 *   the gather gives every rank's bytes in rank order;
 * - a rank whose process is gone fails the other's next collective at once;
 *   a rank that hangs fails it after the timeout; a rank that never comes
 *   fails the others' connect after the timeout, with a message saying so;
 * - a net trained by 2 processes (an odd batch, batch norm, dropout) saves
 *   the same bytes, and reports the same losses, as the same net trained
 *   with 2 replicas in one process (engine/net_dp.c).
 * The forks come before this process runs any net (OpenMP's threads do not
 * survive a fork). */
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
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/settings_util.h"
#include "engine/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/net.h"
#include "engine/rng.h"

static char root[] = "/tmp/kiln-world-XXXXXX";
static int runs;                 /* a fresh rendezvous folder for each group of ranks */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static net_world world_of(int rank, int size, int timeout_ms)
{
    net_world w = { .rank = rank, .size = size, .timeout_ms = timeout_ms };
    snprintf(w.dir, sizeof w.dir, "%s/run-%d", root, runs);
    snprintf(w.host, sizeof w.host, "127.0.0.1");
    return w;
}

/* In a child: a failed check prints and exits 1. */
#define CHILD_CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); _exit(1); } } while (0)

/* Starts size children running fn(rank, size, arg); waits for them and
 * returns how many exited 0. */
static int run_ranks(int size, void (*fn)(int, int, void *), void *arg, pid_t *pids_out)
{
    pid_t pids[8];
    runs++;
    for (int r = 0; r < size; r++) {
        pid_t p = fork();
        assert_true(p >= 0);
        if (p == 0) {
            fn(r, size, arg);
            _exit(0);
        }
        pids[r] = p;
        if (pids_out)
            pids_out[r] = p;
    }
    int ok = 0;
    for (int r = 0; r < size; r++) {
        int st;
        assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
        ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    return ok;
}

/* A value no two (rank, element) pairs share, with bits that make the
 * order of a float sum matter. */
static float value_of(int rank, size_t e)
{
    return (float)((double)(e % 97) * 0.1 + 1.0 / (rank + 3) + (double)rank * 1e-3 * (double)e);
}

static void sum_ranks(int rank, int size, void *arg)
{
    (void)arg;
    char err[512] = "";
    net_world w = world_of(rank, size, 20000);
    be_comm *c = NULL;
    be_ctx *ctx = NULL;
    CHILD_CHECK(cpu_backend.ctx_create(0, &ctx, err, sizeof err) == 0, "ctx: %s", err);
    CHILD_CHECK(cpu_backend.comm_create_world(ctx, &w, &c, err, sizeof err) == 0,
                "rank %d: %s", rank, err);
    static const size_t sizes[] = { 1, 2, 3, 1000, 4099 };
    be_buf *bufs[5];
    size_t counts[5];
    for (int j = 0; j < 5; j++) {
        counts[j] = sizes[j];
        bufs[j] = cpu_backend.buf_alloc(ctx, sizes[j] * sizeof(float), err, sizeof err);
        CHILD_CHECK(bufs[j], "alloc: %s", err);
        float *p = bufs[j]->p;
        for (size_t e = 0; e < sizes[j]; e++)
            p[e] = value_of(rank, e);
    }
    CHILD_CHECK(cpu_backend.allreduce(ctx, c, rank, bufs, counts, 5, err, sizeof err) == 0,
                "rank %d allreduce: %s", rank, err);
    for (int j = 0; j < 5; j++) {
        const float *p = bufs[j]->p;
        for (size_t e = 0; e < sizes[j]; e++) {
            float want = value_of(0, e);            /* comm.c's sum: rank order */
            for (int q = 1; q < size; q++)
                want += value_of(q, e);
            CHILD_CHECK(memcmp(&p[e], &want, sizeof want) == 0, "rank %d of %d: element %zu of "
                        "%zu is %.9g, the rank-ordered sum is %.9g", rank, size, e, sizes[j],
                        (double)p[e], (double)want);
        }
    }
    /* the gather: every rank's bytes in rank order */
    int mine[3] = { rank, rank * 10, -rank }, all[3 * 8];
    CHILD_CHECK(cpu_backend.comm_gather(ctx, c, mine, sizeof mine, all, err, sizeof err) == 0,
                "gather: %s", err);
    for (int q = 0; q < size; q++)
        CHILD_CHECK(all[3 * q] == q && all[3 * q + 1] == q * 10 && all[3 * q + 2] == -q,
                    "gather: rank %d's part is wrong", q);
    for (int j = 0; j < 5; j++)
        cpu_backend.buf_free(ctx, bufs[j]);
    cpu_backend.comm_free(c);
    cpu_backend.ctx_free(ctx);
}

static void test_sum_two_and_three_ranks(void **state)
{
    (void)state;
    assert_int_equal(run_ranks(2, sum_ranks, NULL, NULL), 2);
    assert_int_equal(run_ranks(3, sum_ranks, NULL, NULL), 3);
}

/* Rank 1 connects and then dies (mode 0) or hangs (mode 1: the parent
 * kills it once rank 0 is done); rank 0's allreduce must fail: at once, or
 * after its 1.5 s timeout. */
typedef struct death { int mode; } death;

static void dying_ranks(int rank, int size, void *arg)
{
    const death *d = arg;
    char err[512] = "";
    net_world w = world_of(rank, size, 1500);
    be_comm *c = NULL;
    be_ctx *ctx = NULL;
    CHILD_CHECK(cpu_backend.ctx_create(0, &ctx, err, sizeof err) == 0, "ctx: %s", err);
    CHILD_CHECK(cpu_backend.comm_create_world(ctx, &w, &c, err, sizeof err) == 0, "%s", err);
    int mine = rank, all[2];            /* both connected and working: a first collective */
    CHILD_CHECK(cpu_backend.comm_gather(ctx, c, &mine, sizeof mine, all, err, sizeof err) == 0,
                "%s", err);
    if (rank == 1) {
        if (d->mode == 1)
            sleep(30);                  /* the parent kills it */
        _exit(0);                       /* gone without a word */
    }
    usleep(200 * 1000);
    size_t count = 100000;
    be_buf *b = cpu_backend.buf_alloc(ctx, count * sizeof(float), err, sizeof err);
    CHILD_CHECK(b, "%s", err);
    memset(b->p, 0, count * sizeof(float));
    double t0 = now_s();
    int rc = cpu_backend.allreduce(ctx, c, rank, &b, &count, 1, err, sizeof err);
    double dt = now_s() - t0;
    CHILD_CHECK(rc == -1, "the allreduce without rank 1 succeeded");
    CHILD_CHECK(strstr(err, "another rank failed or is gone"), "message: %s", err);
    if (d->mode == 0)
        CHILD_CHECK(dt < 1.4, "a dead rank was noticed after %.2f s, not at once (%s)", dt, err);
    else
        CHILD_CHECK(dt >= 1.4 && dt < 10, "a hung rank failed the allreduce after %.2f s, not "
                    "at the 1.5 s timeout (%s)", dt, err);
    fprintf(stderr, "rank 0 (%s rank 1): failed after %.2f s: %s\n",
            d->mode == 0 ? "dead" : "hung", dt, err);
    /* and the communicator stays failed */
    CHILD_CHECK(cpu_backend.allreduce(ctx, c, rank, &b, &count, 1, err, sizeof err) == -1,
                "a second allreduce succeeded");
}

static void test_dead_rank_fails_the_others(void **state)
{
    (void)state;
    death d = { 0 };
    pid_t pids[2];
    assert_int_equal(run_ranks(2, dying_ranks, &d, pids), 2);
}

static void test_hung_rank_times_out(void **state)
{
    (void)state;
    death d = { 1 };
    pid_t pids[2];
    runs++;
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            dying_ranks(r, 2, &d);
            _exit(0);
        }
    }
    int st;
    assert_int_equal(waitpid(pids[0], &st, 0), pids[0]);
    kill(pids[1], SIGKILL);
    int st1;
    waitpid(pids[1], &st1, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Rank 1 of 2 never comes: rank 0's connect fails after its timeout. */
static void lonely_rank(int rank, int size, void *arg)
{
    (void)arg;
    if (rank == 1)
        return;
    char err[512] = "";
    net_world w = world_of(rank, size, 1000);
    be_comm *c = NULL;
    be_ctx *ctx = NULL;
    CHILD_CHECK(cpu_backend.ctx_create(0, &ctx, err, sizeof err) == 0, "ctx: %s", err);
    double t0 = now_s();
    int rc = cpu_backend.comm_create_world(ctx, &w, &c, err, sizeof err);
    double dt = now_s() - t0;
    CHILD_CHECK(rc == -1, "connected without rank 1");
    CHILD_CHECK(strstr(err, "could not connect"), "message: %s", err);
    CHILD_CHECK(dt >= 0.9 && dt < 10, "gave up after %.2f s, not at the 1 s timeout", dt);
}

static void test_missing_rank_fails_connect(void **state)
{
    (void)state;
    assert_int_equal(run_ranks(2, lonely_rank, NULL, NULL), 2);
}

/* ---- a net across processes against replicas in one process ------------- */

#define C 3
#define H 8
#define W 8
#define SIZE (C * H * W)
#define CLASSES 5
#define BATCH 11                 /* odd: the ranks' shares differ (6 and 5) */
#define STEPS 4

static const char *SPEC =
    "{\"name\": \"bn\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\","
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dropout\", \"name\": \"drop\", \"rate\": 0.25},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static void data(int step, float *x, int32_t *y)
{
    rng r;
    rng_seed(&r, 1000 + (uint64_t)step);
    for (int i = 0; i < BATCH; i++) {
        y[i] = (int32_t)(rng_next(&r) % CLASSES);
        for (int k = 0; k < SIZE; k++)
            x[(size_t)i * SIZE + k] = (float)(rng_normal(&r) + (k % CLASSES == y[i]));
    }
}

/* Trains STEPS steps on d; the losses into loss[], the net saved at path;
 * the validation loss of one batch into *val. Returns 0, or -1 with err. */
static int train(const net_devices *d, double *loss, double *val, const char *path, char *err,
                 size_t errlen)
{
    cJSON *spec = cJSON_Parse(SPEC);
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    net *n = net_create(spec, (net_shape){ C, H, W }, CLASSES, BATCH, d, &sv, 7, err, errlen);
    cJSON_Delete(spec);
    if (!n)
        return -1;
    float x[BATCH * SIZE];
    int32_t y[BATCH];
    int rc = -1;
    for (int s = 0; s < STEPS; s++) {
        net_stats st;
        data(s, x, y);
        if (net_train_step(n, x, y, BATCH, 0.05f, &st, err, errlen) < 0)
            goto out;
        loss[s] = st.loss;
    }
    net_stats st;
    data(99, x, y);
    if (net_eval(n, x, y, BATCH, &st, err, errlen) < 0)
        goto out;
    *val = st.loss;
    bool any;
    if (net_any(n, net_world_rank(n) == 1, &any, err, errlen) < 0)
        goto out;
    if (any != (d->world.size > 1)) {      /* one process: its own false */
        snprintf(err, errlen, "net_any gave %s", any ? "true" : "false");
        goto out;
    }
    rc = path ? net_save(n, path, err, errlen) : 0;
out:
    net_free(n);
    return rc;
}

static void net_rank(int rank, int size, void *arg)
{
    (void)arg;
    char err[512] = "", path[256], out[256];
    net_devices d = devices_of("cpu");
    d.world = world_of(rank, size, 20000);
    double loss[STEPS + 1];
    snprintf(path, sizeof path, "%s/rank-%d.safetensors", root, rank);
    CHILD_CHECK(train(&d, loss, &loss[STEPS], path, err, sizeof err) == 0, "rank %d: %s", rank,
                err);
    snprintf(out, sizeof out, "%s/rank-%d.loss", root, rank);
    FILE *f = fopen(out, "wb");
    CHILD_CHECK(f && fwrite(loss, sizeof loss, 1, f) == 1 && fclose(f) == 0, "writing %s", out);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void test_net_matches_replicas(void **state)
{
    (void)state;
    assert_int_equal(run_ranks(2, net_rank, NULL, NULL), 2);
    char err[512] = "", path[256];
    net_devices d = devices_of("cpu:0,1");
    double loss[STEPS + 1];
    snprintf(path, sizeof path, "%s/replicas.safetensors", root);
    if (train(&d, loss, &loss[STEPS], path, err, sizeof err) != 0) {
        print_error("in-process replicas: %s\n", err);
        fail();
    }
    size_t ln, rn;
    unsigned char *want = slurp(path, &ln);
    for (int r = 0; r < 2; r++) {
        char p[256];
        snprintf(p, sizeof p, "%s/rank-%d.safetensors", root, r);
        unsigned char *got = slurp(p, &rn);
        assert_int_equal(rn, ln);
        assert_memory_equal(got, want, ln);
        free(got);
        snprintf(p, sizeof p, "%s/rank-%d.loss", root, r);
        double *gl = (double *)slurp(p, &rn);
        assert_int_equal(rn, sizeof loss);
        for (int s = 0; s <= STEPS; s++)
            if (memcmp(&gl[s], &loss[s], sizeof loss[s]) != 0) {
                print_error("rank %d, %s %d: loss %.17g, the replicas' %.17g\n", r,
                            s < STEPS ? "step" : "validation", s, gl[s], loss[s]);
                fail();
            }
        free(gl);
    }
    free(want);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_two_and_three_ranks),
        cmocka_unit_test(test_dead_rank_fails_the_others),
        cmocka_unit_test(test_hung_rank_times_out),
        cmocka_unit_test(test_missing_rank_fails_connect),
        cmocka_unit_test(test_net_matches_replicas),   /* last: the only one with nets here */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
