/* Data parallelism across processes on GPUs (engine/net_world.c, the NCCL
 * world communicator of engine/cuda/comm.c): two processes, ranks 0 and 1
 * on GPUs 0 and 1, meeting through a temporary folder (rank 0 writes NCCL's
 * unique id there, rank 1 reads it, both join with ncclCommInitRank), train
 * a net with batch norm on the same batches, and must agree with the same
 * net on "cuda:0,1" in one process (NCCL between threads, test_cuda_dp's
 * tolerances) and with each other bit for bit. Then rank 1 dies after a few
 * steps and rank 0's next step must fail within its 20 s timeout, with the
 * reason, instead of hanging.
 *
 * The ranks are this program run again (fork and exec, `--rank R DIR`), so
 * that each starts CUDA in a process of its own. Needs two GPUs: with fewer
 * it reports a skip. tests/gpu/check builds and runs it. */
#include "gpu_test.h"
#include "tests/settings_util.h"
#include "engine/net.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *NET =
    "{\"name\": \"world\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"global_avgpool\"},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

enum { B = 32, SIZE = 3 * 16 * 16, STEPS = 12, DIE_AFTER = 3 };

static net *make(net_devices *d)
{
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    cJSON *spec = cJSON_Parse(NET);
    net *n = net_create(spec, (net_shape){ 3, 16, 16 }, 4, B, d, &sv, 11, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        fprintf(stderr, "FAIL: net_create: %s\n", err);
        exit(1);
    }
    return n;
}

/* Every parameter and statistic of a net, on the host; *total floats. */
static float *values(net *n, size_t *total)
{
    be_ctx *c;
    const backend *b = net_backend(n, &c);
    net_param ps[64];
    size_t np = net_param_tensors(n, ps, 32);
    np += net_state_tensors(n, ps + np, 32);
    *total = 0;
    for (size_t i = 0; i < np; i++)
        *total += ps[i].count;
    float *v = malloc(*total * sizeof *v), *at = v;
    for (size_t i = 0; i < np; i++) {
        OK(b->buf_download(c, ps[i].value, 0, at, ps[i].count * sizeof *at, err, sizeof err));
        at += ps[i].count;
    }
    return v;
}

/* The same STEPS batches for every run; the losses into loss[]. */
static void train(net *n, double *loss, int steps)
{
    static float x[B * SIZE];
    int32_t y[B];
    rng r;
    rng_seed(&r, 3);
    for (int s = 0; s < steps; s++) {
        net_stats st;
        int count = s == STEPS - 1 ? 5 : B;          /* a short last batch: 3 + 2 */
        synth(&r, x, y, count);
        OK(net_train_step(n, x, y, count, 0.05f, &st, err, sizeof err));
        loss[s] = st.loss;
    }
}

/* A rank: mode "train" writes DIR/rank-R.bin (losses, then the values);
 * mode "die" trains DIE_AFTER steps, then rank 1 exits and rank 0 must see
 * its next step fail within the timeout (exit 0 when it does). */
static int rank_main(int rank, const char *dir, const char *mode)
{
    net_devices d = devices_of(rank == 0 ? "cuda:0" : "cuda:1");
    d.world = (net_world){ .rank = rank, .size = 2, .timeout_ms = 20000 };
    snprintf(d.world.dir, sizeof d.world.dir, "%s/%s", dir, mode);
    snprintf(d.world.host, sizeof d.world.host, "127.0.0.1");
    net *n = make(&d);
    double loss[STEPS];
    if (!strcmp(mode, "die")) {
        train(n, loss, DIE_AFTER);
        if (rank == 1)
            _exit(0);                               /* gone, with NCCL's sockets */
        static float x[B * SIZE];
        int32_t y[B];
        rng r;
        rng_seed(&r, 5);
        synth(&r, x, y, B);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        net_stats st;
        int rc = net_train_step(n, x, y, B, 0.05f, &st, err, sizeof err);
        if (rc == 0)    /* the step may have been queued before NCCL noticed: the next */
            rc = net_train_step(n, x, y, B, 0.05f, &st, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("  rank 0 without rank 1: %s after %.1f s: %s\n", rc ? "failed" : "succeeded",
               secs, err);
        return rc != 0 && secs < 60 ? 0 : 1;
    }
    train(n, loss, STEPS);
    size_t total;
    float *v = values(n, &total);
    char path[512];
    snprintf(path, sizeof path, "%s/rank-%d.bin", dir, rank);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(loss, sizeof loss, 1, f) == 1 && fwrite(v, sizeof *v, total, f) == total;
    if (f)
        fclose(f);
    free(v);
    net_free(n);
    return ok ? 0 : 1;
}

/* Runs both ranks (this program again) in mode; true when both exit 0. */
static bool run_ranks(const char *self, const char *dir, const char *mode)
{
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        char rank[4];
        snprintf(rank, sizeof rank, "%d", r);
        pid[r] = fork();
        if (pid[r] == 0) {
            execl(self, self, "--rank", rank, dir, mode, (char *)NULL);
            _exit(127);
        }
    }
    bool ok = true;
    for (int r = 0; r < 2; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    return ok;
}

static float *read_rank(const char *dir, int rank, double *loss, size_t total)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rank-%d.bin", dir, rank);
    FILE *f = fopen(path, "rb");
    float *v = malloc(total * sizeof *v);
    bool ok = f && fread(loss, sizeof(double), STEPS, f) == STEPS &&
              fread(v, sizeof *v, total, f) == total;
    if (f)
        fclose(f);
    if (!ok) {
        fprintf(stderr, "FAIL: %s is not what rank %d should have written\n", path, rank);
        exit(1);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--rank"))
        return rank_main(atoi(argv[2]), argv[3], argv[4]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("SKIPPED: %d CUDA device%s here; the multi-process check needs two\n", n,
               n == 1 ? "" : "s");
        return SKIP;
    }
    gpu_start();
    char dir[] = "/tmp/kiln-cuda-world-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "FAIL: mkdtemp\n");
        return 1;
    }
    CHECK(run_ranks(argv[0], dir, "train"), "the two ranks failed");
    net_devices both = devices_of("cuda:0,1");
    net *one = make(&both);
    double loss[STEPS], l0[STEPS], l1[STEPS];
    train(one, loss, STEPS);
    size_t total;
    float *want = values(one, &total);
    float *v0 = read_rank(dir, 0, l0, total), *v1 = read_rank(dir, 1, l1, total);
    double dl = 0, dw = 0;
    for (int s = 0; s < STEPS; s++)
        dl = fmax(dl, fabs(l0[s] - loss[s]) / fmax(1e-3, fabs(loss[s])));
    for (size_t i = 0; i < total; i++)
        dw = fmax(dw, fabs((double)v0[i] - want[i]) / fmax(1.0, fabs((double)want[i])));
    printf("  2 processes against 2 GPUs in one process: losses within %.2g, weights and "
           "statistics within %.2g\n", dl, dw);
    CHECK(dl <= 1e-4 && dw <= 1e-4, "the ranks differ from the in-process replicas");
    CHECK(!memcmp(l0, l1, sizeof l0) && !memcmp(v0, v1, total * sizeof *v0),
          "the two ranks do not hold the same bits");
    free(want);
    free(v0);
    free(v1);
    net_free(one);
    CHECK(run_ranks(argv[0], dir, "die"), "a dead rank did not fail the other in time");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return gpu_finish();
}
