/* Whole nets on the CUDA backend (engine/net*.c over engine/cuda/) against the
 * same nets on the CPU backend: the same spec, seed and batches give losses
 * that agree step by step (FP32: closely; mixed precision: loosely, since the
 * two backends round 16-bit results in different places), the GPU net
 * learns, its runs repeat exactly, and LeNet and ResNet-20 train a few steps
 * in every precision with their throughput printed.
 *
 * Needs the engine's own dependencies (oneDNN, cJSON) besides CUDA and cuDNN:
 * tests/gpu/check builds it where they can be found. */
#include <time.h>

#include "gpu_test.h"
#include "tests/settings_util.h"
#include "engine/net.h"

static const char *NET =
    "{\"name\": \"small\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"name\": \"pool1\", \"kernel\": 2},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\", \"name\": \"r2\"},"
    " {\"type\": \"add\", \"inputs\": [\"r2\", \"pool1\"]},"
    " {\"type\": \"global_avgpool\"},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dropout\", \"rate\": 0.1},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static net *make(const char *spec_txt, net_shape in, int classes, int batch, const char *where,
                 const char *precision)
{
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    sv.precision = prec_of(precision);
    cJSON *spec = cJSON_Parse(spec_txt);
    net_devices d = devices_of(where);
    net *n = net_create(spec, in, classes, batch, &d, &sv, 5, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        fprintf(stderr, "FAIL: net_create on %s, %s: %s\n", where, precision, err);
        exit(1);
    }
    return n;
}

static void losses(net *n, int steps, double *out)
{
    rng r;
    rng_seed(&r, 99);
    float x[32 * 3 * 256];
    int32_t y[32];
    for (int s = 0; s < steps; s++) {
        net_stats st;
        synth(&r, x, y, 32);
        OK(net_train_step(n, x, y, 32, 0.05f, &st, err, sizeof err));
        out[s] = st.loss;
    }
}

static void test_parity(void)
{
    const char *const precisions[] = { "fp32", "amp-bf16", "amp-fp16" };
    const double tol[] = { 1e-4, 0.05, 0.02 };     /* relative, per step's loss */
    enum { STEPS = 30 };
    const char *spec = NET;
    for (int p = 0; p < 3; p++) {
        double cpu[STEPS], gpu[STEPS], again[STEPS];
        net *a = make(spec, (net_shape){ 3, 16, 16 }, 4, 32, "cpu", precisions[p]);
        net *b = make(spec, (net_shape){ 3, 16, 16 }, 4, 32, "cuda", precisions[p]);
        net *c = make(spec, (net_shape){ 3, 16, 16 }, 4, 32, "cuda", precisions[p]);
        losses(a, STEPS, cpu);
        losses(b, STEPS, gpu);
        losses(c, STEPS, again);
        double worst = 0;
        for (int s = 0; s < STEPS; s++)
            worst = fmax(worst, fabs(gpu[s] - cpu[s]) / fabs(cpu[s]));
        printf("%s: loss %.4f -> %.4f on the CPU, %.4f -> %.4f on the GPU; largest relative "
               "difference %.2g\n", precisions[p], cpu[0], cpu[STEPS - 1], gpu[0], gpu[STEPS - 1],
               worst);
        CHECK(worst <= tol[p], "%s: GPU and CPU losses differ by %.3g relative", precisions[p],
              worst);
        CHECK(gpu[STEPS - 1] < 0.5 * gpu[0], "%s: the GPU net learns (%.4f -> %.4f)",
              precisions[p], gpu[0], gpu[STEPS - 1]);
        CHECK(memcmp(gpu, again, sizeof gpu) == 0, "%s: two GPU runs differ", precisions[p]);
        net_free(a);
        net_free(b);
        net_free(c);
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Built-in networks train in every precision; images/s for the record. */
static void test_builtins(void)
{
    const struct { const char *name; net_shape in; int batch; } nets[] = {
        { "lenet", { 1, 28, 28 }, 64 },
        { "resnet20", { 3, 32, 32 }, 128 },
    };
    const char *const precisions[] = { "fp32", "amp-bf16", "amp-fp16" };
    for (size_t k = 0; k < 2; k++)
        for (int p = 0; p < 3; p++) {
            int bn = nets[k].batch;
            size_t in = (size_t)nets[k].in.c * nets[k].in.h * nets[k].in.w;
            float *x = malloc((size_t)bn * in * sizeof *x);
            int32_t *y = malloc((size_t)bn * sizeof *y);
            rng r;
            rng_seed(&r, 3);
            for (size_t i = 0; i < (size_t)bn * in; i++)
                x[i] = (float)rng_normal(&r);
            for (int i = 0; i < bn; i++)
                y[i] = (int32_t)(rng_next(&r) % 10);
            net *n = make(net_builtin(nets[k].name), nets[k].in, 10, bn, "cuda", precisions[p]);
            net_stats st;
            double first = 0, t0 = 0;
            for (int s = 0; s < 30; s++) {
                if (s == 10)
                    t0 = now();
                OK(net_train_step(n, x, y, bn, 0.01f, &st, err, sizeof err));
                if (s == 0)
                    first = st.loss;
            }
            double secs = now() - t0;
            printf("%s b%d %s: loss %.4f -> %.4f on one batch, %.0f images/s\n", nets[k].name, bn,
                   precisions[p], first, st.loss, 20.0 * bn / secs);
            CHECK(isfinite(st.loss) && st.loss < first, "%s %s: loss %.4f -> %.4f", nets[k].name,
                  precisions[p], first, st.loss);
            net_free(n);
            free(x);
            free(y);
        }
}

/* The device in the backend's name, and the memory check against the GPU's
 * free memory before anything is allocated (a dense layer of 2^20 units at
 * batch 2^20 needs terabytes). */
static void test_devices_and_memory(void)
{
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.9f };
    cJSON *spec = cJSON_Parse(net_builtin("lenet"));
    net_devices d = devices_of("cuda:0");
    net *n = net_create(spec, (net_shape){ 1, 28, 28 }, 10, 64, &d, &sv, 1, err, sizeof err);
    CHECK(n != NULL, "lenet on cuda:0: %s", err);
    net_free(n);
    d = devices_of("cuda:999");
    n = net_create(spec, (net_shape){ 1, 28, 28 }, 10, 64, &d, &sv, 1, err, sizeof err);
    CHECK(n == NULL && strstr(err, "no GPU 999"), "cuda:999 refused: %s", err);
    cJSON_Delete(spec);
    spec = cJSON_Parse("{\"layers\": [{\"type\": \"dense\", \"name\": \"huge\", "
                       "\"units\": 1048576}, {\"type\": \"dense\", \"units\": \"classes\"}]}");
    d = devices_of("cuda");
    n = net_create(spec, (net_shape){ 1, 2, 2 }, 2, 1 << 20, &d, &sv, 1, err, sizeof err);
    CHECK(n == NULL && strstr(err, "GPU's free") && strstr(err, "\"huge\""),
          "a net beyond the GPU is refused naming the layer: %s", err);
    printf("refused: %s\n", err);
    cJSON_Delete(spec);
}

int main(void)
{
    gpu_start();
    test_devices_and_memory();
    test_parity();
    test_builtins();
    return gpu_finish();
}
