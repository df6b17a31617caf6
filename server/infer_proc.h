/* server/infer_proc.h: kiln serve's side of the inference process
 * (`kiln infer-server`, protocol in jobs/infer_server.h).
 *
 * The process is started on the first call, not with the server, and talked
 * to over two pipes, one JSON line each way. When it has gone (it exits on
 * its own after INFER_LIMITS.idle_seconds without a request, or it crashed)
 * the next call starts a new one. A process that dies during a request fails
 * that request only (500 inference_crashed, naming the exit status or
 * signal); one that cannot be started gives 503 inference_unavailable.
 *
 * Threads: infer_proc_call is made by one thread at a time (the server's
 * inference thread, server/infer.c); infer_proc_abort may be called from any
 * thread, to end a call in progress (shutdown).
 */
#ifndef KILN_SERVER_INFER_PROC_H
#define KILN_SERVER_INFER_PROC_H

#include <cjson/cJSON.h>

#include "base/err.h"         /* api_error */

typedef struct infer_proc infer_proc;

/* A handle for the process that `exe infer-server` starts; nothing is started
 * yet. NULL when out of memory. */
infer_proc *infer_proc_new(const char *exe);
/* An answer of the inference process (jobs/infer_server.h). */
typedef struct infer_reply {
    int status;                    /* the HTTP status to answer with */
    char cache[8];                 /* "hit", "miss" or "" */
    char *body;                    /* the body's JSON text, NUL-terminated (malloc'ed) */
    size_t len;
} infer_reply;

/* Sends req and waits for its answer into *out (free out->body). Returns 0,
 * or -1 with e on failure (as above). */
int infer_proc_call(infer_proc *p, const cJSON *req, infer_reply *out, api_error *e);
/* Kills the process if one runs, ending a call in progress with its error. */
void infer_proc_abort(infer_proc *p);
/* Closes the process's stdin (it exits), waits for it a moment, kills it if
 * it lingers, and frees p. NULL is a no-op. */
void infer_proc_free(infer_proc *p);

#endif
