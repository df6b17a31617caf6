/* db/users.c: users and tokens in the store (contract in users.h).
 *
 * Each function takes the store's lock (store_db_lock), prepares its
 * statement with bound parameters, runs it and finalizes it before
 * unlocking. These run per request at most (a token check), so statements
 * are not cached as store.c's are.
 */
#include "db/users.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "base/err.h"        /* set_err */
#include "db/store_db.h"     /* store_db_lock, store_db_unlock */

#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"
#define USER_COLS "id, name, password_hash, admin, created_at"
#define TOKEN_COLS "t.id, t.user_id, u.name, t.kind, t.name, t.created_at, t.expires_at, " \
                   "t.last_used_at, t.revoked_at"
/* A token that can be used: not revoked, not expired (times compare as text:
 * both are RFC 3339 UTC with seconds). */
#define TOKEN_LIVE_SQL "t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > " NOW_SQL ")"

static bool dup_col(sqlite3_stmt *q, int i, char **dst)
{
    *dst = NULL;
    if (sqlite3_column_type(q, i) == SQLITE_NULL)
        return true;
    const unsigned char *t = sqlite3_column_text(q, i);
    *dst = strdup(t ? (const char *)t : "");
    return *dst != NULL;
}

/* ---- rows ------------------------------------------------------------------ */

static int read_user(sqlite3_stmt *q, void *elem)
{
    store_user *u = elem;
    memset(u, 0, sizeof *u);
    u->id = sqlite3_column_int64(q, 0);
    u->admin = sqlite3_column_int(q, 3) != 0;
    bool ok = dup_col(q, 1, &u->name);
    ok = dup_col(q, 2, &u->password_hash) && ok;
    ok = dup_col(q, 4, &u->created_at) && ok;
    if (!ok) {
        store_user_clear(u);
        return -1;
    }
    return 0;
}

static int read_token(sqlite3_stmt *q, void *elem)
{
    store_token *t = elem;
    memset(t, 0, sizeof *t);
    t->id = sqlite3_column_int64(q, 0);
    t->user_id = sqlite3_column_int64(q, 1);
    bool ok = dup_col(q, 2, &t->user_name);
    ok = dup_col(q, 3, &t->kind) && ok;
    ok = dup_col(q, 4, &t->name) && ok;
    ok = dup_col(q, 5, &t->created_at) && ok;
    ok = dup_col(q, 6, &t->expires_at) && ok;
    ok = dup_col(q, 7, &t->last_used_at) && ok;
    ok = dup_col(q, 8, &t->revoked_at) && ok;
    if (!ok) {
        store_token_clear(t);
        return -1;
    }
    return 0;
}

static void clear_user(void *elem) { store_user_clear(elem); }
static void clear_token(void *elem) { store_token_clear(elem); }

typedef struct rows {
    size_t size;
    int (*read)(sqlite3_stmt *q, void *elem);
    void (*clear)(void *elem);
} rows;

static const rows user_rows = { sizeof(store_user), read_user, clear_user };
static const rows token_rows = { sizeof(store_token), read_token, clear_token };

/* Steps q (bound) to its first row, read into out: 0, STORE_NOT_FOUND or -1.
 * Finalizes q. */
static int one(sqlite3 *db, sqlite3_stmt *q, const rows *k, const char *what, void *out)
{
    int ret = -1;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        ret = k->read(q, out);
    else if (rc == SQLITE_DONE)
        ret = STORE_NOT_FOUND;
    else
        store_db_log(db, what);
    sqlite3_finalize(q);
    return ret;
}

/* Every row of q (bound) into a new array: 0 with *out and *n, or -1.
 * Finalizes q. */
static int all(sqlite3 *db, sqlite3_stmt *q, const rows *k, const char *what, void **out, size_t *n)
{
    char *arr = NULL;
    size_t len = 0, cap = 0;
    int rc;
    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            char *na = realloc(arr, ncap * k->size);
            if (!na)
                break;
            arr = na;
            cap = ncap;
        }
        if (k->read(q, arr + len * k->size) != 0)
            break;
        len++;
    }
    if (rc != SQLITE_DONE) {
        store_db_log(db, what);
        sqlite3_finalize(q);
        for (size_t i = 0; i < len; i++)
            k->clear(arr + i * k->size);
        free(arr);
        return -1;
    }
    sqlite3_finalize(q);
    *out = arr;
    *n = len;
    return 0;
}

