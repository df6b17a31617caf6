/* server/auth_api.c: the routes of sign-in, tokens and users (contract in
 * auth_api.h; the rules are server/auth.h's). */
#include "server/auth_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "db/users.h"          /* store_user, store_token */
#include "server/auth.h"
#include "server/http.h"
#include "server/render.h"     /* render_list */

#define TOKEN_NAME_MAX 64
#define TOKEN_DAYS_MAX 3650

/* ---- reading a body ------------------------------------------------------------- */

/* Every field of doc is one of fields (NULL-terminated); else a 400 naming
 * the unknown one, listed in `takes`. */
static bool known_fields(request *r, const cJSON *doc, const char *const *fields, const char *takes,
                         enum MHD_Result *answered)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, doc) {
        bool known = false;
        for (int i = 0; fields[i]; i++)
            known = known || !strcmp(f->string, fields[i]);
        if (!known) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "unknown_field",
                                   "unknown field \"%.64s\": %s", f->string, takes);
            return false;
        }
    }
    return true;
}

/* doc's string field key: true with *out (NULL when absent or null), or false
 * after a 400 when it is another type. */
static bool opt_string(request *r, const cJSON *doc, const char *key, const char **out,
                       enum MHD_Result *answered)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(doc, key);
    *out = NULL;
    if (!f || cJSON_IsNull(f))
        return true;
    if (!cJSON_IsString(f)) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field", "%s must be a string", key);
        return false;
    }
    *out = f->valuestring;
    return true;
}

static enum MHD_Result bad_credentials(request *r)
{
    return http_error(r, MHD_HTTP_UNAUTHORIZED, "invalid_credentials", "wrong user name or password");
}

static enum MHD_Result admins_only(request *r)
{
    return http_error(r, MHD_HTTP_FORBIDDEN, "forbidden", "only an admin may manage users");
}

/* ---- representations ------------------------------------------------------------ */

static cJSON *render_user(const store_user *u)
{
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddNumberToObject(o, "id", (double)u->id) && cJSON_AddStringToObject(o, "name", u->name) &&
        cJSON_AddBoolToObject(o, "admin", u->admin) &&
        cJSON_AddStringToObject(o, "created_at", u->created_at ? u->created_at : ""))
        return o;
    cJSON_Delete(o);
    return NULL;
}

static bool add_str_or_null(cJSON *o, const char *key, const char *v)
{
    return v ? cJSON_AddStringToObject(o, key, v) != NULL : cJSON_AddNullToObject(o, key) != NULL;
}

/* A token without its secret (which the server does not have). */
static cJSON *render_token(const store_token *t)
{
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddNumberToObject(o, "id", (double)t->id) && cJSON_AddStringToObject(o, "name", t->name) &&
        cJSON_AddNumberToObject(o, "user_id", (double)t->user_id) &&
        cJSON_AddStringToObject(o, "user", t->user_name) && add_str_or_null(o, "created_at", t->created_at) &&
        add_str_or_null(o, "expires_at", t->expires_at) && add_str_or_null(o, "last_used_at", t->last_used_at) &&
        add_str_or_null(o, "revoked_at", t->revoked_at) &&
        cJSON_AddBoolToObject(o, "revoked", t->revoked_at != NULL))
        return o;
    cJSON_Delete(o);
    return NULL;
}

/* A JSON answer with a Set-Cookie header (http_json has none). */
static enum MHD_Result json_with_cookie(request *r, unsigned status, cJSON *body, const char *cookie)
{
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!text)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    return http_queue(r, status, resp);
}

/* ---- session ----------------------------------------------------------------------- */

