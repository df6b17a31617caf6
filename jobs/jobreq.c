/* jobs/jobreq.c: job requests made from other jobs (contract in jobreq.h). */
#include "jobs/jobreq.h"

#include <stdbool.h>
#include <string.h>
#include "engine/net.h"    /* net_builtin */

/* job.json's fields that describe where and how it ran rather than what was
 * asked: the request has no such fields (jobcfg.c's resolved_fields less its
 * request_fields and the rule table's). */
static const char *const resolved_only[] = {
    "id", "dataset_dir", "network_name", "input", "classes", "backend", "gpus", "gpu_count",
    "gpu", "replicas", NULL,
};

/* The request's "devices" for the resolved backend fields. */
static cJSON *request_devices(const cJSON *resolved)
{
    const cJSON *backend = cJSON_GetObjectItemCaseSensitive(resolved, "backend");
    if (!cJSON_IsString(backend) || strcmp(backend->valuestring, "cuda") != 0)
        return cJSON_CreateNumber(0);
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(resolved, "gpus");
    if (cJSON_IsArray(gpus) && cJSON_GetArraySize(gpus) > 0)
        return cJSON_Duplicate(gpus, 1);
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(resolved, "gpu_count");
    return cJSON_CreateNumber(cJSON_IsNumber(count) ? count->valuedouble : 1);
}

/* A built-in network by its name when its spec is the built-in one; else the spec. */
static cJSON *request_network(const cJSON *resolved)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(resolved, "network");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(resolved, "network_name");
    if (cJSON_IsString(name)) {
        const char *text = net_builtin(name->valuestring);
        cJSON *builtin = text ? cJSON_Parse(text) : NULL;
        bool same = builtin && cJSON_Compare(builtin, spec, true);
        cJSON_Delete(builtin);
        if (same)
            return cJSON_CreateString(name->valuestring);
    }
    return cJSON_Duplicate(spec, 1);
}

cJSON *jobreq_from_config(const cJSON *resolved, api_error *e)
{
    if (!cJSON_IsObject(resolved) || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(resolved, "network"))) {
        api_fail(e, 400, "invalid_field", "not a job's resolved config (job.json)");
        return NULL;
    }
    cJSON *req = cJSON_Duplicate(resolved, 1);
    cJSON *devices = req ? request_devices(resolved) : NULL;
    cJSON *network = devices ? request_network(resolved) : NULL;
    if (!network) {
        cJSON_Delete(req);
        cJSON_Delete(devices);
        api_fail(e, 500, "internal", "out of memory");
        return NULL;
    }
    for (size_t i = 0; resolved_only[i]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(req, resolved_only[i]);
    cJSON_ReplaceItemInObjectCaseSensitive(req, "network", network);
    cJSON_AddItemToObject(req, "devices", devices);
    return req;
}

int jobreq_merge(cJSON *req, const cJSON *overrides, api_error *e)
{
    if (!cJSON_IsObject(overrides))
        return api_fail(e, 400, "invalid_field", "the overrides must be a JSON object");
    for (const cJSON *o = overrides->child; o; o = o->next) {
        if (cJSON_IsNull(o)) {
            cJSON_DeleteItemFromObjectCaseSensitive(req, o->string);
            continue;
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(req, o->string);
        if (cJSON_IsObject(o) && cJSON_IsObject(have)) {
            if (jobreq_merge(have, o, e) != 0)
                return -1;
            continue;
        }
        /* An object merged into nothing keeps its nulls out as well. */
        cJSON *copy = cJSON_IsObject(o) ? cJSON_CreateObject() : cJSON_Duplicate(o, 1);
        if (!copy || (cJSON_IsObject(o) && jobreq_merge(copy, o, e) != 0)) {
            cJSON_Delete(copy);
            return copy ? -1 : api_fail(e, 500, "internal", "out of memory");
        }
        if (have)
            cJSON_ReplaceItemInObjectCaseSensitive(req, o->string, copy);
        else
            cJSON_AddItemToObject(req, o->string, copy);
    }
    return 0;
}

int jobreq_set(cJSON *req, const char *path, const cJSON *value, api_error *e)
{
    char key[256];
    cJSON *at = req;
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || n >= sizeof key)
            return api_fail(e, 400, "invalid_field", "\"%.128s\" is not a field path (names "
                            "joined by dots, such as solver.lr)", path);
        memcpy(key, p, n);
        key[n] = '\0';
        cJSON *have = cJSON_GetObjectItemCaseSensitive(at, key);
        if (!dot) {
            cJSON *copy = cJSON_Duplicate(value, 1);
            if (!copy)
                return api_fail(e, 500, "internal", "out of memory");
            if (have)
                cJSON_ReplaceItemInObjectCaseSensitive(at, key, copy);
            else
                cJSON_AddItemToObject(at, key, copy);
            return 0;
        }
        if (have && !cJSON_IsObject(have)) {
            if (!strcmp(key, "network"))
                return api_fail(e, 400, "invalid_field", "%.128s: the network is the built-in "
                                "\"%s\", not a spec whose fields can be set", path,
                                cJSON_IsString(have) ? have->valuestring : "?");
            cJSON_DeleteItemFromObjectCaseSensitive(at, key);
            have = NULL;
        }
        if (!have && !(have = cJSON_AddObjectToObject(at, key)))
            return api_fail(e, 500, "internal", "out of memory");
        at = have;
        p = dot + 1;
    }
}
