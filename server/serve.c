/* server/serve.c: `kiln serve`, start-up and an orderly shutdown.
 *
 * Start: the data folder's layout, the store (datasets left "importing" by a
 * server that died are marked failed; stale uploads are removed), the hub, the
 * scheduler (workers are this binary: realpath of /proc/self/exe), the SSE
 * heartbeat, then libmicrohttpd (epoll thread pool, suspend/resume). After
 * binding it prints exactly one line to stdout, `kiln: listening on
 * http://HOST:PORT`, and flushes it.
 *
 * Shutdown on SIGINT/SIGTERM (taken with sigwait; every thread starts with
 * them blocked): mark stopping; resume every suspended SSE connection (each
 * ends its stream) and wait for uploads suspended on their archive check,
 * because MHD_stop_daemon must not meet a suspended connection; stop MHD; stop
 * the scheduler (running jobs are requeued); stop background imports (each
 * stops at its next progress report and is marked failed) and give them a
 * moment; close the store.
 *
 * --import-root DIR (repeatable) names the folders whose files a JSON dataset
 * source may read (jobs/import_roots.h); each is resolved at start, and a
 * missing one is a usage error.
 *
 * Every flag, its KILN_* variable and its default live in one table
 * (server/serve_flags.c); this file only acts on the parsed serve_opts.
 */
#define _GNU_SOURCE           /* realpath, getopt_long */
#include "base/layout.h"     /* the data directory's sub-folders */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "engine/fileio.h"     /* fio_mkdir_p, fio_empty_dir */
#include "server/auth.h"       /* auth_bind_check */
#include "server/http.h"       /* http_on_request, http_on_completed */
#include "server/sse.h"        /* sse_start, sse_stop */
#include "jobs/import_job.h"   /* import_job_stop_all */
#include "server/upload.h"     /* upload_wait_probes, upload_wait_imports */
#include "server/infer.h"      /* infer_service_start, infer_service_stop */
#include "server/sweeps.h"     /* sweeper_start, sweeper_stop */
#include "server/serve_flags.h" /* serve_opts, serve_flags_parse: the table of flags */
#include "server/hardware.h"   /* hw_start, hw_stop: the hardware sampler */
#include "jobs/jobcfg.h"      /* jobcfg_set_cluster: where a request's GPUs are */
#include "server/cluster.h"    /* cluster_start, cluster_stop: the Slurm cluster's nodes */

#define SERVE_THREADS 4
#define SERVE_IMPORT_GRACE_MS 5000

void serve_usage(FILE *f)
{
    serve_flags_usage(f);              /* server/serve_flags.c: the one table of flags */
}

extern char **environ;

/* Returns 0, 1 after --help, or 2 on a usage error (reported). */
static int parse_args(int argc, char **argv, serve_opts *o)
{
    char err[PATH_MAX + 1024];
    int rc = serve_flags_parse(o, argc, argv, environ, stdout, err, sizeof err);
    if (rc == 2)
        fprintf(stderr, "kiln serve: %s\n(see kiln serve --help)\n", err);
    return rc;
}

/* ---- start-up pieces ------------------------------------------------------------- */

