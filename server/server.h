/* server/server.h: the state of one `kiln serve`, shared by the HTTP layer's files.
 *
 * One server value lives for the whole process (serve.c owns it). Handlers
 * reach the store, the hub and the scheduler through it; the SSE registry and
 * the import counters let the shutdown sequence resume every suspended
 * connection and wait for background imports before the store is closed.
 */
#ifndef KILN_SERVER_SERVER_H
#define KILN_SERVER_SERVER_H

#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "db/store.h"          /* store */
#include "jobs/dispatch.h"    /* dispatch_kind */
#include "server/limits.h"    /* serve_limits */
#include "server/guard.h"     /* guard_hosts */
#include "jobs/hub.h"          /* hub */
#include "jobs/import_roots.h" /* import_roots */
#include "jobs/scheduler.h"    /* sched */
#include "server/serve_flags.h" /* SERVE_BASE_PATH_MAX, access_log_mode */

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif

struct MHD_Daemon;
struct sse_conn;

typedef struct server {
    char data_dir[PATH_MAX];      /* absolute */
    char web_dir[PATH_MAX];       /* the dashboard (index.html, *.js, *.css) */
    char static_dir[PATH_MAX];    /* vendored libraries, icons */
    import_roots roots;           /* --import-root: the folders a JSON dataset source may name */
    serve_limits limits;          /* --limit: every configurable limit (limits.h) */
    bool bind_public;             /* bound beyond loopback: sign-in required (server/auth.h) ... */
    bool insecure_no_auth;        /* ... unless --insecure-no-auth */
    guard_hosts hosts;            /* the names the server answers to: defaults and --allowed-host (guard.h) */
    char base_path[SERVE_BASE_PATH_MAX]; /* --base-path: "" or "/prefix"; every URL lives under it (http.c) */
    access_log_mode access_log;   /* --access-log: which requests get a line on stderr (http.c) */
    store *st;
    hub *hub;
    sched *sched;
    dispatch_kind dispatcher;     /* --dispatcher: where jobs run (GET /api/v1/info says it) */
    struct MHD_Daemon *daemon;
    atomic_bool stopping;         /* set first in the shutdown sequence */

    /* SSE connections (sse.c): every live one, for heartbeats and shutdown. */
    pthread_mutex_t sse_mu;
    struct sse_conn *sse_list;
    pthread_cond_t ping_cond;     /* wakes the heartbeat thread early at shutdown */
    pthread_t ping_thread;
    bool ping_started;

    /* Dataset imports (upload.c). probes: upload connections suspended while
     * their archive is checked; imports: background import threads (uploads
     * and files on the server). */
    pthread_mutex_t imp_mu;
    pthread_cond_t imp_cond;
    int probes;
    int imports;
    pthread_mutex_t import_serial;   /* one import decodes at a time (CPU) */
    sem_t check_slots;               /* upload checks at once (the checks limit) */

    /* Classification (infer.c): its thread, queue and inference process. */
    struct infer_service *infer;

    /* Sweeps (sweeps.c): the controller that drives their trials. */
    struct sweeper *sweeper;

    /* The hardware sampler (hardware.c): GET /api/v1/hardware and /metrics. */
    struct hw_sampler *hw;

    /* The Slurm cluster's nodes (cluster.c): GET /api/v1/hardware's "cluster";
     * NULL when kiln serve runs without a cluster. */
    struct cluster *cluster;
} server;

/* `kiln serve`: parses its options, runs until SIGINT/SIGTERM. Returns a
 * process exit status (0, 1 on a start-up failure, 2 on a usage error). */
int serve_main(int argc, char **argv);

/* The usage text of `kiln serve` (for `kiln --help` too). */
void serve_usage(FILE *f);

#endif