/* Steps a change (bound): 0, STORE_NOT_FOUND when no row changed, -1. Finalizes q. */
static int change(sqlite3 *db, sqlite3_stmt *q, int bind_rc, const char *what)
{
    int ret = -1;
    if (bind_rc == SQLITE_OK && sqlite3_step(q) == SQLITE_DONE)
        ret = sqlite3_changes(db) > 0 ? 0 : STORE_NOT_FOUND;
    else
        store_db_log(db, what);
    sqlite3_finalize(q);
    return ret;
}

/* ---- users ------------------------------------------------------------------ */

int store_user_insert(store *s, const char *name, const char *password_hash, bool admin, int64_t *id,
                      char *err, size_t errlen)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "INSERT INTO users (name, password_hash, admin, created_at) "
                               "VALUES (?1, ?2, ?3, " NOW_SQL ")", -1, &q, NULL) != SQLITE_OK) {
        set_err(err, errlen, "inserting user: %s", sqlite3_errmsg(db));
        goto out;
    }
    int b = sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 2, password_hash, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_int(q, 3, admin ? 1 : 0);
    int rc = b == SQLITE_OK ? sqlite3_step(q) : b;
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
        set_err(err, errlen, "a user named \"%s\" exists already", name);
        ret = STORE_EXISTS;
    } else if (rc != SQLITE_DONE) {
        set_err(err, errlen, "inserting user: %s", sqlite3_errmsg(db));
    } else {
        *id = sqlite3_last_insert_rowid(db);
        ret = 0;
    }
out:
    sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

int store_user_get(store *s, int64_t id, store_user *out)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT " USER_COLS " FROM users WHERE id = ?1", "reading user");
    if (q)
        ret = sqlite3_bind_int64(q, 1, id) == SQLITE_OK ? one(db, q, &user_rows, "reading user", out)
                                                         : (sqlite3_finalize(q), -1);
    store_db_unlock(s);
    return ret;
}

int store_user_find(store *s, const char *name, store_user *out)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT " USER_COLS " FROM users WHERE name = ?1", "reading user");
    if (q)
        ret = sqlite3_bind_text(q, 1, name, -1, SQLITE_TRANSIENT) == SQLITE_OK
                  ? one(db, q, &user_rows, "reading user", out)
                  : (sqlite3_finalize(q), -1);
    store_db_unlock(s);
    return ret;
}

int store_user_list(store *s, store_user **out, size_t *n)
{
    void *arr = NULL;
    *out = NULL;
    *n = 0;
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT " USER_COLS " FROM users ORDER BY id", "listing users");
    if (q)
        ret = all(db, q, &user_rows, "listing users", &arr, n);
    store_db_unlock(s);
    *out = arr;
    return ret;
}

int store_user_delete(store *s, int64_t id)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "DELETE FROM users WHERE id = ?1", "deleting user");
    if (q)
        ret = change(db, q, sqlite3_bind_int64(q, 1, id), "deleting user");
    store_db_unlock(s);
    return ret;
}

int store_user_count(store *s, int64_t *users, int64_t *admins)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT COUNT(*), COALESCE(SUM(admin), 0) FROM users", "counting users");
    if (q) {
        if (sqlite3_step(q) == SQLITE_ROW) {
            *users = sqlite3_column_int64(q, 0);
            if (admins)
                *admins = sqlite3_column_int64(q, 1);
            ret = 0;
        } else {
            store_db_log(db, "counting users");
        }
        sqlite3_finalize(q);
    }
    store_db_unlock(s);
    return ret;
}

void store_user_clear(store_user *u)
{
    if (!u)
        return;
    free(u->name);
    if (u->password_hash)
        memset(u->password_hash, 0, strlen(u->password_hash));
    free(u->password_hash);
    free(u->created_at);
    memset(u, 0, sizeof *u);
}

void store_user_list_free(store_user *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_user_clear(&list[i]);
    free(list);
}

/* ---- tokens ----------------------------------------------------------------- */

int store_token_insert(store *s, int64_t user_id, const char *kind, const char *name, const char *hash,
                       int64_t lifetime_s, int64_t *id, char *err, size_t errlen)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db,
            "INSERT INTO tokens (user_id, kind, name, hash, created_at, expires_at) VALUES "
            "(?1, ?2, ?3, ?4, " NOW_SQL ", CASE WHEN ?5 > 0 THEN "
            "strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '+' || ?5 || ' seconds') END)",
            -1, &q, NULL) != SQLITE_OK) {
        set_err(err, errlen, "inserting token: %s", sqlite3_errmsg(db));
        goto out;
    }
    int b = sqlite3_bind_int64(q, 1, user_id);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 2, kind, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 3, name ? name : "", -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 4, hash, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_int64(q, 5, lifetime_s > 0 ? lifetime_s : 0);
    if (b != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE) {
        set_err(err, errlen, "inserting token: %s", sqlite3_errmsg(db));
        goto out;
    }
    *id = sqlite3_last_insert_rowid(db);
    ret = 0;
