/* base/nvml_lib.h: which NVML library kiln opens (one rule for every place
 * that dlopens it: engine/cuda/devices.c, server/hardware.c).
 *
 * NVML comes with the NVIDIA driver, not the toolkit, so it is opened at run
 * time and its absence only means that GPU figures are unknown.
 *
 * Test seam: KILN_NVML_LIBRARY, when set and not empty, names the library to
 * open instead of libnvidia-ml.so.1 (tests/tools/fake_nvml.c builds one with
 * fixed figures). It is for tests; an operator has no reason to set it. */
#ifndef KILN_BASE_NVML_LIB_H
#define KILN_BASE_NVML_LIB_H

#include <stdlib.h>

#define NVML_LIB_DEFAULT "libnvidia-ml.so.1"
#define NVML_LIB_ENV "KILN_NVML_LIBRARY"

/* The file name to dlopen; never NULL. */
static inline const char *nvml_library(void)
{
    const char *v = getenv(NVML_LIB_ENV);
    return v && *v ? v : NVML_LIB_DEFAULT;
}

#endif
