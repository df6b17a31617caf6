/* tests/unit/test_users.c: users, tokens and owners in the store (db/users.h,
 * db/store.h's *_for lists) and the secrets of server/auth.h, on temporary
 * files. Argon2id runs at libsodium's minimum cost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>
#include <sqlite3.h>

#include "db/store.h"
#include "db/users.h"
#include "server/auth.h"

typedef struct fixture {
    char dir[64];
    char path[128];
    store *s;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-users-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/kiln.db", f->dir);
    char err[256] = "";
    f->s = store_open(f->path, err, sizeof err);
    if (!f->s) {
        fprintf(stderr, "store_open: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

/* SQL on a second connection (what another process would do). */
static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg);
    sqlite3_close(db);
}

static int64_t add_user(store *s, const char *name, bool admin)
{
    int64_t id = 0;
    bool stored = false;
    api_error e;
    if (auth_user_add(s, name, "correct horse", admin, crypto_pwhash_OPSLIMIT_MIN, crypto_pwhash_MEMLIMIT_MIN, &id,
                      &stored, &e) != 0)
        fail_msg("auth_user_add %s: %d %s", name, e.status, e.message);
    return id;
}

static void test_users(void **state)
{
    fixture *f = *state;
    int64_t users = -1, admins = -1;
    assert_int_equal(store_user_count(f->s, &users, &admins), 0);
    assert_int_equal(users, 0);

    int64_t alice = add_user(f->s, "alice", false);
    int64_t bob = add_user(f->s, "bob", false);
    store_user u;
    assert_int_equal(store_user_get(f->s, alice, &u), 0);
    assert_true(u.admin);                              /* the first user is an admin */
    assert_string_equal(u.name, "alice");
    assert_int_equal(crypto_pwhash_str_verify(u.password_hash, "correct horse", 13), 0);
    assert_int_not_equal(crypto_pwhash_str_verify(u.password_hash, "wrong horse", 11), 0);
    store_user_clear(&u);
    assert_int_equal(store_user_find(f->s, "BOB", &u), 0);      /* names compare without case */
    assert_int_equal(u.id, bob);
    assert_false(u.admin);
    store_user_clear(&u);

    /* The same name in another case is taken; bad names and passwords are 400s. */
    int64_t id;
    api_error e;
    assert_int_equal(auth_user_add(f->s, "Alice", "another one", false, 1, 8192, &id, NULL, &e), -1);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "user_exists");
    assert_int_equal(auth_user_add(f->s, "-x", "another one", false, 1, 8192, &id, NULL, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(auth_user_add(f->s, "carol", "short", false, 1, 8192, &id, NULL, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(auth_user_add(f->s, "carol", "tab\there!", false, 1, 8192, &id, NULL, &e), -1);

    assert_int_equal(store_user_count(f->s, &users, &admins), 0);
    assert_int_equal(users, 2);
    assert_int_equal(admins, 1);
    store_user *list;
    size_t n;
    assert_int_equal(store_user_list(f->s, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, alice);
    store_user_list_free(list, n);
}

static void test_tokens(void **state)
{
    fixture *f = *state;
    int64_t alice = add_user(f->s, "alice", true);
    int64_t bob = add_user(f->s, "bob", false);
    char tok[AUTH_TOKEN_LEN + 1], hex[AUTH_HASH_HEX + 1], tok2[AUTH_TOKEN_LEN + 1], hex2[AUTH_HASH_HEX + 1];
    assert_int_equal(auth_token_new(tok, hex), 0);
    assert_int_equal(auth_token_new(tok2, hex2), 0);
    assert_int_equal(strlen(tok), AUTH_TOKEN_LEN);
    assert_memory_equal(tok, "kiln_", 5);
    assert_string_not_equal(tok, tok2);
    char again[AUTH_HASH_HEX + 1];
    auth_token_hash(tok, again);
    assert_string_equal(again, hex);
    assert_int_equal(strlen(hex), AUTH_HASH_HEX);

    char err[256];
    int64_t t1, t2, t3;
    assert_int_equal(store_token_insert(f->s, alice, "api", "laptop", hex, 0, &t1, err, sizeof err), 0);
    assert_int_equal(store_token_insert(f->s, bob, "api", "ci", hex2, 86400, &t2, err, sizeof err), 0);
    char hex3[AUTH_HASH_HEX + 1];
    assert_int_equal(auth_token_new(tok, hex3), 0);
    assert_int_equal(store_token_insert(f->s, bob, "session", "dashboard", hex3, 3600, &t3, err, sizeof err), 0);

    store_user who;
    int64_t tid;
    assert_int_equal(store_token_check(f->s, hex, "api", &who, &tid), 0);
    assert_int_equal(who.id, alice);
    assert_int_equal(tid, t1);
    store_user_clear(&who);
    assert_int_equal(store_token_check(f->s, hex3, "api", &who, &tid), STORE_NOT_FOUND);    /* kinds apart */
    assert_int_equal(store_token_check(f->s, hex3, "session", &who, &tid), 0);
    store_user_clear(&who);

    store_token t;
    assert_int_equal(store_token_get(f->s, t1, &t), 0);
    assert_null(t.expires_at);
    assert_non_null(t.last_used_at);               /* the check stamped it */
    store_token_clear(&t);
    assert_int_equal(store_token_get(f->s, t2, &t), 0);
    assert_non_null(t.expires_at);
    assert_null(t.last_used_at);
    store_token_clear(&t);

    /* Lists: per user, per kind. */
    store_token *list;
    size_t n;
    assert_int_equal(store_token_list(f->s, bob, "api", &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, t2);
    assert_string_equal(list[0].user_name, "bob");
    store_token_list_free(list, n);
    assert_int_equal(store_token_list(f->s, 0, "api", &list, &n), 0);
    assert_int_equal(n, 2);
    store_token_list_free(list, n);

    /* Expired (moved into the past by another connection) and revoked tokens stop. */
    raw_exec(f->path, "UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE kind = 'api' AND user_id = 2");
    assert_int_equal(store_token_check(f->s, hex2, "api", &who, &tid), STORE_NOT_FOUND);
    assert_int_equal(store_token_revoke(f->s, t1), 0);
    assert_int_equal(store_token_revoke(f->s, t1), STORE_NOT_FOUND);
    assert_int_equal(store_token_check(f->s, hex, "api", &who, &tid), STORE_NOT_FOUND);

    /* Ended sessions are purged; removing a user removes its tokens. */
    assert_int_equal(store_token_revoke(f->s, t3), 0);
    assert_int_equal(store_token_purge_sessions(f->s), 0);
    assert_int_equal(store_token_get(f->s, t3, &t), STORE_NOT_FOUND);
    assert_int_equal(store_user_delete(f->s, bob), 0);
    assert_int_equal(store_token_get(f->s, t2, &t), STORE_NOT_FOUND);
    assert_int_equal(store_token_get(f->s, t1, &t), 0);
    store_token_clear(&t);
}

static void test_owners(void **state)
{
    fixture *f = *state;
    int64_t alice = add_user(f->s, "alice", true);
    int64_t bob = add_user(f->s, "bob", false);
    char err[256];
    int64_t da, db, dn;
    assert_int_equal(store_dataset_insert(f->s, "a", &da, err, sizeof err), 0);
    assert_int_equal(store_dataset_insert(f->s, "b", &db, err, sizeof err), 0);
    assert_int_equal(store_dataset_insert(f->s, "nobody's", &dn, err, sizeof err), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_DATASET, da, alice), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_DATASET, db, bob), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_DATASET, 999, bob), STORE_NOT_FOUND);

    store_dataset *list;
    size_t n;
    assert_int_equal(store_dataset_list_for(f->s, bob, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].id, db);
    assert_int_equal(list[0].owner_id, bob);
    assert_false(list[0].shared);
    store_dataset_list_free(list, n);
    assert_int_equal(store_dataset_set_shared(f->s, da, true), 0);
    assert_int_equal(store_dataset_list_for(f->s, bob, &list, &n), 0);
    assert_int_equal(n, 2);                          /* newest first: b, then the shared a */
    assert_int_equal(list[1].id, da);
    assert_true(list[1].shared);
    store_dataset_list_free(list, n);
    assert_int_equal(store_dataset_list_for(f->s, 0, &list, &n), 0);
    assert_int_equal(n, 3);                          /* 0: everything */
    store_dataset_list_free(list, n);

    int64_t ja, jb;
    assert_int_equal(store_job_insert(f->s, da, "lenet", "{}", 1, &ja, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, da, "lenet", "{}", 1, &jb, err, sizeof err), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_JOB, ja, alice), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_JOB, jb, bob), 0);
    store_job *jobs;
    assert_int_equal(store_job_list_for(f->s, alice, &jobs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(jobs[0].id, ja);
    store_job_list_free(jobs, n);
    int64_t e1, e2;
    assert_int_equal(store_eval_insert(f->s, jb, da, "val", "final", 1, &e1, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, jb, da, "val", "final", 1, &e2, err, sizeof err), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_EVAL, e1, bob), 0);
    store_eval *evals;
    assert_int_equal(store_eval_list_by_job_for(f->s, jb, bob, &evals, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(evals[0].owner_id, bob);
    store_eval_list_free(evals, n);
    assert_int_equal(store_eval_list_by_job_for(f->s, jb, 0, &evals, &n), 0);
    assert_int_equal(n, 2);
    store_eval_list_free(evals, n);

    /* A removed user's things stay, without an owner. */
    assert_int_equal(store_user_delete(f->s, bob), 0);
    store_job j;
    assert_int_equal(store_job_get(f->s, jb, &j), 0);
    assert_int_equal(j.owner_id, 0);
    store_job_clear(&j);
    store_dataset d;
    assert_int_equal(store_dataset_get(f->s, db, &d), 0);
    assert_int_equal(d.owner_id, 0);
    store_dataset_clear(&d);
}

/* auth_first_admin: only when asked (KILN_FIRST_ADMIN), bound beyond
 * loopback without --insecure-no-auth, and the store has no users; the token
 * from KILN_ADMIN_TOKEN (checked) or a new one printed once to the log; the
 * token signs in as the API token and as the password. */
static void test_first_admin(void **state)
{
    fixture *f = *state;
    const char *given = "kiln_container-admin-token-0123456789abcdef";
    char log_text[1024] = "";
    FILE *log = fmemopen(log_text, sizeof log_text, "w");
    assert_non_null(log);
    int64_t users = -1;

    unsetenv("KILN_FIRST_ADMIN");
    setenv("KILN_ADMIN_TOKEN", given, 1);
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 0);     /* not asked for */
    setenv("KILN_FIRST_ADMIN", "root", 1);
    assert_int_equal(auth_first_admin(f->s, false, false, 1, 8192, log), 0);    /* loopback */
    assert_int_equal(auth_first_admin(f->s, true, true, 1, 8192, log), 0);      /* --insecure-no-auth */
    assert_int_equal(store_user_count(f->s, &users, NULL), 0);
    assert_int_equal(users, 0);

    setenv("KILN_ADMIN_TOKEN", "too short", 1);
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 2);
    setenv("KILN_ADMIN_TOKEN", "kiln_a token with spaces in it, long enough though", 1);
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 2);
    assert_int_equal(store_user_count(f->s, &users, NULL), 0);
    assert_int_equal(users, 0);

    setenv("KILN_ADMIN_TOKEN", given, 1);
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 0);
    fflush(log);
    assert_null(strstr(log_text, given));                  /* a given token is never logged */
    char hex[AUTH_HASH_HEX + 1];
    auth_token_hash(given, hex);
    store_user who;
    int64_t token_id = 0;
    assert_int_equal(store_token_check(f->s, hex, "api", &who, &token_id), 0);
    assert_string_equal(who.name, "root");
    assert_true(who.admin);
    assert_int_equal(crypto_pwhash_str_verify(who.password_hash, given, strlen(given)), 0);
    store_user_clear(&who);

    /* Once a user exists it does nothing, whatever the environment says. */
    setenv("KILN_FIRST_ADMIN", "other", 1);
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 0);
    assert_int_equal(store_user_count(f->s, &users, NULL), 0);
    assert_int_equal(users, 1);
    fclose(log);
    unsetenv("KILN_FIRST_ADMIN");
    unsetenv("KILN_ADMIN_TOKEN");
}

