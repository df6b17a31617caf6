/* Data parallelism on GPUs: a net on "cuda:0,1" (NCCL between the two
 * replicas, engine/cuda/comm.c) against the same net on "cuda:0" fed the
 * whole batch. The CPU's communicator proves the training code of engine/net_dp.c
 * (tests/unit/test_engine_dp.c); this proves the NCCL communicator, the
 * streams it overlaps with and a replica's thread on its own GPU: losses agree
 * step by step, weights and batch-norm statistics after the steps, in FP32
 * closely and in amp-bf16 loosely (cuDNN may pick other algorithms for half
 * the batch, and 16-bit rounding then lands elsewhere), with small buckets
 * (one per layer) and one large one, and for a short last batch.
 *
 * Needs two GPUs: with fewer it reports a skip. Needs the engine's own
 * dependencies (oneDNN, cJSON) besides CUDA, cuDNN and NCCL; tests/gpu/check
 * builds it where they can be found. */
#include "gpu_test.h"
#include "tests/settings_util.h"
#include "engine/net.h"

static const char *NET =
    "{\"name\": \"dp\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"name\": \"pool1\", \"kernel\": 2},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\", \"name\": \"r2\"},"
    " {\"type\": \"add\", \"inputs\": [\"r2\", \"pool1\"]},"
    " {\"type\": \"global_avgpool\"},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

enum { B = 32, SIZE = 3 * 16 * 16 };

static net *make(const char *where, const char *precision)
{
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    sv.precision = prec_of(precision);
    cJSON *spec = cJSON_Parse(NET);
    net_devices d = devices_of(where);
    net *n = net_create(spec, (net_shape){ 3, 16, 16 }, 4, B, &d, &sv, 11, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        fprintf(stderr, "FAIL: net_create on %s, %s: %s\n", where, precision, err);
        exit(1);
    }
    return n;
}

/* Every parameter and statistic of a net (the primary's), on the host. */
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

/* The largest difference between two nets' values, relative to max(1, |a|). */
static double values_diff(net *a, net *b)
{
    size_t na, nb;
    float *va = values(a, &na), *vb = values(b, &nb);
    double worst = na == nb ? 0 : INFINITY;
    for (size_t i = 0; i < na && i < nb; i++) {
        double d = fabs((double)va[i] - vb[i]) / fmax(1.0, fabs((double)va[i]));
        worst = d > worst ? d : worst;
    }
    free(va);
    free(vb);
    return worst;
}

static void parity(const char *precision, const char *bucket, double loss_tol, double w_tol)
{
    enum { STEPS = 20 };
    static float x[B * SIZE];
    int32_t y[B];
    setenv("KILN_BUCKET_BYTES", bucket, 1);
    net *one = make("cuda:0", precision), *two = make("cuda:0,1", precision);
    unsetenv("KILN_BUCKET_BYTES");
    CHECK(values_diff(one, two) == 0, "%s: the two start from different weights", precision);
    rng r;
    rng_seed(&r, 3);
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        int count = s == STEPS - 1 ? 5 : B;          /* a short last batch: 3 + 2 */
        net_stats a, b;
        synth(&r, x, y, count);
        OK(net_train_step(one, x, y, count, 0.05f, &a, err, sizeof err));
        OK(net_train_step(two, x, y, count, 0.05f, &b, err, sizeof err));
        CHECK(b.count == count, "%s step %d: %d images counted of %d", precision, s, b.count,
              count);
        double d = fabs(a.loss - b.loss) / fmax(1e-3, fabs(a.loss));
        worst = d > worst ? d : worst;
        CHECK(d <= loss_tol, "%s, buckets of %s bytes, step %d: loss %.7g on one GPU, %.7g on "
              "two", precision, bucket, s, a.loss, b.loss);
    }
    double dw = values_diff(one, two);
    printf("  %-8s buckets %-9s: losses within %.2g, weights and statistics within %.2g\n",
           precision, bucket, worst, dw);
    CHECK(dw <= w_tol, "%s, buckets of %s bytes: the weights differ by %g after %d steps",
          precision, bucket, dw, STEPS);
    net_free(one);
    net_free(two);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("SKIPPED: %d CUDA device%s here; the data-parallel check needs two\n", n,
               n == 1 ? "" : "s");
        return SKIP;
    }
    gpu_start();
    parity("fp32", "1", 1e-4, 1e-4);
    parity("fp32", "100000000", 1e-4, 1e-4);
    parity("amp-bf16", "1", 0.05, 0.02);
    /* Two GPUs listed twice, or one that is not there, are refused. */
    cJSON *spec = cJSON_Parse(NET);
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f };
    char where[32];
    snprintf(where, sizeof where, "cuda:0,%d", n);
    /* (the name is refused where it is read; a list that says it anyway, by net_create) */
    net_devices twice;
    CHECK(net_devices_parse("cuda:1,1", &twice, err, sizeof err) != 0 &&
          strstr(err, "device 1 is listed twice"), "cuda:1,1 parsed: %s", err);
    twice = (net_devices){ .kind = BACKEND_CUDA, .count = 2, .ids = { 1, 1 } };
    CHECK(!net_create(spec, (net_shape){ 3, 16, 16 }, 4, B, &twice, &sv, 1, err, sizeof err) &&
          strstr(err, "device 1 is listed twice"), "cuda:1,1 accepted: %s", err);
    net_devices absent = devices_of(where);
    CHECK(!net_create(spec, (net_shape){ 3, 16, 16 }, 4, B, &absent, &sv, 1, err, sizeof err),
          "%s accepted", where);
    cJSON_Delete(spec);
    return gpu_finish();
}
