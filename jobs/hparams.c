/* jobs/hparams.c: a job's hyper-parameters as dotted names (contract in hparams.h). */
#include "jobs/hparams.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Top-level fields that are not hyper-parameters: the job's identity and
 * bookkeeping, the network spec (its name is "network_name"), where files
 * are, and the loader's threads (they change how fast batches come, never
 * what is in them). Arrays (input, classes, device lists) are left out by
 * kind. */
static const char *const not_hparams[] = {
    "id", "name", "description", "notes", "tags", "network", "dataset_dir", "loader_threads",
};

static bool skipped(const char *key, int depth)
{
    if (depth == 0)
        for (size_t i = 0; i < sizeof not_hparams / sizeof not_hparams[0]; i++)
            if (!strcmp(key, not_hparams[i]))
                return true;
    size_t n = strlen(key);
    return (n >= 4 && !strcmp(key + n - 4, "_dir")) || (n >= 5 && !strcmp(key + n - 5, "_path"));
}

/* Adds o's leaves under prefix to out. 0, or -1 when out of memory. */
static int flatten(const cJSON *o, const char *prefix, int depth, cJSON *out)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        if (!v->string || skipped(v->string, depth))
            continue;
        char name[256];
        if (snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", v->string) >= (int)sizeof name)
            continue;                       /* no config key is this long */
        cJSON *leaf = NULL;
        if (cJSON_IsObject(v)) {
            if (depth < 4 && flatten(v, name, depth + 1, out) != 0)
                return -1;
            continue;
        }
        if (cJSON_IsNumber(v))
            leaf = cJSON_CreateNumber(v->valuedouble);
        else if (cJSON_IsString(v))
            leaf = cJSON_CreateString(v->valuestring);
        else if (cJSON_IsBool(v))
            leaf = cJSON_CreateBool(cJSON_IsTrue(v));
        else
            continue;                       /* arrays, nulls */
        if (!leaf || !cJSON_AddItemToObject(out, name, leaf)) {
            cJSON_Delete(leaf);
            return -1;
        }
    }
    return 0;
}

cJSON *hparams_from_config(const cJSON *resolved)
{
    cJSON *out = cJSON_CreateObject();
    if (out && cJSON_IsObject(resolved) && flatten(resolved, "", 0, out) != 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}
