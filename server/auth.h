/* server/auth.h: who asks, and whether they may (issue 15).
 *
 * The rule, in one place (auth_required): a server bound to loopback with no
 * users is open, as kiln always was: every request is user 0 and may do
 * everything (r->admin true). Once any user exists, or when the server is
 * bound to any other address (unless --insecure-no-auth), every route but a
 * few open ones (/healthz, GET /api/v1/openapi.json, POST and DELETE
 * /api/v1/session, POST /api/v1/tokens: they authenticate themselves) needs
 * `Authorization: Bearer TOKEN` or the dashboard's kiln_session cookie, else
 * 401 {"error":{"code":"unauthorized"}} with `WWW-Authenticate: Bearer`.
 * Static dashboard files are never guarded (they hold no data).
 *
 * Secrets: a token is "kiln_" and 43 base64url characters (32 random bytes
 * from randombytes_buf); the store keeps only its BLAKE2b-256 hash
 * (crypto_generichash), so a stolen database holds no usable token. A session
 * cookie is the same kind of secret, stored as a token of kind "session".
 * Passwords are Argon2id strings (crypto_pwhash_str) at the cost of the
 * password-ops and password-mem limits; verifying reads the cost from the
 * stored string.
 *
 * Ownership (server/lookup.c applies it): user_id and admin, filled here,
 * decide what a request sees; user 0 without admin (an unsigned request on an
 * open route) sees nothing.
 */
#ifndef KILN_SERVER_AUTH_H
#define KILN_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"        /* api_error */
#include "db/store.h"        /* store, store_owned */
#include "db/users.h"        /* store_user */
#include "server/server.h"   /* server */

struct request;

#define AUTH_COOKIE "kiln_session"
#define AUTH_TOKEN_PREFIX "kiln_"
#define AUTH_TOKEN_LEN 48                  /* "kiln_" + 43 base64url characters */
#define AUTH_HASH_HEX 64                   /* BLAKE2b-256 as hex */
#define AUTH_NAME_MAX 64
#define AUTH_PASSWORD_MIN 8
#define AUTH_PASSWORD_MAX 1024

/* The hook http.c calls once a request is routed, before its body is read:
 * fills r->user_id and r->admin from the bearer token or session cookie, or
 * leaves a pending 401 (or a 500 when the store fails) that http.c answers. */
void auth_request(struct request *r);

/* Does this server need a sign-in now (users exist, or it is bound beyond
 * loopback without --insecure-no-auth)? A store failure counts as yes. */
bool auth_required(server *srv);

/* Before binding `kiln serve`: whether host is loopback (*public_bind false)
 * and, when it is not, that users exist or insecure (--insecure-no-auth) is
 * set. Returns 0, or 2 (a usage error) after printing why to stderr. */
int auth_bind_check(const char *host, store *st, bool insecure, bool *public_bind);

/* The first admin of a server that would otherwise refuse to start (bound
 * beyond loopback, no users, no --insecure-no-auth): the container's way in
 * (docker/). Acts only when the environment names one, KILN_FIRST_ADMIN=NAME
 * (the images set it to "admin"), and the database has no users; else
 * returns 0 having done nothing. Then it adds NAME as an admin with an API
 * token: KILN_ADMIN_TOKEN when set (AUTH_ADMIN_TOKEN_MIN..AUTH_PASSWORD_MAX
 * printable ASCII characters without spaces), else a new one printed once to
 * log (stderr; only its hash is kept). The token is also NAME's password, so
 * the dashboard's sign-in takes it. Hashing uses ops and mem (the
 * password-ops and password-mem limits). Returns 0, or 2 (a bad value,
 * printed to log) or 1 (a store failure), for `kiln serve` to exit with. */
#define AUTH_ADMIN_TOKEN_MIN 32
int auth_first_admin(store *st, bool public_bind, bool insecure, uint64_t ops, uint64_t mem, FILE *log);

/* ---- secrets ------------------------------------------------------------------ */

/* The hex BLAKE2b-256 of a token or cookie value (hex: AUTH_HASH_HEX + 1 bytes). */
void auth_token_hash(const char *token, char *hex);

/* A new random token (token: AUTH_TOKEN_LEN + 1 bytes) and its hash (hex:
 * AUTH_HASH_HEX + 1). Returns 0, or -1 when libsodium cannot start. */
int auth_token_new(char *token, char *hex);

/* Hashes password with Argon2id at ops passes and mem bytes into out
 * (crypto_pwhash_STRBYTES bytes). Returns 0, or -1 with err set (out of
 * memory at that cost, or libsodium cannot start). */
int auth_password_hash(const char *password, uint64_t ops, uint64_t mem, char *out, size_t outlen,
                       char *err, size_t errlen);

/* A user name: 1..AUTH_NAME_MAX of [A-Za-z0-9._-], starting with a letter or
 * digit. A password: AUTH_PASSWORD_MIN..AUTH_PASSWORD_MAX bytes of UTF-8
 * without control characters. Return 0, or -1 with err saying what is wrong. */
int auth_name_check(const char *name, char *err, size_t errlen);
int auth_password_check(const char *password, char *err, size_t errlen);

/* The user named name whose password is password: 0 with *who filled (clear
 * it), STORE_NOT_FOUND for a wrong name or password (the same work is done
 * for an unknown name as for a wrong password, hashing at srv's cost), -1 on
 * a store failure. */
int auth_sign_in(server *srv, const char *name, const char *password, store_user *who);

/* Adds a user: checks name and password (auth_name_check,
 * auth_password_check), hashes the password at ops and mem, and inserts it.
 * The first user is always an admin (someone must be able to manage the
 * others). Returns 0 with *id (and *admin_out, may be NULL: what was
 * stored), or -1 with e: 400 invalid_field, 409 user_exists, 500. For
 * `kiln user add` and POST /api/v1/users alike. */
int auth_user_add(store *st, const char *name, const char *password, bool admin, uint64_t ops, uint64_t mem,
                  int64_t *id, bool *admin_out, api_error *e);

/* Records r's user as the owner of a row it has just made (no-op for user 0).
 * A failure is logged; the row is then seen by admins only. */
void auth_own(struct request *r, store_owned kind, int64_t id);

#endif
