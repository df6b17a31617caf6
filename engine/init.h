/* engine/init.h: parameter initialisation, seeded and deterministic. */
#ifndef KILN_ENGINE_INIT_H
#define KILN_ENGINE_INIT_H

#include <stddef.h>
#include <stdint.h>

typedef enum init_kind {
    INIT_ZERO,              /* biases */
    INIT_ONE,               /* batch norm scales and running variances */
    INIT_GLOROT_UNIFORM,    /* U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
    INIT_HE_UNIFORM,        /* U(-a, a), a = sqrt(6 / fan_in): layers feeding a ReLU */
    INIT_HE_NORMAL,         /* N(0, 2 / fan_in) */
} init_kind;

/* Fills dst[0..n) for a parameter named `name` (its stream is derived from
 * seed and the name, so it does not depend on the order of parameters).
 * fan_in / fan_out: inputs and outputs per unit (conv: channels/groups x
 * kernel area and filters x kernel area, as PyTorch counts them). */
void init_fill(float *dst, size_t n, init_kind kind, int64_t fan_in, int64_t fan_out,
               uint64_t seed, const char *name);

#endif