static int prepare_data_dir(server *srv, const char *data)
{
    static const char *const subdirs[] = { LAYOUT_DATASETS, LAYOUT_JOBS, LAYOUT_UPLOADS };
    char path[PATH_MAX + 32];
    if (fio_mkdir_p(data) != 0) {
        fprintf(stderr, "kiln serve: cannot create the data directory %s: %s\n", data, strerror(errno));
        return -1;
    }
    if (!realpath(data, srv->data_dir)) {
        fprintf(stderr, "kiln serve: cannot resolve %s: %s\n", data, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        if (layout_subdir(path, sizeof path, srv->data_dir, subdirs[i]) != 0 || fio_mkdir_p(path) != 0) {
            fprintf(stderr, "kiln serve: cannot create %s: %s\n", path, strerror(errno));
            return -1;
        }
    }
    layout_subdir(path, sizeof path, srv->data_dir, LAYOUT_UPLOADS);
    fio_empty_dir(path);                    /* what a previous server left */
    return 0;
}

/* The folder's absolute path into out; a missing folder is kept as given, with
 * a warning (the API works without the dashboard). */
static void resolve_dir(const char *what, const char *dir, char *out, size_t n)
{
    if (realpath(dir, out))
        return;
    fprintf(stderr, "kiln serve: warning: the %s %s is missing (%s); its files will be 404\n", what, dir,
            strerror(errno));
    snprintf(out, n, "%s", dir);
}

/* Datasets left "importing" by a server that stopped mid-import: marked
 * failed, and their folders' partial files removed, as a failed import's are. */
static void fail_interrupted_imports(store *st, const char *data_dir)
{
    store_dataset *list = NULL;
    size_t n = 0;
    if (store_dataset_list(st, &list, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i].status, "importing") != 0)
            continue;
        fprintf(stderr, "kiln serve: dataset %lld (%s) was left importing; marking it failed\n",
                (long long)list[i].id, list[i].name);
        store_dataset_finish(st, list[i].id, "failed", NULL,
                             "the server stopped during the import; create the dataset again");
        char dir[PATH_MAX];
        if (layout_dataset_dir(dir, sizeof dir, data_dir, list[i].id) == 0)
            fio_rm_rf(dir);
    }
    store_dataset_list_free(list, n);
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

