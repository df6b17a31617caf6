/* server/lookup.c: a request's job, dataset or evaluation, or its 404
 * (contract in lookup.h). */
#include "server/lookup.h"

#include <stdio.h>

enum MHD_Result lookup_not_found(request *r, const char *kind, int64_t id)
{
    char code[32];
    snprintf(code, sizeof code, "%s_not_found", kind);
    return http_error(r, MHD_HTTP_NOT_FOUND, code, "there is no %s %lld", kind, (long long)id);
}

/* What a store_*_get returned: true for a row; else false with *answered. */
static bool found(request *r, int rc, const char *kind, int64_t id, enum MHD_Result *answered)
{
    if (rc == 0)
        return true;
    if (rc == STORE_NOT_FOUND) {
        *answered = lookup_not_found(r, kind, id);
    } else {
        char what[32];
        snprintf(what, sizeof what, "reading the %s", kind);
        *answered = http_store_error(r, what);
    }
    return false;
}

bool lookup_job(request *r, int64_t id, store_job *j, enum MHD_Result *answered)
{
    store_job own;
    bool ok = found(r, store_job_get(r->srv->st, id, j ? j : &own), "job", id, answered);
    if (ok && !j)
        store_job_clear(&own);
    return ok;
}

bool lookup_dataset(request *r, int64_t id, store_dataset *d, enum MHD_Result *answered)
{
    return found(r, store_dataset_get(r->srv->st, id, d), "dataset", id, answered);
}

bool lookup_eval(request *r, int64_t id, store_eval *e, enum MHD_Result *answered)
{
    return found(r, store_eval_get(r->srv->st, id, e), "evaluation", id, answered);
}