int auth_session_get(request *r)
{
    cJSON *o = cJSON_CreateObject();
    bool required = auth_required(r->srv);
    bool ok = o && cJSON_AddBoolToObject(o, "auth_required", required);
    if (ok && r->user_id > 0) {
        store_user u;
        int rc = store_user_get(r->srv->st, r->user_id, &u);
        if (rc != 0) {
            cJSON_Delete(o);
            return http_store_error(r, "reading the user");
        }
        cJSON *uo = render_user(&u);
        store_user_clear(&u);
        ok = uo && cJSON_AddItemToObject(o, "user", uo);
        if (!ok)
            cJSON_Delete(uo);
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "user") != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        o = NULL;
    }
    return http_json(r, MHD_HTTP_OK, o);
}

/* Reads {"user","password"} (and the extra fields the caller allows) and signs
 * in: 0 with *who, or -1 after answering (400, 401, 500). */
static int sign_in_body(request *r, const cJSON *doc, store_user *who, enum MHD_Result *answered)
{
    const char *name, *password;
    if (!opt_string(r, doc, "user", &name, answered) || !opt_string(r, doc, "password", &password, answered))
        return -1;
    if (!name || !password) {
        *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field", "user and password are required");
        return -1;
    }
    int rc = auth_sign_in(r->srv, name, password, who);
    if (rc == STORE_NOT_FOUND)
        *answered = bad_credentials(r);
    else if (rc != 0)
        *answered = http_store_error(r, "checking the password");
    return rc == 0 ? 0 : -1;
}

int auth_session_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    static const char *const fields[] = { "user", "password", NULL };
    store_user who;
    int rc = known_fields(r, doc, fields, "signing in takes user and password", &answered)
                 ? sign_in_body(r, doc, &who, &answered) : -1;
    cJSON_Delete(doc);
    if (rc != 0)
        return answered;

    store_token_purge_sessions(r->srv->st);       /* ended ones; failure only leaves them longer */
    char token[AUTH_TOKEN_LEN + 1], hex[AUTH_HASH_HEX + 1], err[256];
    int64_t id;
    uint64_t lifetime = r->srv->limits.session_lifetime_s;
    if (auth_token_new(token, hex) != 0 ||
        store_token_insert(r->srv->st, who.id, "session", "dashboard", hex, (int64_t)lifetime, &id, err,
                           sizeof err) != 0) {
        store_user_clear(&who);
        return http_store_error(r, "starting the session");
    }
    char cookie[AUTH_TOKEN_LEN + SERVE_BASE_PATH_MAX + 128];    /* Path: --base-path, or / */
    snprintf(cookie, sizeof cookie, AUTH_COOKIE "=%s; Path=%s/; HttpOnly; SameSite=Strict; Max-Age=%llu", token,
             r->srv->base_path, (unsigned long long)lifetime);
    sodium_memzero(token, sizeof token);
    cJSON *o = cJSON_CreateObject();
    cJSON *uo = render_user(&who);
    store_user_clear(&who);
    if (!o || !uo || !cJSON_AddItemToObject(o, "user", uo)) {
        cJSON_Delete(uo);
        cJSON_Delete(o);
        o = NULL;
    } else if (!cJSON_AddBoolToObject(o, "auth_required", true)) {
        cJSON_Delete(o);
        o = NULL;
    }
    answered = json_with_cookie(r, MHD_HTTP_OK, o, cookie);
    sodium_memzero(cookie, sizeof cookie);
    return answered;
}

int auth_session_delete(request *r)
{
    const char *cookie = MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, AUTH_COOKIE);
    if (cookie && *cookie && strlen(cookie) <= 256) {
        char hex[AUTH_HASH_HEX + 1];
        auth_token_hash(cookie, hex);
        store_user who;
        int64_t id;
        if (store_token_check(r->srv->st, hex, "session", &who, &id) == 0) {
            store_user_clear(&who);
            if (store_token_revoke(r->srv->st, id) < 0)
                return http_store_error(r, "ending the session");
        }
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    char gone[SERVE_BASE_PATH_MAX + 96];
    snprintf(gone, sizeof gone, AUTH_COOKIE "=; Path=%s/; HttpOnly; SameSite=Strict; Max-Age=0", r->srv->base_path);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, gone);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}

/* ---- tokens ------------------------------------------------------------------------- */

