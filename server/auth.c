/* server/auth.c: who asks, and whether they may (contract in auth.h). */
#include "server/auth.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <sodium.h>

#include "base/err.h"        /* set_err, api_fail */
#include "server/http.h"     /* request, http_header */

_Static_assert(crypto_pwhash_OPSLIMIT_MIN == 1 && crypto_pwhash_MEMLIMIT_MIN == 8192,
               "the password-ops and password-mem limits' minimums are libsodium's");
_Static_assert(crypto_generichash_BYTES * 2 == AUTH_HASH_HEX, "a token's hash is BLAKE2b-256");

/* The routes that take no sign-in: they hold nothing private, or check a
 * password themselves. */
static const struct {
    const char *method, *pattern;
} open_routes[] = {
    { "GET", "/healthz" },
    { "GET", "/api/v1/openapi.json" },
    { "POST", "/api/v1/session" },
    { "DELETE", "/api/v1/session" },
    { "POST", "/api/v1/tokens" },
};

static bool open_route(const route *rt)
{
    for (size_t i = 0; i < sizeof open_routes / sizeof open_routes[0]; i++)
        if (!strcmp(rt->method, open_routes[i].method) && !strcmp(rt->pattern, open_routes[i].pattern))
            return true;
    return false;
}

bool auth_required(server *srv)
{
    if (srv->bind_public && !srv->insecure_no_auth)
        return true;
    int64_t users = 1;
    if (store_user_count(srv->st, &users, NULL) != 0)
        return true;
    return users > 0;
}

/* "Bearer TOKEN" (the scheme in any case): TOKEN, or NULL. */
static const char *bearer(const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer", 6) != 0 ||
        (authorization[6] != ' ' && authorization[6] != '\t'))
        return NULL;
    const char *t = authorization + 7;
    while (*t == ' ' || *t == '\t')
        t++;
    return *t ? t : NULL;
}

/* The user of a presented secret: 0 (r filled), STORE_NOT_FOUND, -1. */
static int identify(request *r, const char *secret, const char *kind)
{
    if (strlen(secret) > 256)
        return STORE_NOT_FOUND;
    char hex[AUTH_HASH_HEX + 1];
    auth_token_hash(secret, hex);
    store_user who;
    int64_t token_id;
    int rc = store_token_check(r->srv->st, hex, kind, &who, &token_id);
    if (rc == 0) {
        r->user_id = who.id;
        r->admin = who.admin;
        store_user_clear(&who);
    }
    return rc;
}

void auth_request(request *r)
{
    r->user_id = 0;
    r->admin = false;
    const char *token = bearer(http_header(r, MHD_HTTP_HEADER_AUTHORIZATION));
    const char *cookie = MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, AUTH_COOKIE);
    int rc = STORE_NOT_FOUND;
    if (token)
        rc = identify(r, token, "api");
    else if (cookie && *cookie)
        rc = identify(r, cookie, "session");
    if (rc == 0)
        return;
    if (rc < 0) {
        api_fail(&r->pending, MHD_HTTP_INTERNAL_SERVER_ERROR, "store_error",
                 "the database failed while checking the sign-in; see the server log");
        return;
    }
    if (open_route(r->rt))
        return;                                   /* user 0, not admin: it checks for itself */
    if (!auth_required(r->srv)) {
        r->admin = true;                          /* open: loopback and no users */
        return;
    }
    if (token)
        api_fail(&r->pending, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                 "the bearer token is not valid: unknown, revoked or expired; get a new one "
                 "(POST /api/v1/tokens or kiln token add)");
    else if (cookie && *cookie)
        api_fail(&r->pending, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                 "the session has ended (signed out or expired); sign in again");
    else
        api_fail(&r->pending, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                 "this server needs a sign-in: send Authorization: Bearer TOKEN (POST /api/v1/tokens "
                 "or kiln token add gives one), or sign in on the dashboard");
}

/* ---- binding --------------------------------------------------------------------- */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

int auth_bind_check(const char *host, store *st, bool insecure, bool *public_bind)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    *public_bind = true;
    if (getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        *public_bind = false;
        for (struct addrinfo *a = res; a; a = a->ai_next)   /* every address it names is loopback */
            *public_bind = *public_bind || !is_loopback(a->ai_addr);
        freeaddrinfo(res);
    }
    if (!*public_bind || insecure)
        return 0;
    int64_t users = 0;
    if (store_user_count(st, &users, NULL) != 0) {
        fprintf(stderr, "kiln serve: cannot count the users in the database\n");
        return 1;
    }
    if (users > 0)
        return 0;
    fprintf(stderr,
            "kiln serve: refusing to listen on %s, which is not loopback, with no users: anyone who can\n"
            "reach the port could use the API. Add a user first (kiln user add NAME --admin --data DIR),\n"
            "or pass --insecure-no-auth to serve without sign-in anyway.\n", host);
    return 2;
}

