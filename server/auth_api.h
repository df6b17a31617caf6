/* server/auth_api.h: the routes of sign-in, tokens and users (issue 15).
 *
 *   GET    /api/v1/session     who is signed in: {"auth_required", "user"}
 *   POST   /api/v1/session     {"user","password"}: signs in; sets the
 *                              kiln_session cookie (HttpOnly, SameSite=Strict,
 *                              Path=/, Max-Age = the session-lifetime limit;
 *                              not Secure: kiln speaks plain HTTP)
 *   DELETE /api/v1/session     signs out: the session is revoked, the cookie cleared
 *   GET    /api/v1/tokens      the caller's API tokens (an admin's: everyone's), never the secret
 *   POST   /api/v1/tokens      {"user","password"} (or a signed-in caller, for
 *                              themselves), "name", "expires_in_days": a new
 *                              token, shown in this answer only
 *   DELETE /api/v1/tokens/:id  revokes one (the caller's own; an admin any)
 *   GET/POST /api/v1/users, DELETE /api/v1/users/:id   admins only (403 otherwise)
 *
 * A wrong user name or password is 401 invalid_credentials, the same for both.
 */
#ifndef KILN_SERVER_AUTH_API_H
#define KILN_SERVER_AUTH_API_H

struct request;

int auth_session_get(struct request *r);
int auth_session_create(struct request *r);
int auth_session_delete(struct request *r);
int auth_tokens_list(struct request *r);
int auth_token_create(struct request *r);
int auth_token_delete(struct request *r);
int auth_users_list(struct request *r);
int auth_user_create(struct request *r);
int auth_user_delete(struct request *r);

#endif
