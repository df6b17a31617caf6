/* engine/cuda/plugin.h: the CUDA backend as a plugin, the one border between
 * the engine and the CUDA libraries.
 *
 * The CUDA backend (engine/cuda/) is built as a shared module, libkiln_cuda.so,
 * the only part of kiln linked against cudart, cuBLAS, cuDNN and NCCL. Those
 * libraries take over 200 MB of resident memory just by being loaded and
 * relocated, so kiln_engine does not link them: engine/backend.c opens the
 * module with dlopen the first time a CUDA backend or the list of CUDA devices
 * is asked for, and only where an NVIDIA driver is present. A process that
 * never touches a GPU (`kiln import`, `kiln --version`, a CPU worker, the
 * server on a machine without one) never maps them.
 *
 * The module exports one symbol, kiln_cuda_plugin_get, which returns the
 * table below. Its first fields say which interface the module was built
 * against; the engine refuses a module whose fields differ from its own (a
 * libkiln_cuda.so left over from another build of kiln).
 *
 * Programs linked with the backend's objects themselves (tests/gpu/, which
 * test its internals) define kiln_cuda_plugin_get in the executable: the
 * engine then takes that one and opens nothing (a weak reference in
 * engine/backend.c), so that such a process holds one copy of the backend.
 */
#ifndef KILN_ENGINE_CUDA_PLUGIN_H
#define KILN_ENGINE_CUDA_PLUGIN_H

#include <stddef.h>

#include "engine/backend.h"   /* backend */
#include "engine/net.h"       /* engine_device */

/* The interface's version: raise it with any change to kiln_cuda_plugin or to
 * the meaning of a backend operation. (A changed size of backend or
 * engine_device is caught without it, by the size fields.) */
#define KILN_CUDA_PLUGIN_ABI 1

/* The module's file name, looked for beside the running executable first
 * (engine/backend.c says where else), and the symbol it exports. */
#define KILN_CUDA_PLUGIN_FILE "libkiln_cuda.so"
#define KILN_CUDA_PLUGIN_SYMBOL "kiln_cuda_plugin_get"

typedef struct kiln_cuda_plugin {
    int abi;                        /* KILN_CUDA_PLUGIN_ABI of the module's build */
    size_t backend_size;            /* sizeof(backend) there */
    size_t device_size;             /* sizeof(engine_device) there */
    const backend *backend;         /* the CUDA backend's table (engine/cuda/cuda.c) */
    /* cuda_devices (engine/cuda/devices.h) */
    int (*devices)(engine_device *out, int max);
} kiln_cuda_plugin;

/* The module's side (engine/cuda/plugin.c): its table, static, never NULL. */
const kiln_cuda_plugin *kiln_cuda_plugin_get(void) __attribute__((visibility("default")));

/* The engine's side (engine/backend.c): the plugin, opened on the first call
 * (thread-safe; later calls return the same answer), or NULL with err saying
 * why: no NVIDIA driver on this machine (then nothing is opened), or the
 * module could not be loaded or is of another build. err may be NULL. */
const kiln_cuda_plugin *cuda_plugin_open(char *err, size_t errlen);

#endif
