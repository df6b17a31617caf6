/* tests/fuzz/fuzz_multipart.c: multipart/form-data bodies as kiln serve
 * receives them: libmicrohttpd's post processor feeding our iterators
 * (server/upload.c for POST /api/v1/datasets, server/infer.c for POST
 * /api/v1/jobs/{id}/infer) through server/http.c's request lifecycle and
 * http_form_*.
 *
 * A post processor belongs to a connection (MHD_create_post_processor reads
 * its Content-Type), and MHD's own tests build one from its private headers,
 * which Debian does not ship. So the harness runs the real thing in-process:
 * a libmicrohttpd daemon with no listening socket and no threads
 * (MHD_USE_NO_LISTEN_SOCKET, driven by MHD_run), given one end of a
 * socketpair per input with MHD_add_connection; the other end writes the
 * request and reads the answer. The access handler is kiln's own
 * (http_on_uri, http_on_request, http_on_completed) on a server with a real store in a
 * scratch data folder. Nothing listens on a network.
 *
 * Input: a byte (bit 0: the dataset upload, else classification of job 1;
 * bit 1: a chunked body, of no declared length), the Content-Type up to the
 * first newline, then the body. Each request must be answered and completed;
 * a form that passes every check of an upload would start an import: the
 * server is told it is stopping just before the handler runs, so it answers
 * 503 there instead (the checks before it all ran); classification answers
 * 404 (job 1 does not exist) once its form passed. Any other answer, or one
 * that is not a JSON error, aborts.
 */
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <microhttpd.h>

#include "base/layout.h"      /* LAYOUT_* */
#include "server/guard.h"     /* guard_hosts_add */
#include "server/http.h"      /* http_on_uri, http_on_request, http_on_completed */
#include "server/server.h"    /* server */
#include "fuzz_util.h"

static server srv;
static struct MHD_Daemon *daemon_;
static int completed;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    const request *r = *con_cls;             /* made by http_on_uri; method set on the first call */
    bool finishing = r && r->method && *size == 0;
    if (finishing)
        atomic_store(&srv.stopping, true);
    enum MHD_Result rc = http_on_request(cls, c, url, method, version, data, size, con_cls);
    atomic_store(&srv.stopping, false);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    completed++;
    http_on_completed(cls, c, con_cls, toe);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_scratch();
    char path[PATH_MAX], err[512];
    serve_limits_default(&srv.limits);
    snprintf(srv.data_dir, sizeof srv.data_dir, "%s", dir);
    snprintf(srv.web_dir, sizeof srv.web_dir, "%s", dir);
    snprintf(srv.static_dir, sizeof srv.static_dir, "%s", dir);
    static const char *const subdirs[] = { LAYOUT_DATASETS, LAYOUT_JOBS, LAYOUT_UPLOADS };
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++)
        if (mkdir(fuzz_path(path, dir, subdirs[i]), 0700) != 0)
            fuzz_die(path);
    if (!(srv.st = store_open(fuzz_path(path, dir, LAYOUT_DB_FILE), err, sizeof err))) {
        fprintf(stderr, "fuzz_multipart: store_open: %s\n", err);
        abort();
    }
    pthread_mutex_init(&srv.sse_mu, NULL);
    pthread_cond_init(&srv.ping_cond, NULL);
    pthread_mutex_init(&srv.imp_mu, NULL);
    pthread_cond_init(&srv.imp_cond, NULL);
    pthread_mutex_init(&srv.import_serial, NULL);
    atomic_init(&srv.stopping, false);
    /* as kiln serve sets them up (server/serve.c): the name the requests
     * give in Host, and the upload checks' slots */
    if (guard_hosts_add(&srv.hosts, "localhost", err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_multipart: guard_hosts_add: %s\n", err);
        abort();
    }
    sem_init(&srv.check_slots, 0, (unsigned)srv.limits.checks);
    daemon_ = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request,
                               &srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &srv,
                               MHD_OPTION_URI_LOG_CALLBACK, http_on_uri, &srv, MHD_OPTION_END);
    if (!daemon_) {
        fprintf(stderr, "fuzz_multipart: MHD_start_daemon failed\n");
        abort();
    }
    return 0;
}

