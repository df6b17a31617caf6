/* server/infer_proc.c: starting and talking to `kiln infer-server` (contract
 * in infer_proc.h).
 *
 * The child starts with a clean signal mask and default dispositions (the
 * server ignores SIGPIPE; a child whose server is gone must not), in its own
 * process group (a terminal's ^C goes to the server, which ends it), with
 * only stdin, stdout and the server's stderr open, and with
 * OMP_WAIT_POLICY=PASSIVE unless the server's environment sets it: a
 * service process shares the cores with training workers, and OpenMP
 * threads that spin at every barrier while another process holds a core
 * make a request several times slower (2,000 LeNet images: 2.6-3.3 s
 * spinning against 0.46 s passive with a training job on this 2-core
 * machine); on an idle machine passive waiting costs little (bench/README.md). The pid is guarded by a
 * mutex so that infer_proc_abort can kill it from another thread; the caller
 * of infer_proc_call reaps it.
 */
#define _GNU_SOURCE           /* pipe2, posix_spawn_file_actions_addclosefrom_np */
#include "server/infer_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobs/infer_server.h"   /* INFER_SERVER_COMMAND, infer_write_all */

extern char **environ;

#define PROC_EXIT_WAIT_MS 2000     /* infer_proc_free: the child's time to exit */

struct infer_proc {
    char *exe;
    char **env;                    /* environ, plus OMP_WAIT_POLICY (the strings are environ's) */
    pthread_mutex_t mu;            /* pid */
    pid_t pid;                     /* 0: none */
    int to_fd, from_fd;            /* its stdin, its stdout; -1 when none */
    char *buf;                     /* what was read past the last answer's newline */
    size_t len, cap;
};

infer_proc *infer_proc_new(const char *exe)
{
    infer_proc *p = calloc(1, sizeof *p);
    size_t n = 0;
    while (environ[n])
        n++;
    if (!p || !(p->exe = strdup(exe)) || !(p->env = calloc(n + 2, sizeof *p->env))) {
        if (p)
            free(p->exe);
        free(p);
        return NULL;
    }
    memcpy(p->env, environ, n * sizeof *p->env);
    if (!getenv("OMP_WAIT_POLICY"))
        p->env[n++] = "OMP_WAIT_POLICY=PASSIVE";
    p->env[n] = NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->to_fd = p->from_fd = -1;
    return p;
}

/* Closes the pipes and reaps the child (blocking); *wstatus its status. */
static void reap(infer_proc *p, int *wstatus)
{
    if (p->to_fd >= 0)
        close(p->to_fd);
    if (p->from_fd >= 0)
        close(p->from_fd);
    p->to_fd = p->from_fd = -1;
    p->len = 0;
    pthread_mutex_lock(&p->mu);
    pid_t pid = p->pid;
    pthread_mutex_unlock(&p->mu);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    pthread_mutex_lock(&p->mu);
    p->pid = 0;
    pthread_mutex_unlock(&p->mu);
    if (wstatus)
        *wstatus = st;
}

