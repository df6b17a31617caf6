/* tests/unit/jobcfg_util.h: a resolved job.json for tests that need one
 * (the scheduler's fake jobs, job.json's device fields), with some fields
 * replaced. */
#ifndef KILN_TESTS_JOBCFG_UTIL_H
#define KILN_TESTS_JOBCFG_UTIL_H

#include <cjson/cJSON.h>

/* What jobcfg_to_json writes for a small CPU job, every optional field left
 * to its default. */
static const char JOB_JSON_BASE[] =
    "{\"id\": 1, \"dataset_id\": 1, \"dataset_dir\": \"/nonexistent\", \"network_name\": \"fake\","
    " \"network\": {\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]},"
    " \"input\": [1, 2, 2], \"classes\": [\"a\", \"b\"], \"backend\": \"cpu\"}";

/* JOB_JSON_BASE with the fields of `fields` (a JSON object's text) put in
 * place of its own, as a new cJSON object; NULL when either does not parse. */
static inline cJSON *job_json_with(const char *fields)
{
    cJSON *base = cJSON_Parse(JOB_JSON_BASE), *f = cJSON_Parse(fields);
    if (!base || !cJSON_IsObject(f)) {
        cJSON_Delete(base);
        cJSON_Delete(f);
        return NULL;
    }
    for (cJSON *c = f->child; c; c = c->next) {
        if (!strcmp(c->string, "backend"))
            cJSON_DeleteItemFromObjectCaseSensitive(base, "backend");
        cJSON_DeleteItemFromObjectCaseSensitive(base, c->string);
        cJSON_AddItemToObject(base, c->string, cJSON_Duplicate(c, 1));
    }
    cJSON_Delete(f);
    return base;
}

/* The same as text (owned by the caller; cJSON_free it). */
static inline char *job_json_text(const char *fields)
{
    cJSON *j = job_json_with(fields);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return text;
}

#endif
