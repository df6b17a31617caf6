/* engine/net_builtin.c: the built-in network specs (the JSON files in
 * engine/networks/, compiled in by cmake/embed_specs.cmake) and
 * net_validate, which checks a spec without building anything
 * (engine/net.h). */
#include "engine/net.h"

#include <pthread.h>
#include <string.h>

#include "engine/spec.h"      /* spec_parse */

/* Generated from the specs in engine/networks/ by cmake/embed_specs.cmake. */
extern const struct kiln_builtin_spec {
    const char *name;
    const char *json;
} kiln_builtin_specs[];

/* ---- built-in specs -------------------------------------------------------- */

const char *net_builtin(const char *name)
{
    for (int i = 0; name && kiln_builtin_specs[i].name; i++)
        if (strcmp(kiln_builtin_specs[i].name, name) == 0)
            return kiln_builtin_specs[i].json;
    return NULL;
}

#define NET_BUILTIN_MAX 64
static const char *builtin_names[NET_BUILTIN_MAX + 1];
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_names_init(void)
{
    int n = 0;
    for (int i = 0; kiln_builtin_specs[i].name && n < NET_BUILTIN_MAX; i++)
        builtin_names[n++] = kiln_builtin_specs[i].name;
    builtin_names[n] = NULL;
}

const char *const *net_builtin_names(void)
{
    pthread_once(&builtin_once, builtin_names_init);
    return builtin_names;
}

/* ---- validation ------------------------------------------------------------ */

int net_validate(const cJSON *spec, net_shape in, int classes, char *err, size_t errlen)
{
    net_spec s;
    if (spec_parse(spec, in, classes, &s, err, errlen) < 0)
        return -1;
    spec_free(&s);
    return 0;
}
