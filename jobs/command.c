/* jobs/command.c: run a command with a time limit and capped output
 * (contract in command.h). */
#define _GNU_SOURCE           /* pipe2, posix_spawn_file_actions_addclosefrom_np */
#include "jobs/command.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"    /* set_err */
#include "base/utf8.h"   /* utf8_from_any: stderr made fit for a message */

extern char **environ;

/* One pipe's capture: at most max bytes kept, NUL-terminated. */
typedef struct capture {
    char *data;
    size_t len, cap, max;
} capture;

/* Appends k bytes, at most up to c->max; 1 when some did not fit, 0, or -1
 * out of memory. */
static int capture_add(capture *c, const char *buf, size_t k)
{
    size_t take = k <= c->max - c->len ? k : c->max - c->len;
    if (c->len + take + 1 > c->cap) {
        size_t ncap = c->cap ? c->cap : 4096;
        while (ncap < c->len + take + 1)
            ncap *= 2;
        char *grown = realloc(c->data, ncap);
        if (!grown)
            return -1;
        c->data = grown;
        c->cap = ncap;
    }
    memcpy(c->data + c->len, buf, take);
    c->len += take;
    c->data[c->len] = '\0';
    return take < k;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Spawns the child on the pipes' write ends: empty signal mask, default
 * dispositions, stdin /dev/null, nothing else open. 0, or a posix_spawn error. */
static int spawn(const command_spec *s, int out_w, int err_w, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    rc = posix_spawnattr_init(&at);
    if (rc) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    rc = posix_spawn_file_actions_adddup2(&fa, out_w, STDOUT_FILENO);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, err_w, STDERR_FILENO);
    if (!rc) rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
    if (!rc) rc = posix_spawnattr_setsigmask(&at, &none);
    if (!rc) rc = posix_spawnattr_setsigdefault(&at, &all);
    if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (!rc)
        rc = posix_spawnp(pid, s->path, &fa, &at, s->argv, s->envp ? s->envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc;
}

/* Reads what fd has into c; 1 at its end, 0 for more later, -1 out of
 * memory, 2 when c is stdout and passed its cap. */
static int read_some(int fd, capture *c, bool is_out)
{
    char buf[65536];
    ssize_t k = read(fd, buf, sizeof buf);
    if (k < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (k == 0)
        return 1;
    int r = capture_add(c, buf, (size_t)k);
    if (r < 0)
        return -1;
    return r > 0 && is_out ? 2 : 0;
}

/* Waits for the child: reads both pipes until both end and it has exited
 * (*ws), or a limit ends the wait (returned: then the child still runs). */
static command_end wait_child(const command_spec *s, pid_t pid, int fds[2], capture cap[2], int *ws)
{
    long long deadline = mono_ms() + s->timeout_ms;
    for (;;) {
        bool reading = fds[0] >= 0 || fds[1] >= 0;
        /* Both pipes ended: has it exited? (One that closes its output and
         * lingers meets the time limit, not an endless waitpid.) */
        if (!reading) {
            pid_t w = waitpid(pid, ws, WNOHANG);
            if (w == pid)
                return COMMAND_EXITED;
            if (w < 0 && errno != EINTR)
                return COMMAND_ERROR;
        }
        if (s->stop && atomic_load(s->stop))
            return COMMAND_STOPPED;
        long long left = deadline - mono_ms();
        if (left <= 0)
            return COMMAND_TIMED_OUT;
        int slice = reading ? COMMAND_STOP_POLL_MS : 10;
        struct pollfd p[2] = { { .fd = fds[0], .events = POLLIN }, { .fd = fds[1], .events = POLLIN } };
        if (poll(p, 2, (int)(left < slice ? left : slice)) < 0 && errno != EINTR)
            return COMMAND_ERROR;
        for (int i = 0; i < 2; i++) {
            if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int r = read_some(fds[i], &cap[i], i == 0);
            if (r < 0)
                return COMMAND_ERROR;
            if (r == 2)
                return COMMAND_TOO_MUCH_OUTPUT;
            if (r == 1) {
                close(fds[i]);
                fds[i] = -1;
            }
        }
    }
}

/* stderr's text on one line into out, its lines trimmed and joined by "; ". */
static void one_line(const char *s, size_t n, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && o + 3 < len;) {
        size_t e = i;
        while (e < n && s[e] != '\n' && s[e] != '\r')
            e++;
        size_t a = i, b = e;
        while (a < b && isspace((unsigned char)s[a]))
            a++;
        while (b > a && isspace((unsigned char)s[b - 1]))
            b--;
        if (b > a) {
            int k = snprintf(out + o, len - o, "%s%.*s", o ? "; " : "", (int)(b - a), s + a);
            o = k < 0 ? o : o + (size_t)k < len ? o + (size_t)k : len - 1;
        }
        i = e + 1;
    }
    for (char *p = out; *p; p++)
        if (*p == '\t')
            *p = ' ';
}

/* The message for a child that ended on its own with a non-zero status. */
static int set_status_err(const char *name, const command_result *r, char *err, size_t errlen)
{
    char raw[2048], text[1024];
    size_t n = r->err_len < (sizeof raw - 1) / 2 ? r->err_len : (sizeof raw - 1) / 2;
    size_t rawlen = utf8_from_any(r->err ? r->err : "", n, raw, sizeof raw);
    one_line(raw, rawlen, text, sizeof text);
    if (r->end == COMMAND_SIGNALED)
        return set_err(err, errlen, "%s was killed by signal %d%s%s", name, r->status, *text ? ": " : "", text);
    return set_err(err, errlen, "%s exited with status %d%s%s", name, r->status, *text ? ": " : "", text);
}

/* The message for a wait that a limit ended. */
static int set_limit_err(const command_spec *s, const char *name, command_end end, char *err, size_t errlen)
{
    switch (end) {
    case COMMAND_TIMED_OUT:
        if (s->timeout_ms % 1000 == 0)
            return set_err(err, errlen, "%s did not finish within %d s", name, s->timeout_ms / 1000);
        return set_err(err, errlen, "%s did not finish within %d ms", name, s->timeout_ms);
    case COMMAND_TOO_MUCH_OUTPUT:
        if (s->out_max % (1u << 20) == 0)
            return set_err(err, errlen, "%s wrote more than %zu MiB", name, s->out_max >> 20);
        return set_err(err, errlen, "%s wrote more than %zu bytes", name, s->out_max);
    case COMMAND_STOPPED:
        return set_err(err, errlen, "%s was stopped", name);
    default:
        return set_err(err, errlen, "%s: %s", name, errno ? strerror(errno) : "out of memory");
    }
}

int command_run(const command_spec *s, command_result *r, char *err, size_t errlen)
{
    const char *name = s->name ? s->name : s->path;
    int pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, ret = -1, ws = 0;
    capture cap[2] = { { .max = s->out_max }, { .max = s->err_max } };
    memset(r, 0, sizeof *r);
    r->end = COMMAND_ERROR;
    if (pipe2(pout, O_CLOEXEC) != 0 || pipe2(perr, O_CLOEXEC) != 0) {
        set_err(err, errlen, "cannot run %s: pipe: %s", name, strerror(errno));
        goto out;
    }
    pid_t pid;
    int rc = spawn(s, pout[1], perr[1], &pid);
    if (rc) {
        r->end = COMMAND_NOT_STARTED;
        set_err(err, errlen, "cannot run %s: %s", name, strerror(rc));
        goto out;
    }
    close(pout[1]);
    close(perr[1]);
    pout[1] = perr[1] = -1;
    int fds[2] = { pout[0], perr[0] };
    pout[0] = perr[0] = -1;
    errno = 0;
    command_end end = wait_child(s, pid, fds, cap, &ws);
    int saved = errno;
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (end != COMMAND_EXITED) {
        kill(pid, SIGKILL);                      /* our own child, not yet reaped: the pid is still ours */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        r->end = end;
        errno = saved;
        set_limit_err(s, name, end, err, errlen);
        goto out;
    }
    r->end = WIFSIGNALED(ws) ? COMMAND_SIGNALED : COMMAND_EXITED;
    r->status = WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws);
    if (!cap[0].data && !(cap[0].data = strdup(""))) {
        set_err(err, errlen, "%s: out of memory", name);
        goto out;
    }
    ret = r->end == COMMAND_EXITED && r->status == 0 ? 0 : -1;
out:
    r->out = cap[0].data;
    r->out_len = cap[0].len;
    r->err = cap[1].data;
    r->err_len = cap[1].len;
    if (ret != 0 && (r->end == COMMAND_EXITED || r->end == COMMAND_SIGNALED) && r->out)
        set_status_err(name, r, err, errlen);
    for (int i = 0; i < 2; i++) {
        if (pout[i] >= 0)
            close(pout[i]);
        if (perr[i] >= 0)
            close(perr[i]);
    }
    return ret;
}

void command_result_free(command_result *r)
{
    if (!r)
        return;
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}
