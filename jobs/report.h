/* jobs/report.h: how a worker process reports to kiln serve's scheduler
 * (`kiln worker`, jobs/runner.c; `kiln evaluate`, jobs/eval_worker.c).
 *
 * Reports are JSON lines on stdout, one a line ({"t":"status"|"progress"|
 * "metric"|"error"|"done",...}: the scheduler's protocol, jobs/scheduler.c);
 * human-readable lines go to stderr, each with a UTC time stamp (the log).
 * A failed write of a report means the server is gone: the process ends at
 * once (_exit(1)), as a worker whose parent died must.
 *
 * Stop signals: SIGTERM or SIGINT sets a flag the worker polls between steps
 * (report_stopping); the handler is reset after the first signal, so a
 * second one kills at once. SIGPIPE keeps its default action.
 *
 * Human mode (`kiln train`, runner_run with human output): no JSON lines; the
 * log lines go to stdout, errors to stderr as "<name>: error: <message>".
 */
#ifndef KILN_JOBS_REPORT_H
#define KILN_JOBS_REPORT_H

#include <stdbool.h>
#include <stddef.h>

/* Starts reporting: human NULL for JSON lines to the scheduler, else the
 * command's name for a person ("kiln train"). Line-buffers stdout, blocks
 * SIGTERM and SIGINT in this thread (and so in every thread started after)
 * and starts the thread that takes them with sigwait: the first asks for a
 * stop, a second ends the process. Every other signal is unblocked. Call
 * once, first, before any other thread exists (report.c says why no signal
 * handler may run on a computing thread). */
void report_start(const char *human);

/* Reports (report_emit, report_error's JSON line) appended to the file at
 * path instead of stdout, each line flushed as it is written (kiln worker
 * --report-file, for a dispatcher that does not read the worker's stdout:
 * it tails the file). Returns 0, or -1 with err set. */
int report_to_file(const char *path, char *err, size_t errlen);

/* A rank other than 0 of a multi-process job (jobs/runner.c): no reports
 * and no log lines (rank 0 makes them); report_error writes
 * "rank <rank>: error: <message>" on stderr. */
void report_quiet(int rank);

/* Whether report_start was given a human name. */
bool report_human(void);

/* Whether a stop was asked for (a signal, or report_request_stop). */
bool report_stopping(void);

/* Asks for a stop as a SIGTERM would (e.g. a test's KILN_STOP_AFTER_STEP). */
void report_request_stop(void);

/* One log line with a UTC time stamp (stderr; stdout in human mode). */
void report_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes one report line (line without its newline); nothing in human mode.
 * A failed write ends the process (_exit(1)) after a log line. */
void report_emit(const char *line);

/* Reports {"t":"error","message":msg} and logs it (human mode: msg on
 * stderr after the name). */
void report_error(const char *msg);

#endif
