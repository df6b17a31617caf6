/* engine/backend.c: the backends compiled into this binary, and the loading of
 * the CUDA one, a plugin opened on first use (engine/cuda/plugin.h says why).
 *
 * Where the plugin is looked for, in order: the folder of the running
 * executable (/proc/self/exe: build/server/ in a build tree, where the build
 * puts libkiln_cuda.so beside kiln, and wherever the two are copied
 * together); then the folder the build wrote it to (KILN_CUDA_PLUGIN_BUILD_DIR,
 * for the other programs of the build tree: tests, benchmarks). The project
 * has no install rules, so there is no install lib dir to try. Nothing is
 * opened on a machine without an NVIDIA driver. */
#include "engine/backend.h"

#include <string.h>

#include "base/err.h"   /* set_err */
#include "engine/net.h"

#ifdef KILN_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/cuda/plugin.h"   /* kiln_cuda_plugin, cuda_plugin_open */

/* Defined in a program linked with the backend's objects (tests/gpu/): then
 * that copy is used and nothing is opened. NULL in every other program. */
extern const kiln_cuda_plugin *kiln_cuda_plugin_get(void) __attribute__((weak));

/* Files whose presence says an NVIDIA driver is loaded: its /proc entry and
 * control device (containers given a GPU see both), and the driver library
 * WSL 2 maps into its Linux guests, which have neither. */
static const char *const nvidia_driver_files[] = {
    "/proc/driver/nvidia/version",
    "/dev/nvidiactl",
    "/usr/lib/wsl/lib/libcuda.so.1",
};

static struct {
    const kiln_cuda_plugin *plugin;     /* NULL: not available, for the reason in err */
    char err[768];
} cuda;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static bool nvidia_driver_present(void)
{
    for (size_t i = 0; i < sizeof nvidia_driver_files / sizeof nvidia_driver_files[0]; i++)
        if (access(nvidia_driver_files[i], F_OK) == 0)
            return true;
    return false;
}

/* The plugin's table from its kiln_cuda_plugin_get (in what `where` names),
 * checked against this build's interface; NULL with err set when it is of
 * another build. */
static const kiln_cuda_plugin *plugin_from(const kiln_cuda_plugin *(*get)(void),
                                           const char *where, char *err, size_t errlen)
{
    const kiln_cuda_plugin *p = get ? get() : NULL;
    if (!get)
        set_err(err, errlen, "%s has no %s (not a kiln CUDA plugin)", where,
                KILN_CUDA_PLUGIN_SYMBOL);
    else if (!p || p->abi != KILN_CUDA_PLUGIN_ABI || p->backend_size != sizeof(backend) ||
             p->device_size != sizeof(engine_device) || !p->backend || !p->devices)
        set_err(err, errlen, "%s is from another build of kiln (interface %d, this kiln's %d): "
                "put the %s built with this kiln beside it", where, p ? p->abi : -1,
                KILN_CUDA_PLUGIN_ABI, KILN_CUDA_PLUGIN_FILE);
    else
        return p;
    return NULL;
}

/* The folders to look in (the file comment), at most 2; returns how many. */
static int plugin_dirs(char dirs[2][PATH_MAX])
{
    int n = 0;
    ssize_t len = readlink("/proc/self/exe", dirs[0], PATH_MAX - 1);
    char *slash = NULL;
    if (len > 0) {
        dirs[0][len] = '\0';
        slash = strrchr(dirs[0], '/');
    }
    if (slash) {
        *slash = '\0';
        n++;
    }
#ifdef KILN_CUDA_PLUGIN_BUILD_DIR
    if (n == 0 || strcmp(dirs[0], KILN_CUDA_PLUGIN_BUILD_DIR) != 0)
        snprintf(dirs[n++], PATH_MAX, "%s", KILN_CUDA_PLUGIN_BUILD_DIR);
#endif
    return n;
}

/* Opens the first module found in dirs. Returns its table, or NULL with why
 * set: none found, or the first one found could not be loaded or is of
 * another build (a broken module is not passed over for an older one). */
static const kiln_cuda_plugin *plugin_find(char dirs[2][PATH_MAX], int nd, char *why,
                                           size_t whylen)
{
    char path[PATH_MAX + 32];
    for (int i = 0; i < nd; i++) {
        int w = snprintf(path, sizeof path, "%s/%s", dirs[i], KILN_CUDA_PLUGIN_FILE);
        if (w < 0 || (size_t)w >= sizeof path || access(path, F_OK) != 0)
            continue;
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            set_err(why, whylen, "%s", e ? e : path);
            return NULL;
        }
        const kiln_cuda_plugin *(*get)(void);
        *(void **)&get = dlsym(lib, KILN_CUDA_PLUGIN_SYMBOL);
        const kiln_cuda_plugin *p = plugin_from(get, path, why, whylen);
        if (!p)
            dlclose(lib);
        return p;
    }
    if (nd == 0)
        set_err(why, whylen, "the running executable's folder is unknown");
    else
        set_err(why, whylen, "not found in %s%s%s", dirs[0], nd > 1 ? " nor in " : "",
                nd > 1 ? dirs[1] : "");
    return NULL;
}

static void plugin_load(void)
{
    if (kiln_cuda_plugin_get) {             /* linked in: no module to open */
        cuda.plugin = plugin_from(kiln_cuda_plugin_get, "this program", cuda.err,
                                  sizeof cuda.err);
        return;
    }
    if (!nvidia_driver_present()) {
        set_err(cuda.err, sizeof cuda.err, "no NVIDIA driver on this machine (none of %s, %s, "
                "%s exists): the cuda backend needs a GPU", nvidia_driver_files[0],
                nvidia_driver_files[1], nvidia_driver_files[2]);
        return;
    }
    char dirs[2][PATH_MAX], why[512];
    cuda.plugin = plugin_find(dirs, plugin_dirs(dirs), why, sizeof why);
    if (!cuda.plugin) {
        set_err(cuda.err, sizeof cuda.err, "CUDA backend built but %s could not be loaded: %s",
                KILN_CUDA_PLUGIN_FILE, why);
        /* engine_devices has no error to return, and GPUs that vanish without a
         * word are worse than a line on stderr (the server's log). */
        fprintf(stderr, "kiln: %s; GPUs are not used\n", cuda.err);
    }
}

const kiln_cuda_plugin *cuda_plugin_open(char *err, size_t errlen)
{
    pthread_once(&cuda_once, plugin_load);
    if (!cuda.plugin)
        set_err(err, errlen, "%s", cuda.err);
    return cuda.plugin;
}
#endif /* KILN_HAVE_CUDA */

/* Compiled in, in order of preference; NULL-terminated. The CUDA backend is
 * listed whenever it is built, loaded or not (GET /api/v1/info's "backends"). */
#ifdef KILN_HAVE_CUDA
static const char *const backend_names[] = { "cpu", "cuda", NULL };
#else
static const char *const backend_names[] = { "cpu", NULL };
#endif

const backend *backend_for(backend_kind kind, char *err, size_t errlen)
{
    if (kind == BACKEND_CPU)
        return &cpu_backend;
#ifdef KILN_HAVE_CUDA
    if (kind == BACKEND_CUDA) {
        const kiln_cuda_plugin *p = cuda_plugin_open(err, errlen);
        return p ? p->backend : NULL;
    }
#endif
    set_err(err, errlen, "backend \"%s\" is not compiled into this kiln", backend_kind_name(kind));
    return NULL;
}

const char *const *engine_backends(void)
{
    return backend_names;
}
