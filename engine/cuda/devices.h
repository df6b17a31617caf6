/* engine/cuda/devices.h: CUDA devices for engine_devices (built only with the
 * CUDA toolkit, KILN_HAVE_CUDA). */
#ifndef KILN_ENGINE_CUDA_DEVICES_H
#define KILN_ENGINE_CUDA_DEVICES_H

#include "engine/net.h"

/* Fills up to max entries (out may be NULL when max is 0) with kind "cuda",
 * index, name, total memory, compute capability and free memory (0 where
 * NVML, the driver's library, cannot say); returns how many CUDA devices
 * there are. No driver, no GPU or any CUDA error: 0. */
int cuda_devices(engine_device *out, int max);

#endif
