/* engine/backend.c: the backends compiled into this binary. */
#include "engine/backend.h"

#include <string.h>

#include "engine/net.h"

/* In order of preference; NULL-terminated. The CUDA table joins here when it
 * exists (issue 5); until then a CUDA build only reports devices. */
static const backend *const backends[] = { &cpu_backend, NULL };
static const char *const backend_names[] = { "cpu", NULL };

_Static_assert(sizeof backends / sizeof backends[0] ==
               sizeof backend_names / sizeof backend_names[0], "one name per backend");

const backend *backend_find(const char *name)
{
    for (int i = 0; backends[i]; i++)
        if (name && strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

const char *const *engine_backends(void)
{
    return backend_names;
}