/* "name" and "expires_in_days" of a token request: true, or false after a 400. */
static bool token_options(request *r, const cJSON *doc, const char **name, int64_t *days, enum MHD_Result *answered)
{
    if (!opt_string(r, doc, "name", name, answered))
        return false;
    if (*name) {
        size_t n = strlen(*name);
        bool ok = n <= TOKEN_NAME_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)(*name)[i] >= 0x20 && (*name)[i] != 0x7f;
        if (!ok) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                                   "name must be at most %d bytes without control characters", TOKEN_NAME_MAX);
            return false;
        }
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(doc, "expires_in_days");
    *days = 0;
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsNumber(f) || f->valuedouble < 1 || f->valuedouble > TOKEN_DAYS_MAX ||
            f->valuedouble != (double)(int64_t)f->valuedouble) {
            *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                                   "expires_in_days must be a whole number of days from 1 to %d (or null: never)",
                                   TOKEN_DAYS_MAX);
            return false;
        }
        *days = (int64_t)f->valuedouble;
    }
    return true;
}

int auth_token_create(request *r)
{
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    static const char *const fields[] = { "user", "password", "name", "expires_in_days", NULL };
    const char *name = NULL;
    int64_t days = 0;
    store_user who;
    memset(&who, 0, sizeof who);
    bool with_password = cJSON_GetObjectItemCaseSensitive(doc, "user") ||
                         cJSON_GetObjectItemCaseSensitive(doc, "password");
    int rc = -1;
    if (!known_fields(r, doc, fields, "a token request takes user, password, name and expires_in_days",
                      &answered) || !token_options(r, doc, &name, &days, &answered))
        rc = -1;
    else if (with_password)
        rc = sign_in_body(r, doc, &who, &answered);
    else if (r->user_id > 0)
        rc = store_user_get(r->srv->st, r->user_id, &who) == 0 ? 0 : (answered = http_store_error(r, "reading the user"), -1);
    else
        answered = http_error(r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                              "a token request needs user and password (or a signed-in caller)");
    char label[TOKEN_NAME_MAX + 1];
    snprintf(label, sizeof label, "%s", name ? name : "");
    cJSON_Delete(doc);
    if (rc != 0)
        return answered;

    char token[AUTH_TOKEN_LEN + 1], hex[AUTH_HASH_HEX + 1], err[256];
    int64_t id;
    if (auth_token_new(token, hex) != 0 ||
        store_token_insert(r->srv->st, who.id, "api", label, hex, days * 86400, &id, err, sizeof err) != 0) {
        store_user_clear(&who);
        return http_store_error(r, "making the token");
    }
    store_user_clear(&who);
    store_token t;
    if (store_token_get(r->srv->st, id, &t) != 0) {
        sodium_memzero(token, sizeof token);
        return http_store_error(r, "reading the token");
    }
    cJSON *o = render_token(&t);
    store_token_clear(&t);
    if (o && !cJSON_AddStringToObject(o, "token", token)) {
        cJSON_Delete(o);
        o = NULL;
    }
    sodium_memzero(token, sizeof token);
    return http_json(r, MHD_HTTP_CREATED, o);
}

int auth_tokens_list(request *r)
{
    store_token *list = NULL;
    size_t n = 0;
    if (store_token_list(r->srv->st, r->admin ? 0 : r->user_id, "api", &list, &n) != 0)
        return http_store_error(r, "listing tokens");
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++) {
        cJSON *o = render_token(&list[i]);
        if (!o || !cJSON_AddItemToArray(items, o)) {
            cJSON_Delete(o);
            cJSON_Delete(items);
            items = NULL;
        }
    }
    store_token_list_free(list, n);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