/* Without KILN_ADMIN_TOKEN a new token is made and printed once: the printed
 * one is the one that works. */
static void test_first_admin_made(void **state)
{
    fixture *f = *state;
    char log_text[1024] = "";
    FILE *log = fmemopen(log_text, sizeof log_text, "w");
    assert_non_null(log);
    setenv("KILN_FIRST_ADMIN", "admin", 1);
    unsetenv("KILN_ADMIN_TOKEN");
    assert_int_equal(auth_first_admin(f->s, true, false, 1, 8192, log), 0);
    fclose(log);
    const char *at = strstr(log_text, AUTH_TOKEN_PREFIX);
    assert_non_null(at);
    char token[AUTH_TOKEN_LEN + 1];
    snprintf(token, sizeof token, "%s", at);
    assert_int_equal(strlen(token), AUTH_TOKEN_LEN);
    assert_null(strstr(at + 1, AUTH_TOKEN_PREFIX));        /* printed once */
    char hex[AUTH_HASH_HEX + 1];
    auth_token_hash(token, hex);
    store_user who;
    int64_t token_id = 0;
    assert_int_equal(store_token_check(f->s, hex, "api", &who, &token_id), 0);
    assert_string_equal(who.name, "admin");
    assert_true(who.admin);
    store_user_clear(&who);
    token[AUTH_TOKEN_LEN - 1] ^= 1;                         /* another token does not sign in */
    auth_token_hash(token, hex);
    assert_int_equal(store_token_check(f->s, hex, "api", &who, &token_id), STORE_NOT_FOUND);
    unsetenv("KILN_FIRST_ADMIN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_admin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_admin_made, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
