/* jobs/command.h: run a command with a time limit and capped output.
 *
 * command_run spawns one process (posix_spawnp: the path is searched on PATH
 * when it has no '/'), stdin on /dev/null, stdout and stderr on pipes, every
 * other descriptor closed, with an EMPTY signal mask and default signal
 * dispositions whatever the calling thread has (kiln serve blocks every
 * signal for sigwait, and a child inherits the mask). It reads both pipes in
 * a poll loop until the child has exited and both pipes ended. It gives up,
 * SIGKILLs the child and reaps it when the time limit passes (a child that
 * closes its output and lingers included), stdout passes its cap, memory
 * runs out, or *stop becomes true (checked at least every
 * COMMAND_STOP_POLL_MS). It never waits without a bound and reaps only the
 * pid it spawned (waitpid on that pid, never -1).
 */
#ifndef KILN_JOBS_COMMAND_H
#define KILN_JOBS_COMMAND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define COMMAND_STOP_POLL_MS 100   /* how often *stop is read while waiting */

typedef struct command_spec {
    const char *path;           /* the program; searched on PATH when it has no '/' */
    char *const *argv;          /* argv[0] first, NULL-terminated */
    char *const *envp;          /* the child's environment; NULL: environ */
    const char *name;           /* how messages name it ("sinfo --json"); NULL: path */
    int timeout_ms;             /* > 0: past it the child is killed */
    size_t out_max;             /* stdout bytes kept; more is a failure */
    size_t err_max;             /* stderr bytes kept; more is read and dropped */
    const atomic_bool *stop;    /* NULL, or true: give up now */
} command_spec;

typedef enum command_end {
    COMMAND_EXITED,             /* it exited: status is its exit code */
    COMMAND_SIGNALED,           /* a signal ended it: status is the signal */
    COMMAND_NOT_STARTED,        /* posix_spawn failed (not found, not executable) */
    COMMAND_TIMED_OUT,          /* killed at timeout_ms */
    COMMAND_TOO_MUCH_OUTPUT,    /* killed when stdout passed out_max */
    COMMAND_STOPPED,            /* killed because *stop became true */
    COMMAND_ERROR,              /* pipe, poll or memory failed (killed when started) */
} command_end;

typedef struct command_result {
    command_end end;
    int status;                 /* exit code (COMMAND_EXITED) or signal (COMMAND_SIGNALED); else 0 */
    char *out;                  /* stdout, NUL-terminated, out_len bytes; malloc'ed, never NULL after
                                 * command_run returned 0 */
    size_t out_len;
    char *err;                  /* stderr's first err_max bytes, NUL-terminated (NULL when none) */
    size_t err_len;
} command_result;

/* Runs spec's command to its end. Returns 0 when it exited with status 0;
 * else -1 with err set to one line that names the command (spec->name) and
 * says why: "X exited with status 1: <its stderr, lines joined by "; ">",
 * "X was killed by signal 9", "cannot run X: No such file or directory",
 * "X did not finish within 20 s", "X wrote more than 32 MiB", "X was
 * stopped". *r is filled either way (r->end, r->status, what it wrote) and
 * is the caller's to free with command_result_free. */
int command_run(const command_spec *spec, command_result *r, char *err, size_t errlen);

/* Frees what r holds and zeroes it; r may be NULL. */
void command_result_free(command_result *r);

#endif
