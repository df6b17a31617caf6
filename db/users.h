/* db/users.h: users and their tokens in the store (issue 15).
 *
 * A user has a unique name (compared without case), an Argon2id password
 * hash (the crypto_pwhash_str string; hashing is server/auth.c's) and an
 * admin flag. A token row keeps only a hash of its secret (server/auth.c
 * makes both), the user it belongs to, its kind ("api": a bearer token;
 * "session": a dashboard sign-in carried by the kiln_session cookie), a label,
 * and when it was made, expires (NULL: never), was last used and was revoked.
 * Removing a user removes its tokens; what it owned stays, without an owner.
 *
 * Conventions as in db/store.h: 0 on success, STORE_NOT_FOUND, -1 on a
 * database error (logged to stderr, or in err where there is one). Strings in
 * returned structs are owned by the struct; free with the *_clear function.
 */
#ifndef KILN_DB_USERS_H
#define KILN_DB_USERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/store.h"

#define STORE_EXISTS 2                  /* store_user_insert: the name is taken */

typedef struct store_user {
    int64_t id;
    char *name;
    char *password_hash;   /* crypto_pwhash_str's string */
    bool admin;
    char *created_at;
} store_user;

/* Inserts a user; *id receives its id. STORE_EXISTS when a user of that name
 * (in any case) exists. */
int store_user_insert(store *s, const char *name, const char *password_hash, bool admin, int64_t *id,
                      char *err, size_t errlen);
int store_user_get(store *s, int64_t id, store_user *out);
int store_user_find(store *s, const char *name, store_user *out);     /* by name, any case */
/* Every user, oldest first (free with store_user_list_free). */
int store_user_list(store *s, store_user **out, size_t *n);
/* Removes a user and its tokens; its datasets, jobs and evaluations lose their owner. */
int store_user_delete(store *s, int64_t id);
/* How many users and how many of them are admins. */
int store_user_count(store *s, int64_t *users, int64_t *admins);
void store_user_clear(store_user *u);
void store_user_list_free(store_user *list, size_t n);

typedef struct store_token {
    int64_t id, user_id;
    char *user_name;
    char *kind;            /* "api" or "session" */
    char *name;            /* the label given at creation ("" when none) */
    char *created_at;
    char *expires_at;      /* NULL: never */
    char *last_used_at;    /* NULL: never used */
    char *revoked_at;      /* NULL: not revoked */
} store_token;

/* Inserts a token of kind ("api"/"session") for user_id holding hash (the
 * secret's hash, hex); it expires lifetime_s seconds from now (0: never).
 * *id receives its id. */
int store_token_insert(store *s, int64_t user_id, const char *kind, const char *name, const char *hash,
                       int64_t lifetime_s, int64_t *id, char *err, size_t errlen);

/* The user holding the live token of kind whose hash is hash: 0 with *who
 * filled (clear it) and *token_id, or STORE_NOT_FOUND when there is none,
 * it is revoked or it has expired. Stamps its last use (at most once a
 * minute, so that a busy client does not write on every request). */
int store_token_check(store *s, const char *hash, const char *kind, store_user *who, int64_t *token_id);

int store_token_get(store *s, int64_t id, store_token *out);
/* The tokens of kind of user_id (0: every user's), newest first. */
int store_token_list(store *s, int64_t user_id, const char *kind, store_token **out, size_t *n);
/* Revokes a token (STORE_NOT_FOUND: no such token, or revoked already). */
int store_token_revoke(store *s, int64_t id);
/* Deletes sessions that have expired or were revoked (they are never shown). */
int store_token_purge_sessions(store *s);
void store_token_clear(store_token *t);
void store_token_list_free(store_token *list, size_t n);

#endif
