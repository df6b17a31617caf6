/* jobs/report.c: a worker's reports, log lines and stop signals (contract in
 * report.h). */
#include "jobs/report.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static atomic_int stop_requested;  /* set by the stop-signal thread or report_request_stop */
static const char *human_name;   /* NULL: JSON lines for the scheduler */
static FILE *report_file;        /* report_to_file's; NULL: stdout */
static int quiet_rank = -1;      /* report_quiet's rank; -1: not quiet */

/* The stop signals are taken by one thread of their own with sigwait, and
 * every other thread of the process blocks them (report_start blocks them
 * before any other thread exists; threads inherit the mask). No signal
 * handler may run on a thread that computes: oneDNN 2.x's JIT sgemm kernels
 * point rsp into a heap buffer while they run, so a signal frame pushed there
 * corrupts the heap (oneDNN issue 4845, fixed in 3.x). Seen as "corrupted
 * size vs. prev_size" aborts of workers that got SIGTERM during a dense
 * layer's pass. A signal taken by sigwait pushes no frame anywhere. */
static sigset_t stop_sigs;

static void *stop_signal_thread(void *arg)
{
    (void)arg;
    int sig;
    while (sigwait(&stop_sigs, &sig) != 0)
        ;
    stop_requested = 1;
    /* A second stop signal takes the default action (the process ends):
     * this thread alone lets it through, and it runs no handler. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
    for (;;)
        pause();
    return NULL;
}

void report_start(const char *human)
{
    human_name = human;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_DFL);
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    /* every signal but the stop ones unblocked (the scheduler starts workers
     * with a clean mask; a shell or srun may not) */
    pthread_sigmask(SIG_SETMASK, &stop_sigs, NULL);
    pthread_t t;
    pthread_attr_t at;
    int rc = pthread_attr_init(&at);
    if (rc == 0) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &at, stop_signal_thread, NULL);
        pthread_attr_destroy(&at);
    }
    if (rc != 0) {
        /* no thread to take them: the stop signals end the process as they
         * would with no handler (a cancel then loses the steps since the last
         * checkpoint, never the heap) */
        fprintf(stderr, "kiln: cannot start the stop-signal thread (%s): SIGTERM ends at once\n",
                strerror(rc));
        pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
    }
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
