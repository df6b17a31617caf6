/* jobs/report.c: a worker's reports, log lines and stop signals (contract in
 * report.h). */
#include "jobs/report.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static volatile sig_atomic_t stop_requested;
static const char *human_name;   /* NULL: JSON lines for the scheduler */
static FILE *report_file;        /* report_to_file's; NULL: stdout */
static int quiet_rank = -1;      /* report_quiet's rank; -1: not quiet */

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

void report_start(const char *human)
{
    human_name = human;
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    /* A second signal takes the default action; a report being written when the
     * signal comes is finished, not failed with EINTR. */
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

bool report_human(void)
{
    return human_name != NULL;
}

bool report_stopping(void)
{
    return stop_requested != 0;
}

void report_request_stop(void)
{
    stop_requested = 1;
}

int report_to_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "a");
    if (!f) {
        snprintf(err, errlen, "cannot open %s to append reports: %s", path, strerror(errno));
        return -1;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    if (report_file)
        fclose(report_file);
    report_file = f;
    return 0;
}

void report_quiet(int rank)
{
    quiet_rank = rank;
}

void report_log(const char *fmt, ...)
{
    if (quiet_rank >= 0)
        return;
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    FILE *f = human_name ? stdout : stderr;
    fprintf(f, "%s ", stamp);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}

void report_emit(const char *line)
{
    if (human_name || quiet_rank >= 0)
        return;
    FILE *out = report_file ? report_file : stdout;
    if (fputs(line, out) == EOF || fputc('\n', out) == EOF || fflush(out) == EOF) {
        report_log("cannot write to the server (%s); stopping", strerror(errno));
        _exit(1);
    }
}

void report_error(const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o && cJSON_AddStringToObject(o, "t", "error") && cJSON_AddStringToObject(o, "message", msg))
        text = cJSON_PrintUnformatted(o);
    report_emit(text ? text : "{\"t\":\"error\",\"message\":\"out of memory\"}");
    cJSON_free(text);
    cJSON_Delete(o);
    if (human_name)
        fprintf(stderr, "%s: error: %s\n", human_name, msg);
    else if (quiet_rank >= 0)
        fprintf(stderr, "rank %d: error: %s\n", quiet_rank, msg);
    else
        report_log("error: %s", msg);
}