static int start(infer_proc *p, api_error *e)
{
    int in[2] = { -1, -1 }, out[2] = { -1, -1 };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    bool fa_init = false, at_init = false;
    int rc = pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) ? errno : 0;
    if (!rc && !(rc = posix_spawn_file_actions_init(&fa)))
        fa_init = true;
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
#endif
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    static const int reset[] = { SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD };
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&defaults, reset[i]);
    if (!rc && !(rc = posix_spawnattr_init(&at)))
        at_init = true;
    if (!rc) rc = posix_spawnattr_setsigmask(&at, &none);
    if (!rc) rc = posix_spawnattr_setsigdefault(&at, &defaults);
    if (!rc) rc = posix_spawnattr_setpgroup(&at, 0);
    if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                POSIX_SPAWN_SETPGROUP);
    pid_t pid = 0;
    char *argv[] = { p->exe, INFER_SERVER_COMMAND, NULL };
    if (!rc)
        rc = posix_spawn(&pid, p->exe, &fa, &at, argv, p->env);
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (at_init)
        posix_spawnattr_destroy(&at);
    if (in[0] >= 0)
        close(in[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (rc) {
        if (in[1] >= 0)
            close(in[1]);
        if (out[0] >= 0)
            close(out[0]);
        return api_fail(e, 503, "inference_unavailable", "the inference process could not be started: %s",
                        strerror(rc));
    }
    pthread_mutex_lock(&p->mu);
    p->pid = pid;
    pthread_mutex_unlock(&p->mu);
    p->to_fd = in[1];
    p->from_fd = out[0];
    p->len = 0;
    return 0;
}

/* Makes sure n bytes follow p->buf's first `at` bytes (room for a NUL
 * after them too). 0, or -1 at EOF or on an error. */
static int read_more(infer_proc *p, size_t at, size_t n)
{
    while (p->len < at + n) {
        if (p->cap < at + n + 1) {
            size_t cap = p->cap ? p->cap : 1 << 16;
            while (cap < at + n + 1)
                cap *= 2;
            char *nb = realloc(p->buf, cap);
            if (!nb)
                return -1;
            p->buf = nb;
            p->cap = cap;
        }
        ssize_t k = read(p->from_fd, p->buf + p->len, p->cap - p->len - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p->len += (size_t)k;
    }
    return 0;
}

/* Reads one line from the child into p->buf. Returns its length (the newline
 * replaced by NUL), or -1 at EOF or on an error. */
static ssize_t read_line(infer_proc *p)
{
    size_t seen = 0;                     /* bytes already searched for the newline */
    for (;;) {
        char *nl = p->len > seen ? memchr(p->buf + seen, '\n', p->len - seen) : NULL;
        if (nl) {
            *nl = '\0';
            return nl - p->buf;
        }
        seen = p->len;
        if (read_more(p, 0, p->len + 1) != 0)      /* at least one byte more */
            return -1;
    }
}

static void describe_exit(int st, char *out, size_t n)
{
    if (WIFSIGNALED(st))
        snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(out, n, "exited with status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Reads an answer: its envelope line, then the body's bytes and newline.
 * 0 with *out, 1 when the stream ended or is not the protocol. */
static int read_reply(infer_proc *p, infer_reply *out)
{
    ssize_t len = read_line(p);
    if (len < 0)
        return 1;
    cJSON *env = cJSON_ParseWithLength(p->buf, (size_t)len);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(env, "status");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(env, "bytes");
    const cJSON *cache = cJSON_GetObjectItemCaseSensitive(env, "cache");
    bool ok = cJSON_IsNumber(st) && st->valueint >= 200 && st->valueint < 600 && cJSON_IsNumber(bytes) &&
              bytes->valuedouble >= 0 && bytes->valuedouble < (double)((size_t)1 << 40);
    memset(out, 0, sizeof *out);
    if (ok) {
        out->status = st->valueint;
        out->len = (size_t)bytes->valuedouble;
        snprintf(out->cache, sizeof out->cache, "%s", cJSON_IsString(cache) ? cache->valuestring : "");
    }
    cJSON_Delete(env);
    size_t head = (size_t)len + 1;
    if (!ok || read_more(p, head, out->len + 1) != 0 || p->buf[head + out->len] != '\n' ||
        !(out->body = malloc(out->len + 1)))
        return 1;
    memcpy(out->body, p->buf + head, out->len);
    out->body[out->len] = '\0';
    size_t used = head + out->len + 1;
    memmove(p->buf, p->buf + used, p->len - used);
    p->len -= used;
    return 0;
}

/* One exchange with a running process: 1 with *out, 0 when it was found gone
 * before it read the request (idle exit: start another), -1 with e. */
static int exchange(infer_proc *p, const char *line, size_t n, infer_reply *out, api_error *e)
{
    if (infer_write_all(p->to_fd, line, n) == 0 && read_reply(p, out) == 0)
        return 1;
    int st = 0;
    reap(p, &st);
    /* A process that ended on its own before this request (idle timeout) exits 0. */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    char how[96];
    describe_exit(st, how, sizeof how);
    fprintf(stderr, "kiln serve: the inference process %s during a request\n", how);
    return api_fail(e, 500, "inference_crashed", "the inference process %s while classifying; the request "
                    "failed, and the next one starts a new process", how);
}

/* A process that ended between requests (idle timeout, killed) is reaped
 * before the next request, which then starts a new one. */
static void reap_if_gone(infer_proc *p)
{
    int st;
    if (p->pid <= 0 || waitpid(p->pid, &st, WNOHANG) != p->pid)
        return;
    pthread_mutex_lock(&p->mu);
    p->pid = 0;
    pthread_mutex_unlock(&p->mu);
    reap(p, NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char how[96];
        describe_exit(st, how, sizeof how);
        fprintf(stderr, "kiln serve: the inference process %s between requests; starting another\n", how);
    }
}

int infer_proc_call(infer_proc *p, const cJSON *req, infer_reply *out, api_error *e)
{
    memset(out, 0, sizeof *out);
    char *text = cJSON_PrintUnformatted(req);
    size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL;
    if (!line) {
        cJSON_free(text);
        return api_fail(e, 500, "internal_error", "out of memory");
    }
    line[n++] = '\n';
    line[n] = '\0';
    int rc = -1;
    reap_if_gone(p);
    for (int attempt = 0; attempt < 2 && rc < 0; attempt++) {
        if (p->pid == 0 && start(p, e) != 0)
            break;
        int r = exchange(p, line, n, out, e);
        if (r == 1)
            rc = 0;
        else if (r < 0)
            break;
        else
            api_fail(e, 503, "inference_unavailable", "the inference process ended before it answered");
    }
    free(line);
    return rc;
}

void infer_proc_abort(infer_proc *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->pid > 0)
        kill(p->pid, SIGKILL);
    pthread_mutex_unlock(&p->mu);
}

void infer_proc_free(infer_proc *p)
{
    if (!p)
        return;
    if (p->to_fd >= 0) {
        close(p->to_fd);               /* stdin closes: it exits */
        p->to_fd = -1;
    }
    pthread_mutex_lock(&p->mu);
    pid_t pid = p->pid;
    pthread_mutex_unlock(&p->mu);
    if (pid > 0) {
        int st;
        int waited = 0;
        while (waitpid(pid, &st, WNOHANG) == 0 && waited < PROC_EXIT_WAIT_MS) {
            struct timespec ts = { 0, 10 * 1000000L };
            nanosleep(&ts, NULL);
            waited += 10;
        }
        if (waited >= PROC_EXIT_WAIT_MS) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        p->pid = 0;
    }
    if (p->from_fd >= 0)
        close(p->from_fd);
    pthread_mutex_destroy(&p->mu);
    free(p->buf);
    free(p->env);
    free(p->exe);
    free(p);
}