/* The request's bytes: head, then the body as it is or as one chunk. */
static uint8_t *request_text(bool upload, bool chunked, const char *ct, const uint8_t *body, size_t len,
                             size_t *n)
{
    char head[1024];
    int h = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: %s\r\nConnection: close\r\n",
                     upload ? "/api/v1/datasets" : "/api/v1/jobs/1/infer", ct);
    if (chunked)
        h += snprintf(head + h, sizeof head - (size_t)h, "Transfer-Encoding: chunked\r\n\r\n%zx\r\n", len);
    else
        h += snprintf(head + h, sizeof head - (size_t)h, "Content-Length: %zu\r\n\r\n", len);
    const char *tail = chunked ? (len ? "\r\n0\r\n\r\n" : "\r\n\r\n") : "";
    uint8_t *p = malloc((size_t)h + len + strlen(tail));
    if (!p)
        abort();
    memcpy(p, head, (size_t)h);
    memcpy(p + h, body, len);
    memcpy(p + h + len, tail, strlen(tail));
    *n = (size_t)h + len + strlen(tail);
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *nl = memchr(data + 1, '\n', size - 1);
    if (!nl || nl - (data + 1) > 512)
        return 0;
    char ct[520];
    size_t ctlen = (size_t)(nl - (data + 1));
    memcpy(ct, data + 1, ctlen);
    ct[ctlen] = '\0';
    for (size_t i = 0; i < ctlen; i++)
        if ((unsigned char)ct[i] < 0x20 || ct[i] == 0x7f)
            return 0;                            /* not a header value: MHD refuses the request itself */
    size_t n;
    uint8_t *req = request_text(data[0] & 1, data[0] & 2, ct, nl + 1, size - (size_t)(nl + 1 - data), &n);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        fuzz_die("socketpair");
    struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons(40000) };
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int before = completed;
    if (MHD_add_connection(daemon_, sv[0], (const struct sockaddr *)&peer, sizeof peer) != MHD_YES)
        fuzz_die("MHD_add_connection");

    size_t sent = 0, answer = 0;
    char reply[4096] = "";
    bool eof = false;
    for (int round = 0; round < 100000 && !(eof && completed > before); round++) {
        if (sent < n) {
            ssize_t k = send(sv[1], req + sent, n - sent, MSG_NOSIGNAL);
            if (k > 0)
                sent += (size_t)k;
            else if (k < 0 && errno != EAGAIN)
                sent = n;                        /* the server closed early (an early answer) */
        }
        MHD_run(daemon_);
        ssize_t k;
        while ((k = recv(sv[1], reply + (answer < sizeof reply - 1 ? answer : 0),
                         answer < sizeof reply - 1 ? sizeof reply - 1 - answer : sizeof reply - 1, 0)) > 0)
            answer += (size_t)k;
        if (k == 0)
            eof = true;
    }
    if (!eof || completed == before) {
        fprintf(stderr, "fuzz_multipart: the request was not answered and completed (sent %zu of %zu, got %zu)\n",
                sent, n, answer);
        abort();
    }
    reply[answer < sizeof reply - 1 ? answer : sizeof reply - 1] = '\0';
    const char *msg = strstr(reply, "{\"error\"");
    char status[64] = "";
    sscanf(reply, "HTTP/1.1 %63[^\r]", status);
    fuzz_note(status, 1, msg ? msg : "(no error body)");
    /* Every form here is refused (or stopped at the import, 503), always as a
     * JSON error (DESIGN.md: bad input is a 4xx naming the problem). */
    int code = atoi(status);
    /* 401 and 421 come from the front door (server/auth.c, server/guard.c):
     * the harness's server must let its requests reach the forms. */
    if (code == 401 || code == 421 || !((code >= 400 && code < 500) || code == 503) || !msg ||
        !strstr(msg, "\"code\"")) {
        fprintf(stderr, "fuzz_multipart: answered %s with %s\n", status, msg ? msg : "no JSON error");
        abort();
    }
    close(sv[1]);
    free(req);
    return 0;
}