int auth_token_delete(request *r)
{
    store_token t;
    int rc = store_token_get(r->srv->st, r->id, &t);
    if (rc < 0)
        return http_store_error(r, "reading the token");
    bool mine = rc == 0 && !strcmp(t.kind, "api") && (r->admin || (r->user_id > 0 && t.user_id == r->user_id));
    if (rc == 0)
        store_token_clear(&t);
    if (!mine)
        return http_error(r, MHD_HTTP_NOT_FOUND, "token_not_found", "there is no token %lld", (long long)r->id);
    if (store_token_revoke(r->srv->st, r->id) < 0)     /* revoked already: done all the same */
        return http_store_error(r, "revoking the token");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}

/* ---- users (admins) ---------------------------------------------------------------------- */

int auth_users_list(request *r)
{
    if (!r->admin)
        return admins_only(r);
    store_user *list = NULL;
    size_t n = 0;
    if (store_user_list(r->srv->st, &list, &n) != 0)
        return http_store_error(r, "listing users");
    cJSON *items = cJSON_CreateArray();
    for (size_t i = 0; items && i < n; i++) {
        cJSON *o = render_user(&list[i]);
        if (!o || !cJSON_AddItemToArray(items, o)) {
            cJSON_Delete(o);
            cJSON_Delete(items);
            items = NULL;
        }
    }
    store_user_list_free(list, n);
    return http_json(r, MHD_HTTP_OK, render_list(items));
}

int auth_user_create(request *r)
{
    if (!r->admin)
        return admins_only(r);
    enum MHD_Result answered;
    cJSON *doc = http_body_json(r, &answered);
    if (!doc)
        return answered;
    static const char *const fields[] = { "name", "password", "admin", NULL };
    const char *name = NULL, *password = NULL;
    const cJSON *admin = cJSON_GetObjectItemCaseSensitive(doc, "admin");
    int64_t id = 0;
    api_error e;
    int rc = -1;
    if (!known_fields(r, doc, fields, "a user takes name, password and admin", &answered) ||
        !opt_string(r, doc, "name", &name, &answered) || !opt_string(r, doc, "password", &password, &answered))
        rc = -1;
    else if (!name || !password)
        answered = http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field", "name and password are required");
    else if (admin && !cJSON_IsBool(admin))
        answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field", "admin must be true or false");
    else if (auth_user_add(r->srv->st, name, password, cJSON_IsTrue(admin), r->srv->limits.password_ops,
                           r->srv->limits.password_mem, &id, NULL, &e) != 0)
        answered = http_api_error(r, &e, "the user could not be added");
    else
        rc = 0;
    cJSON_Delete(doc);
    if (rc != 0)
        return answered;
    store_user u;
    if (store_user_get(r->srv->st, id, &u) != 0)
        return http_store_error(r, "reading the new user");
    cJSON *o = render_user(&u);
    store_user_clear(&u);
    return http_json(r, MHD_HTTP_CREATED, o);
}

int auth_user_delete(request *r)
{
    if (!r->admin)
        return admins_only(r);
    store_user u;
    int rc = store_user_get(r->srv->st, r->id, &u);
    if (rc == STORE_NOT_FOUND)
        return http_error(r, MHD_HTTP_NOT_FOUND, "user_not_found", "there is no user %lld", (long long)r->id);
    if (rc != 0)
        return http_store_error(r, "reading the user");
    bool admin = u.admin;
    store_user_clear(&u);
    int64_t users = 0, admins = 0;
    if (store_user_count(r->srv->st, &users, &admins) != 0)
        return http_store_error(r, "counting users");
    if (admin && admins == 1 && users > 1)
        return http_error(r, MHD_HTTP_CONFLICT, "last_admin",
                          "user %lld is the last admin; make another admin first (kiln user add NAME --admin)",
                          (long long)r->id);
    rc = store_user_delete(r->srv->st, r->id);
    if (rc == STORE_NOT_FOUND)
        return http_error(r, MHD_HTTP_NOT_FOUND, "user_not_found", "there is no user %lld", (long long)r->id);
    if (rc != 0)
        return http_store_error(r, "removing the user");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    return http_queue(r, MHD_HTTP_NO_CONTENT, resp);
}
