/* engine/init.c: parameter initialisation (see engine/init.h). Values are
 * drawn in double from xoshiro256** and rounded once to float, so they are
 * the same on every machine. */
#include "engine/init.h"

#include <math.h>
#include <string.h>

#include "engine/rng.h"

void init_fill(float *dst, size_t n, init_kind kind, int64_t fan_in, int64_t fan_out,
               uint64_t seed, const char *name)
{
    rng r;
    double a;
    if (kind == INIT_ZERO) {
        memset(dst, 0, n * sizeof *dst);
        return;
    }
    if (kind == INIT_ONE) {
        for (size_t i = 0; i < n; i++)
            dst[i] = 1.0f;
        return;
    }
    if (fan_in < 1)
        fan_in = 1;
    if (fan_out < 1)
        fan_out = 1;
    rng_seed(&r, rng_derive(seed, name));
    switch (kind) {
    case INIT_HE_NORMAL:
        a = sqrt(2.0 / (double)fan_in);
        for (size_t i = 0; i < n; i++)
            dst[i] = (float)(a * rng_normal(&r));
        return;
    case INIT_HE_UNIFORM:
        a = sqrt(6.0 / (double)fan_in);
        break;
    default:
        a = sqrt(6.0 / (double)(fan_in + fan_out));
        break;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)rng_range(&r, -a, a);
}
