/* engine/cuda/plugin.c: the one symbol libkiln_cuda.so exports (contract in
 * engine/cuda/plugin.h): the CUDA backend's table and its device list. */
#include "engine/cuda/plugin.h"

#include "engine/cuda/cuda.h"      /* cuda_backend */
#include "engine/cuda/devices.h"   /* cuda_devices */

static const kiln_cuda_plugin plugin = {
    .abi = KILN_CUDA_PLUGIN_ABI,
    .backend_size = sizeof(backend),
    .device_size = sizeof(engine_device),
    .backend = &cuda_backend,
    .devices = cuda_devices,
};

const kiln_cuda_plugin *kiln_cuda_plugin_get(void)
{
    return &plugin;
}