out:
    sqlite3_finalize(q);
    store_db_unlock(s);
    return ret;
}

int store_token_check(store *s, const char *hash, const char *kind, store_user *who, int64_t *token_id)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT u.id, u.name, u.password_hash, u.admin, u.created_at, t.id "
                               "FROM tokens t JOIN users u ON u.id = t.user_id "
                               "WHERE t.hash = ?1 AND t.kind = ?2 AND " TOKEN_LIVE_SQL, "checking token");
    if (!q)
        goto out;
    int b = sqlite3_bind_text(q, 1, hash, -1, SQLITE_TRANSIENT);
    if (b == SQLITE_OK)
        b = sqlite3_bind_text(q, 2, kind, -1, SQLITE_TRANSIENT);
    int rc = b == SQLITE_OK ? sqlite3_step(q) : b;
    if (rc == SQLITE_ROW) {
        *token_id = sqlite3_column_int64(q, 5);
        ret = read_user(q, who);
    } else if (rc == SQLITE_DONE) {
        ret = STORE_NOT_FOUND;
    } else {
        store_db_log(db, "checking token");
    }
    sqlite3_finalize(q);
    if (ret != 0)
        goto out;
    q = store_db_prep(db, "UPDATE tokens SET last_used_at = " NOW_SQL " WHERE id = ?1 AND "
                 "(last_used_at IS NULL OR last_used_at < strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-60 seconds'))",
             "stamping token use");
    if (q && change(db, q, sqlite3_bind_int64(q, 1, *token_id), "stamping token use") < 0)
        fprintf(stderr, "kiln: store: token %lld: its last use was not recorded\n", (long long)*token_id);
out:
    store_db_unlock(s);
    return ret;
}

int store_token_get(store *s, int64_t id, store_token *out)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT " TOKEN_COLS " FROM tokens t JOIN users u ON u.id = t.user_id "
                               "WHERE t.id = ?1", "reading token");
    if (q)
        ret = sqlite3_bind_int64(q, 1, id) == SQLITE_OK ? one(db, q, &token_rows, "reading token", out)
                                                         : (sqlite3_finalize(q), -1);
    store_db_unlock(s);
    return ret;
}

int store_token_list(store *s, int64_t user_id, const char *kind, store_token **out, size_t *n)
{
    void *arr = NULL;
    *out = NULL;
    *n = 0;
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "SELECT " TOKEN_COLS " FROM tokens t JOIN users u ON u.id = t.user_id "
                               "WHERE (?1 = 0 OR t.user_id = ?1) AND t.kind = ?2 ORDER BY t.id DESC",
                           "listing tokens");
    if (q) {
        int b = sqlite3_bind_int64(q, 1, user_id);
        if (b == SQLITE_OK)
            b = sqlite3_bind_text(q, 2, kind, -1, SQLITE_TRANSIENT);
        if (b == SQLITE_OK)
            ret = all(db, q, &token_rows, "listing tokens", &arr, n);
        else
            sqlite3_finalize(q);
    }
    store_db_unlock(s);
    *out = arr;
    return ret;
}

int store_token_revoke(store *s, int64_t id)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "UPDATE tokens SET revoked_at = " NOW_SQL " WHERE id = ?1 AND revoked_at IS NULL",
                           "revoking token");
    if (q)
        ret = change(db, q, sqlite3_bind_int64(q, 1, id), "revoking token");
    store_db_unlock(s);
    return ret;
}

int store_token_purge_sessions(store *s)
{
    sqlite3 *db = store_db_lock(s);
    int ret = -1;
    sqlite3_stmt *q = store_db_prep(db, "DELETE FROM tokens WHERE kind = 'session' AND (revoked_at IS NOT NULL OR "
                               "(expires_at IS NOT NULL AND expires_at <= " NOW_SQL "))", "purging sessions");
    if (q) {
        ret = change(db, q, SQLITE_OK, "purging sessions");
        if (ret == STORE_NOT_FOUND)
            ret = 0;
    }
    store_db_unlock(s);
    return ret;
}

void store_token_clear(store_token *t)
{
    if (!t)
        return;
    free(t->user_name);
    free(t->kind);
    free(t->name);
    free(t->created_at);
    free(t->expires_at);
    free(t->last_used_at);
    free(t->revoked_at);
    memset(t, 0, sizeof *t);
}

void store_token_list_free(store_token *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        store_token_clear(&list[i]);
    free(list);
}
