/* The CUDA backend as a plugin (engine/cuda/plugin.h), as every program but
 * tests/gpu/'s others gets it: linked with kiln_engine only. A program starts
 * with none of the CUDA libraries mapped; on a machine without an NVIDIA
 * driver asking for devices or for the cuda backend opens nothing and says
 * why; with a driver the first use opens libkiln_cuda.so (the build's copy),
 * once, whichever thread asks first. Runs, and means something, on both. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"   /* backend_for */
#include "engine/net.h"       /* engine_devices, engine_backends */

/* What engine/backend.c takes as the sign of a driver (restated: the oracle). */
static bool driver_present(void)
{
    return access("/proc/driver/nvidia/version", F_OK) == 0 ||
           access("/dev/nvidiactl", F_OK) == 0 ||
           access("/usr/lib/wsl/lib/libcuda.so.1", F_OK) == 0;
}

/* Whether a file whose name contains `part` is mapped into this process. */
static bool mapped(const char *part)
{
    char line[4096];
    bool found = false;
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, part) != NULL;
    fclose(f);
    return found;
}

static const char *const cuda_libs[] = { "libkiln_cuda.so", "libcudart", "libcublas",
                                         "libcudnn", "libnccl" };

static void assert_no_cuda_mapped(void)
{
    for (size_t i = 0; i < sizeof cuda_libs / sizeof cuda_libs[0]; i++)
        if (mapped(cuda_libs[i]))
            fail_msg("%s is mapped", cuda_libs[i]);
}

/* Runs first: starting maps nothing of CUDA's, and the cuda backend is listed
 * as compiled in all the same (GET /api/v1/info's "backends"). */
static void test_start_maps_nothing(void **state)
{
    assert_no_cuda_mapped();
    const char *const *b = engine_backends();
    assert_string_equal(b[0], "cpu");
    assert_string_equal(b[1], "cuda");
    assert_null(b[2]);
    assert_no_cuda_mapped();
}

typedef struct first_use {
    const backend *be;
    char err[1024];
} first_use;

static void *ask_cuda(void *arg)
{
    first_use *u = arg;
    u->be = backend_for(BACKEND_CUDA, u->err, sizeof u->err);
    return NULL;
}

/* Four threads ask at once: one answer for all of them. */
static void test_first_use_from_threads(void **state)
{
    enum { T = 4 };
    pthread_t th[T];
    first_use u[T];
    memset(u, 0, sizeof u);
    for (int i = 0; i < T; i++)
        assert_int_equal(pthread_create(&th[i], NULL, ask_cuda, &u[i]), 0);
    for (int i = 0; i < T; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 1; i < T; i++) {
        assert_ptr_equal(u[i].be, u[0].be);
        assert_string_equal(u[i].err, u[0].err);
    }
    if (driver_present()) {
        if (!u[0].be)
            fail_msg("a driver is here but the cuda backend did not load: %s", u[0].err);
        assert_string_equal(u[0].be->name, "cuda");
        assert_true(mapped("libkiln_cuda.so"));
    } else {
        assert_null(u[0].be);
        assert_non_null(strstr(u[0].err, "no NVIDIA driver on this machine"));
        assert_no_cuda_mapped();
    }
}

static void test_devices(void **state)
{
    engine_device d[8];
    int n = engine_devices(d, 8);
    assert_true(n >= 1);
    assert_string_equal(d[0].kind, "cpu");
    for (int i = 1; i < n && i < 8; i++) {
        assert_string_equal(d[i].kind, "cuda");
        assert_int_equal(d[i].index, i - 1);
    }
    if (!driver_present()) {
        assert_int_equal(n, 1);
        assert_no_cuda_mapped();
    }
    /* the CPU backend never needs the plugin */
    char err[256] = "";
    const backend *cpu = backend_for(BACKEND_CPU, err, sizeof err);
    assert_non_null(cpu);
    assert_string_equal(cpu->name, "cpu");
    /* a kind out of range is refused by name */
    assert_null(backend_for(BACKEND_COUNT, err, sizeof err));
    assert_string_equal(err, "backend \"?\" is not compiled into this kiln");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_maps_nothing),
        cmocka_unit_test(test_first_use_from_threads),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