/* ---- secrets ----------------------------------------------------------------------- */

void auth_token_hash(const char *token, char *hex)
{
    unsigned char h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof h, (const unsigned char *)token, strlen(token), NULL, 0);
    sodium_bin2hex(hex, AUTH_HASH_HEX + 1, h, sizeof h);
}

int auth_token_new(char *token, char *hex)
{
    if (sodium_init() < 0)
        return -1;
    unsigned char raw[32];
    randombytes_buf(raw, sizeof raw);
    memcpy(token, AUTH_TOKEN_PREFIX, sizeof AUTH_TOKEN_PREFIX - 1);
    sodium_bin2base64(token + sizeof AUTH_TOKEN_PREFIX - 1, AUTH_TOKEN_LEN + 1 - (sizeof AUTH_TOKEN_PREFIX - 1),
                      raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(raw, sizeof raw);
    auth_token_hash(token, hex);
    return 0;
}

_Static_assert(sizeof AUTH_TOKEN_PREFIX - 1 + 43 == AUTH_TOKEN_LEN, "32 bytes are 43 base64url characters");

int auth_password_hash(const char *password, uint64_t ops, uint64_t mem, char *out, size_t outlen,
                       char *err, size_t errlen)
{
    if (outlen < crypto_pwhash_STRBYTES)
        return set_err(err, errlen, "internal: the hash buffer is too small");
    if (sodium_init() < 0)
        return set_err(err, errlen, "libsodium cannot start");
    if (crypto_pwhash_str(out, password, strlen(password), ops, (size_t)mem) != 0)
        return set_err(err, errlen, "hashing the password failed (out of memory at password-mem=%llu bytes?)",
                       (unsigned long long)mem);
    return 0;
}

int auth_name_check(const char *name, char *err, size_t errlen)
{
    size_t n = name ? strlen(name) : 0;
    bool ok = n >= 1 && n <= AUTH_NAME_MAX &&
              ((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z') ||
               (name[0] >= '0' && name[0] <= '9'));
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
             c == '_' || c == '-';
    }
    if (!ok)
        return set_err(err, errlen, "a user name is 1 to %d letters, digits, '.', '_' or '-', starting with "
                       "a letter or digit", AUTH_NAME_MAX);
    return 0;
}

int auth_password_check(const char *password, char *err, size_t errlen)
{
    size_t n = password ? strlen(password) : 0;
    if (n < AUTH_PASSWORD_MIN || n > AUTH_PASSWORD_MAX)
        return set_err(err, errlen, "a password is %d to %d bytes long", AUTH_PASSWORD_MIN, AUTH_PASSWORD_MAX);
    if (!http_utf8_valid(password, n, NULL))
        return set_err(err, errlen, "a password must be UTF-8");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)password[i] < 0x20 || password[i] == 0x7f)
            return set_err(err, errlen, "a password may not hold control characters");
    return 0;
}

int auth_sign_in(server *srv, const char *name, const char *password, store_user *who)
{
    if (sodium_init() < 0)
        return -1;
    int rc = name && *name && strlen(name) <= AUTH_NAME_MAX ? store_user_find(srv->st, name, who) : STORE_NOT_FOUND;
    if (rc < 0)
        return -1;
    size_t n = password ? strlen(password) : 0;
    if (rc == STORE_NOT_FOUND) {
        /* As much work as a verify, so that a wrong name takes as long as a wrong password. */
        char dummy[crypto_pwhash_STRBYTES];
        if (n <= AUTH_PASSWORD_MAX && crypto_pwhash_str(dummy, password ? password : "", n, srv->limits.password_ops,
                                                        (size_t)srv->limits.password_mem) != 0)
            fprintf(stderr, "kiln: sign-in: hashing failed (out of memory at the password-mem limit?)\n");
        return STORE_NOT_FOUND;
    }
    if (n > AUTH_PASSWORD_MAX || crypto_pwhash_str_verify(who->password_hash, password ? password : "", n) != 0) {
        store_user_clear(who);
        return STORE_NOT_FOUND;
    }
    return 0;
}

