/* tests/settings_util.h: the engine's typed settings from the names tests
 * are written with ("amp-bf16", "adam"); an unknown name fails the test. */
#ifndef KILN_TESTS_SETTINGS_UTIL_H
#define KILN_TESTS_SETTINGS_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/settings.h"

static inline precision_mode prec_of(const char *name)
{
    precision_mode p = PREC_FP32;
    if (name && precision_parse(name, &p) != 0) {
        fprintf(stderr, "test: unknown precision \"%s\"\n", name);
        abort();
    }
    return p;
}

static inline solver_type solver_of(const char *name)
{
    solver_type t = SOLVER_SGD;
    if (name && solver_type_parse(name, &t) != 0) {
        fprintf(stderr, "test: unknown solver \"%s\"\n", name);
        abort();
    }
    return t;
}

/* "cpu", "cpu:0,1", "cuda:0": the devices, or abort. */
static inline net_devices devices_of(const char *name)
{
    net_devices d;
    char why[160];
    if (net_devices_parse(name, &d, why, sizeof why) != 0) {
        fprintf(stderr, "test: %s\n", why);
        abort();
    }
    return d;
}

#endif
