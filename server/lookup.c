/* server/lookup.c: a request's job, dataset or evaluation, or its 404
 * (contract in lookup.h). */
#include "server/lookup.h"

#include <stdio.h>

#include "db/users.h"          /* store_user_get: a trial's or resumed job's owner */

enum MHD_Result lookup_not_found(request *r, const char *kind, int64_t id)
{
    char code[32];
    snprintf(code, sizeof code, "%s_not_found", kind);
    return http_error(r, MHD_HTTP_NOT_FOUND, code, "there is no %s %lld", kind, (long long)id);
}

/* May r's caller see a row owned by owner (0: nobody's), shared or not? An
 * admin (and everyone on an open server, server/auth.h) sees all; a user
 * their own and shared ones; user 0 without admin nothing. */
static bool visible_to(int64_t user_id, bool admin, int64_t owner, bool shared)
{
    return admin || (user_id > 0 && (owner == user_id || shared));
}

static bool visible(const request *r, int64_t owner, bool shared)
{
    return visible_to(r->user_id, r->admin, owner, shared);
}

int64_t lookup_owner_filter(const request *r)
{
    return r->admin ? 0 : r->user_id > 0 ? r->user_id : -1;
}

/* What a store_*_get returned, and whether r may see it: true for a row;
 * else false with *answered (a row r may not see is as missing). */
static bool found(request *r, int rc, bool seen, const char *kind, int64_t id, enum MHD_Result *answered)
{
    if (rc == 0 && seen)
        return true;
    if (rc == 0 || rc == STORE_NOT_FOUND) {
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
    store_job *row = j ? j : &own;
    int rc = store_job_get(r->srv->st, id, row);
    bool ok = found(r, rc, rc == 0 && visible(r, row->owner_id, false), "job", id, answered);
    if (rc == 0 && (!ok || !j))
        store_job_clear(row);
    return ok;
}

bool lookup_dataset(request *r, int64_t id, store_dataset *d, enum MHD_Result *answered)
{
    int rc = store_dataset_get(r->srv->st, id, d);
    bool ok = found(r, rc, rc == 0 && visible(r, d->owner_id, d->shared), "dataset", id, answered);
    if (rc == 0 && !ok)
        store_dataset_clear(d);
    return ok;
}

bool lookup_dataset_change(request *r, int64_t id, store_dataset *d, enum MHD_Result *answered)
{
    if (!lookup_dataset(r, id, d, answered))
        return false;
    if (visible(r, d->owner_id, false))
        return true;
    store_dataset_clear(d);
    *answered = http_error(r, MHD_HTTP_FORBIDDEN, "forbidden",
                           "dataset %lld is shared by another user: you may read it and train on it, "
                           "but only its owner or an admin may change it", (long long)id);
    return false;
}

/* body's "dataset_id" names a dataset that exists and user_id (admin or
 * not) may not read; *id is that id. */
static bool dataset_hidden(server *srv, int64_t user_id, bool admin, const cJSON *body, int64_t *id)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(body, "dataset_id");
    if (!cJSON_IsNumber(f) || f->valuedouble < 1 || f->valuedouble >= 9e15 ||
        f->valuedouble != (double)(int64_t)f->valuedouble)
        return false;
    *id = (int64_t)f->valuedouble;
    store_dataset d;
    if (store_dataset_get(srv->st, *id, &d) != 0)
        return false;                  /* missing or unreadable: the caller's own check answers */
    bool hidden = !visible_to(user_id, admin, d.owner_id, d.shared);
    store_dataset_clear(&d);
    return hidden;
}

bool lookup_body_dataset_hidden(request *r, const cJSON *body, int64_t *id)
{
    return dataset_hidden(r->srv, r->user_id, r->admin, body, id);
}

bool lookup_config_dataset_hidden(server *srv, int64_t owner, const cJSON *config, int64_t *id)
{
    bool admin = owner <= 0;             /* no owner: made on a server without users */
    store_user u;
    if (owner > 0 && store_user_get(srv->st, owner, &u) == 0) {
        admin = u.admin;
        store_user_clear(&u);
    }
    return dataset_hidden(srv, owner, admin, config, id);
}

bool lookup_eval(request *r, int64_t id, store_eval *e, enum MHD_Result *answered)
{
    int rc = store_eval_get(r->srv->st, id, e);
    bool ok = found(r, rc, rc == 0 && visible(r, e->owner_id, false), "evaluation", id, answered);
    if (rc == 0 && !ok)
        store_eval_clear(e);
    return ok;
}
