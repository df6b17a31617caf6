/* engine/backend.c: the backends compiled into this binary. */
#include "engine/backend.h"

#include <string.h>

#include "engine/net.h"

/* In order of preference; NULL-terminated. */
#ifdef KILN_HAVE_CUDA
#include "engine/cuda/cuda.h"
static const backend *const backends[] = { &cpu_backend, &cuda_backend, NULL };
static const char *const backend_names[] = { "cpu", "cuda", NULL };
#else
static const backend *const backends[] = { &cpu_backend, NULL };
static const char *const backend_names[] = { "cpu", NULL };
#endif

_Static_assert(sizeof backends / sizeof backends[0] ==
               sizeof backend_names / sizeof backend_names[0], "one name per backend");

const backend *backend_for(backend_kind kind)
{
    for (int i = 0; backends[i]; i++)
        if (strcmp(backends[i]->name, backend_kind_name(kind)) == 0)
            return backends[i];
    return NULL;
}

const char *const *engine_backends(void)
{
    return backend_names;
}