/* libmicrohttpd's messages, minus the ones a client that went away causes
 * (every closed SSE stream would log one), and at most one a minute for
 * connections refused at the connections or connections-per-client limit (a
 * flood of them would flood the log). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (strstr(msg, "Failed to send") || strstr(msg, "no longer available") ||
        strstr(msg, "reset by peer") || strstr(msg, "closed by remote"))
        return;
    if (strstr(msg, "reached connection limit")) {
        static _Atomic long long last_s = -60;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long prev = atomic_load(&last_s);
        if (now.tv_sec - prev < 60 || !atomic_compare_exchange_strong(&last_s, &prev, (long long)now.tv_sec))
            return;
        snprintf(msg, sizeof msg, "refusing connections at the connections or connections-per-client limit "
                                  "(logged once a minute)");
    }
    size_t n = strlen(msg);
    fprintf(stderr, "kiln: http: %s%s", msg, n && msg[n - 1] == '\n' ? "" : "\n");
}

static struct MHD_Daemon *start_http(server *srv, const serve_opts *o, int *port_out, bool *loopback)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(o->host, port, &hints, &res);
    if (gai != 0 || !res) {
        fprintf(stderr, "kiln serve: cannot use --host %s: %s\n", o->host, gai_strerror(gai));
        return NULL;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    *loopback = is_loopback(res->ai_addr);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, http_on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,           /* first, as MHD asks */
        MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, srv,
        MHD_OPTION_URI_LOG_CALLBACK, http_on_uri, srv,
        MHD_OPTION_SOCK_ADDR, res->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)SERVE_THREADS,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->limits.connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->limits.idle_timeout_s,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)srv->limits.connections_per_client,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, guard_mhd_memory_limit(&srv->limits),
        MHD_OPTION_END);
    freeaddrinfo(res);
    if (!d) {
        fprintf(stderr, "kiln serve: cannot listen on %s port %d (in use, or not an address of this machine)\n",
                o->host, o->port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = info && info->port ? info->port : o->port;
    return d;
}

/* ---- serve ------------------------------------------------------------------------ */

int serve_main(int argc, char **argv)
{
    static server srv;                     /* outlives threads that may still run at exit */
    serve_opts o = { .roots = &srv.roots, .limits = &srv.limits, .hosts = &srv.hosts };
    serve_limits_default(&srv.limits);
    int rc = parse_args(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc != 0)
        return rc;

    /* Every thread made from here on inherits this mask; main takes the
     * signals with sigwait. Workers get a clean mask from the scheduler. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();

    pthread_mutex_init(&srv.sse_mu, NULL);
    pthread_cond_init(&srv.ping_cond, NULL);
    pthread_mutex_init(&srv.imp_mu, NULL);
    pthread_cond_init(&srv.imp_cond, NULL);
    pthread_mutex_init(&srv.import_serial, NULL);
    sem_init(&srv.check_slots, 0, (unsigned)srv.limits.checks);
    atomic_init(&srv.stopping, false);

    int status = 1;
    char err[512] = "", path[PATH_MAX + 16];
    char worker_exe[PATH_MAX];
    if (prepare_data_dir(&srv, o.data) != 0)
        return 1;
    resolve_dir("web dir", o.web_dir, srv.web_dir, sizeof srv.web_dir);
    resolve_dir("static dir", o.static_dir, srv.static_dir, sizeof srv.static_dir);

    layout_file(path, sizeof path, srv.data_dir, LAYOUT_DB_FILE);
    srv.st = store_open(path, err, sizeof err);
    if (!srv.st) {
        fprintf(stderr, "kiln serve: cannot open %s: %s\n", path, err);
        return 1;
    }
    srv.insecure_no_auth = o.insecure_no_auth;
    memcpy(srv.base_path, o.base_path, sizeof srv.base_path);
    srv.access_log = o.access_log;
    bool public_bind = false;
    auth_bind_check(o.host, NULL, true, &public_bind);   /* where it binds; the first admin, if asked for, next */
    if ((status = auth_first_admin(srv.st, public_bind, o.insecure_no_auth, srv.limits.password_ops,
                                   srv.limits.password_mem, stderr)) != 0 ||
        (status = auth_bind_check(o.host, srv.st, o.insecure_no_auth, &srv.bind_public)) != 0) {
        store_close(srv.st);
        return status;
    }
    status = 1;
    fail_interrupted_imports(srv.st, srv.data_dir);
    srv.hub = hub_create();
    if (!srv.hub) {
        fprintf(stderr, "kiln serve: out of memory\n");
        goto out;
    }
    hub_set_store(srv.hub, srv.st);     /* events are stored; their ids are the store's */
    if (!realpath("/proc/self/exe", worker_exe)) {
        fprintf(stderr, "kiln serve: cannot find its own binary (/proc/self/exe): %s\n", strerror(errno));
        goto out;
    }
    jobcfg_set_cluster(o.dispatcher == DISPATCH_SLURM);   /* a request's GPUs are a node's */
    srv.dispatcher = o.dispatcher;
    sched_config cfg = { .data_dir = srv.data_dir, .worker_exe = worker_exe, .max_cpu_jobs = o.max_jobs,
                         .dispatcher = o.dispatcher, .slurm = o.slurm };
    srv.sched = sched_start(srv.st, srv.hub, &cfg, err, sizeof err);
    if (!srv.sched) {
        fprintf(stderr, "kiln serve: cannot start the scheduler: %s\n", err);
        goto out;
    }
    if (!(srv.hw = hw_start((unsigned)srv.limits.hardware_interval_s, srv.sched, err, sizeof err))) {
        fprintf(stderr, "kiln serve: %s\n", err);
        goto out;
    }
    /* The cluster's nodes in the hardware panel: with the Slurm dispatcher,
     * sinfo from the same folder as its sbatch. */
    cluster_config ccfg = { .interval_s = (unsigned)srv.limits.cluster_interval_s,
                            .slurm_bin = o.slurm.bin_dir };
    if (o.dispatcher == DISPATCH_SLURM && !(srv.cluster = cluster_start(&ccfg, err, sizeof err))) {
        fprintf(stderr, "kiln serve: %s\n", err);
        goto out;
    }
    if (infer_service_start(&srv, worker_exe, err, sizeof err) != 0) {
        fprintf(stderr, "kiln serve: %s\n", err);
        goto out;
    }
    if (!(srv.sweeper = sweeper_start(&srv, err, sizeof err))) {
        fprintf(stderr, "kiln serve: %s\n", err);
        goto out;
    }
    if (sse_start(&srv) != 0) {
        fprintf(stderr, "kiln serve: cannot start the heartbeat thread\n");
        goto out;
    }

    if (guard_hosts_defaults(&srv.hosts, o.host, err, sizeof err) != 0) {
        fprintf(stderr, "kiln serve: %s\n", err);
        goto out;
    }
    if (o.port)
        guard_hosts_set_port(&srv.hosts, o.port);
    int port = 0;
    bool loopback = true;
    srv.daemon = start_http(&srv, &o, &port, &loopback);
    if (!srv.daemon)
        goto out;
    guard_hosts_set_port(&srv.hosts, port);  /* --port 0: known now */
    bool v6 = strchr(o.host, ':') != NULL;
    printf("kiln: listening on http://%s%s%s:%d%s\n", v6 ? "[" : "", o.host, v6 ? "]" : "", port, srv.base_path);
    fflush(stdout);
    fprintf(stderr, "kiln serve: data in %s, dashboard from %s\n", srv.data_dir, srv.web_dir);
    for (size_t i = 0; i < srv.roots.n; i++)
        fprintf(stderr, "kiln serve: datasets may be imported from %s\n", srv.roots.dirs[i]);
    if (!loopback && o.insecure_no_auth)
        fprintf(stderr, "kiln serve: WARNING: bound to %s, which is not loopback, with --insecure-no-auth: "
                        "until a user exists, anyone who can reach this port can use the API\n", o.host);
    else if (!loopback)
        fprintf(stderr, "kiln serve: bound to %s: every API call needs a sign-in (cookies are not marked "
                        "Secure: put a TLS proxy in front for the network)\n", o.host);

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0 || (sig != SIGINT && sig != SIGTERM))
        ;
    fprintf(stderr, "kiln serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    status = 0;

out:
    sse_stop(&srv);                        /* sets stopping; every SSE connection resumes and ends */
    /* MHD_stop_daemon closes every socket at once: give the resumed streams
     * up to 2 s to send their last chunk, so a client sees the stream end,
     * not a reset (integration_deploy's SIGTERM case). */
    bool streams = srv.daemon && sse_client_count(&srv) > 0;
    for (int i = 0; streams && i < 200 && sse_client_count(&srv) > 0; i++)
        usleep(10000);
    if (streams)
        usleep(200000);                    /* a stream leaves the list before MHD's thread writes its end */
    upload_wait_probes(&srv);              /* uploads suspended on their archive check resume */
    infer_service_stop(&srv);              /* classifications queued or running are answered */
    if (srv.daemon)
        MHD_stop_daemon(srv.daemon);
    srv.daemon = NULL;
    sweeper_stop(srv.sweeper);             /* before the scheduler: no trial is made or promoted after */
    srv.sweeper = NULL;
    hw_stop(srv.hw);                       /* before the scheduler it asks */
    srv.hw = NULL;
    cluster_stop(srv.cluster);             /* kills a sinfo still running */
    srv.cluster = NULL;
    sched_stop(srv.sched);
    srv.sched = NULL;
    import_job_stop_all("the server stopped during the import; create the dataset again");
    int left = upload_wait_imports(&srv, SERVE_IMPORT_GRACE_MS);
    if (left > 0) {
        /* They still use the store; the process ends under them, and the next
         * start marks their datasets failed. */
        fprintf(stderr, "kiln serve: %d import(s) still running; they are abandoned\n", left);
        return status;
    }
    hub_destroy(srv.hub);
    store_close(srv.st);
    import_roots_free(&srv.roots);
    guard_hosts_free(&srv.hosts);
    return status;
}