int auth_user_add(store *st, const char *name, const char *password, bool admin, uint64_t ops, uint64_t mem,
                  int64_t *id, bool *admin_out, api_error *e)
{
    char err[256];
    if (auth_name_check(name, err, sizeof err) != 0 || auth_password_check(password, err, sizeof err) != 0)
        return api_fail(e, 400, "invalid_field", "%s", err);
    int64_t users = 0;
    if (store_user_count(st, &users, NULL) != 0)
        return api_fail(e, 500, "store_error", "the database failed while counting users; see the log");
    admin = admin || users == 0;
    char hash[crypto_pwhash_STRBYTES];
    if (auth_password_hash(password, ops, mem, hash, sizeof hash, err, sizeof err) != 0)
        return api_fail(e, 500, "internal_error", "%s", err);
    int rc = store_user_insert(st, name, hash, admin, id, err, sizeof err);
    sodium_memzero(hash, sizeof hash);
    if (rc == STORE_EXISTS)
        return api_fail(e, 409, "user_exists", "%s", err);
    if (rc != 0)
        return api_fail(e, 500, "store_error", "%s", err);
    if (admin_out)
        *admin_out = admin;
    return 0;
}

/* A token given in KILN_ADMIN_TOKEN: long enough to be a secret, and plain
 * enough to be a password and a header value. */
static int admin_token_check(const char *t, char *err, size_t errlen)
{
    size_t n = strlen(t);
    if (n < AUTH_ADMIN_TOKEN_MIN || n > AUTH_PASSWORD_MAX)
        return set_err(err, errlen, "KILN_ADMIN_TOKEN must be %d to %d characters, not %zu", AUTH_ADMIN_TOKEN_MIN,
                       AUTH_PASSWORD_MAX, n);
    for (size_t i = 0; i < n; i++)
        if (t[i] <= ' ' || t[i] > '~')
            return set_err(err, errlen, "KILN_ADMIN_TOKEN may hold printable ASCII characters only, no spaces");
    return 0;
}

int auth_first_admin(store *st, bool public_bind, bool insecure, uint64_t ops, uint64_t mem, FILE *log)
{
    const char *name = getenv("KILN_FIRST_ADMIN");
    const char *given = getenv("KILN_ADMIN_TOKEN");
    if (!public_bind || insecure || !name || !*name)
        return 0;
    int64_t users = 0;
    if (store_user_count(st, &users, NULL) != 0) {
        fprintf(log, "kiln serve: cannot count the users in the database\n");
        return 1;
    }
    if (users > 0)
        return 0;
    char token[AUTH_PASSWORD_MAX + 1], hex[AUTH_HASH_HEX + 1], err[256];
    bool made = !given || !*given;
    if (made ? auth_token_new(token, hex) != 0 : admin_token_check(given, err, sizeof err) != 0) {
        fprintf(log, "kiln serve: %s\n", made ? "libsodium cannot start" : err);
        return made ? 1 : 2;
    }
    if (!made) {
        snprintf(token, sizeof token, "%s", given);
        auth_token_hash(token, hex);
    }
    int64_t id = 0, token_id = 0;
    api_error e = { .status = 500 };
    int rc = auth_user_add(st, name, token, true, ops, mem, &id, NULL, &e);
    if (rc != 0)
        fprintf(log, "kiln serve: KILN_FIRST_ADMIN=%s: %s\n", name, e.message);
    else if (store_token_insert(st, id, "api", "first admin", hex, 0, &token_id, err, sizeof err) != 0) {
        fprintf(log, "kiln serve: the first admin's token could not be stored: %s\n", err);
        rc = -1;
    }
    if (rc == 0 && made)
        fprintf(log, "kiln serve: added the admin %s. Its API token (also its password), shown only this once:\n"
                     "kiln serve:   %s\n", name, token);
    else if (rc == 0)
        fprintf(log, "kiln serve: added the admin %s with the token in KILN_ADMIN_TOKEN (also its password)\n", name);
    sodium_memzero(token, sizeof token);
    fflush(log);
    return rc == 0 ? 0 : e.status == 400 ? 2 : 1;
}

void auth_own(request *r, store_owned kind, int64_t id)
{
    if (r->user_id <= 0)
        return;
    if (store_set_owner(r->srv->st, kind, id, r->user_id) != 0)
        fprintf(stderr, "kiln: %s %lld: could not record its owner (user %lld); only admins will see it\n",
                kind == STORE_OWNED_DATASET ? "dataset" : kind == STORE_OWNED_JOB ? "job" : "evaluation",
                (long long)id, (long long)r->user_id);
}
