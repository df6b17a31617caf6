/* tests/unit/test_command.c: jobs/command.h with real processes (/bin/sh):
 * exit codes and stderr in the message, a signal, stdout past its cap and
 * stderr past its, the time limit (one that sleeps, one that closes its
 * output and lingers), the stop flag, a missing command, the environment,
 * no inherited descriptor, an empty signal mask and default dispositions in
 * the child of a thread that blocks every signal, and that only the
 * command's own pid is reaped. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "jobs/command.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs `sh -c script` (sh found on PATH) with the given limits. */
static int sh(const char *script, int timeout_ms, size_t out_max, const atomic_bool *stop, command_result *r,
              char *err, size_t errlen)
{
    char *argv[] = { "sh", "-c", (char *)script, NULL };
    command_spec s = { .path = "sh", .argv = argv, .timeout_ms = timeout_ms, .out_max = out_max,
                       .err_max = 64, .stop = stop };
    return command_run(&s, r, err, errlen);
}

static void exit_codes(void **state)
{
    (void)state;
    command_result r;
    char err[512] = "";
    assert_int_equal(sh("printf abc; printf 'x\\ny' >&2", 5000, 1024, NULL, &r, err, sizeof err), 0);
    assert_int_equal(r.end, COMMAND_EXITED);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, 3);
    assert_string_equal(r.out, "abc");
    assert_string_equal(r.err, "x\ny");
    command_result_free(&r);

    assert_int_equal(sh("exit 0", 5000, 1024, NULL, &r, err, sizeof err), 0);
    assert_non_null(r.out);                     /* nothing written: "", not NULL */
    assert_string_equal(r.out, "");
    command_result_free(&r);

    assert_int_equal(sh("echo partial; echo '  bad thing ' >&2; echo more >&2; exit 3", 5000, 1024, NULL, &r,
                        err, sizeof err), -1);
    assert_int_equal(r.end, COMMAND_EXITED);
    assert_int_equal(r.status, 3);
    assert_string_equal(r.out, "partial\n");
    assert_string_equal(err, "sh exited with status 3: bad thing; more");
    command_result_free(&r);

    /* stderr past err_max (64): the start is kept, the rest read and dropped. */
    assert_int_equal(sh("i=0; while [ $i -lt 500 ]; do echo errline >&2; i=$((i+1)); done; echo done", 5000, 1024,
                        NULL, &r, err, sizeof err), 0);
    assert_int_equal(r.err_len, 64);
    assert_int_equal(strlen(r.err), 64);
    assert_string_equal(r.out, "done\n");
    command_result_free(&r);
}

static void signal_end(void **state)
{
    (void)state;
    command_result r;
    char err[512];
    assert_int_equal(sh("echo dying >&2; kill -TERM $$", 5000, 1024, NULL, &r, err, sizeof err), -1);
    assert_int_equal(r.end, COMMAND_SIGNALED);
    assert_int_equal(r.status, SIGTERM);
    assert_string_equal(err, "sh was killed by signal 15: dying");
    command_result_free(&r);
}

static void output_cap(void **state)
{
    (void)state;
    command_result r;
    char err[512];
    double t0 = mono();
    assert_int_equal(sh("exec cat /dev/zero", 20000, 100000, NULL, &r, err, sizeof err), -1);
    assert_true(mono() - t0 < 5.0);
    assert_int_equal(r.end, COMMAND_TOO_MUCH_OUTPUT);
    assert_int_equal(r.out_len, 100000);        /* what fit, no more */
    assert_string_equal(err, "sh wrote more than 100000 bytes");
    command_result_free(&r);

    /* exactly at the cap is fine */
    assert_int_equal(sh("head -c 4096 /dev/zero", 5000, 4096, NULL, &r, err, sizeof err), 0);
    assert_int_equal(r.out_len, 4096);
    command_result_free(&r);

    char *argv[] = { "sh", "-c", "exec cat /dev/zero", NULL };
    command_spec s = { .path = "/bin/sh", .argv = argv, .name = "zeros", .timeout_ms = 20000,
                       .out_max = 1u << 20 };
    assert_int_equal(command_run(&s, &r, err, sizeof err), -1);
    assert_string_equal(err, "zeros wrote more than 1 MiB");
    command_result_free(&r);
}

static void time_limit(void **state)
{
    (void)state;
    command_result r;
    char err[512];
    double t0 = mono();
    assert_int_equal(sh("sleep 30", 300, 1024, NULL, &r, err, sizeof err), -1);
    double took = mono() - t0;
    assert_true(took >= 0.29 && took < 1.5);
    assert_int_equal(r.end, COMMAND_TIMED_OUT);
    assert_string_equal(err, "sh did not finish within 300 ms");
    command_result_free(&r);

    /* Closes its output and lingers: the time limit, not an endless waitpid. */
    t0 = mono();
    assert_int_equal(sh("exec >&- 2>&-; exec sleep 30", 500, 1024, NULL, &r, err, sizeof err), -1);
    took = mono() - t0;
    assert_true(took >= 0.49 && took < 1.7);
    assert_int_equal(r.end, COMMAND_TIMED_OUT);
    command_result_free(&r);

    char *argv[] = { "sleep", "30", NULL };
    command_spec s = { .path = "sleep", .argv = argv, .timeout_ms = 2000, .out_max = 16 };
    t0 = mono();
    assert_int_equal(command_run(&s, &r, err, sizeof err), -1);
    assert_true(mono() - t0 < 3.2);
    assert_string_equal(err, "sleep did not finish within 2 s");
    command_result_free(&r);
}

static void *set_after(void *arg)
{
    usleep(200000);
    atomic_store((atomic_bool *)arg, true);
    return NULL;
}

static void stop_flag(void **state)
{
    (void)state;
    command_result r;
    char err[512];
    atomic_bool stop = false;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_after, &stop), 0);
    double t0 = mono();
    assert_int_equal(sh("sleep 30", 20000, 1024, &stop, &r, err, sizeof err), -1);
    double took = mono() - t0;
    pthread_join(t, NULL);
    assert_true(took >= 0.19 && took < 1.5);
    assert_int_equal(r.end, COMMAND_STOPPED);
    assert_string_equal(err, "sh was stopped");
    command_result_free(&r);

    /* already set: it does not wait at all for the command */
    t0 = mono();
    assert_int_equal(sh("sleep 30", 20000, 1024, &stop, &r, err, sizeof err), -1);
    assert_true(mono() - t0 < 1.0);
    assert_int_equal(r.end, COMMAND_STOPPED);
    command_result_free(&r);
}

static void missing(void **state)
{
    (void)state;
    command_result r;
    char err[512];
    char *argv[] = { "x", NULL };
    command_spec s = { .path = "/nonexistent/kiln-no-such-command", .argv = argv, .timeout_ms = 1000,
                       .out_max = 16 };
    assert_int_equal(command_run(&s, &r, err, sizeof err), -1);
    assert_int_equal(r.end, COMMAND_NOT_STARTED);
    assert_string_equal(err, "cannot run /nonexistent/kiln-no-such-command: No such file or directory");
    command_result_free(&r);
    s.path = "kiln-no-such-command";           /* searched on PATH */
    assert_int_equal(command_run(&s, &r, err, sizeof err), -1);
    assert_int_equal(r.end, COMMAND_NOT_STARTED);
    assert_non_null(strstr(err, "No such file"));
    command_result_free(&r);
}

static void environment_and_fds(void **state)
{
    (void)state;
    command_result r;
    char err[512], script[128];
    int fd = open("/dev/null", O_RDONLY);           /* no O_CLOEXEC: only closefrom keeps it out */
    assert_true(fd > 2);
    snprintf(script, sizeof script, "echo \"$KILN_X\"; [ -e /proc/self/fd/%d ] && echo leaked; exit 0", fd);
    char *argv[] = { "sh", "-c", script, NULL };
    char *envp[] = { "KILN_X=42", "PATH=/usr/bin:/bin", NULL };
    command_spec s = { .path = "/bin/sh", .argv = argv, .envp = envp, .timeout_ms = 5000, .out_max = 64 };
    assert_int_equal(command_run(&s, &r, err, sizeof err), 0);
    assert_string_equal(r.out, "42\n");
    command_result_free(&r);
    close(fd);
}

/* From a thread with every signal blocked and SIGTERM ignored (as kiln serve
 * runs), the child's mask is empty and nothing is ignored. */
static void *masked_run(void *arg)
{
    command_result *r = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    char *argv[] = { "grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status", NULL };
    command_spec s = { .path = "grep", .argv = argv, .timeout_ms = 5000, .out_max = 256 };
    char err[512];
    if (command_run(&s, r, err, sizeof err) != 0)
        fprintf(stderr, "%s\n", err);
    return NULL;
}

static void signal_mask(void **state)
{
    (void)state;
    command_result r = { 0 };
    struct sigaction ign = { .sa_handler = SIG_IGN }, old;
    sigaction(SIGTERM, &ign, &old);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, masked_run, &r), 0);
    pthread_join(t, NULL);
    sigaction(SIGTERM, &old, NULL);
    assert_non_null(r.out);
    unsigned long long blk = 1, ignored = 1;
    assert_int_equal(sscanf(r.out, "SigBlk:\t%llx\nSigIgn:\t%llx", &blk, &ignored), 2);
    assert_int_equal(blk, 0);
    /* glibc's posix_spawn leaves its own two internal signals (32, 33:
     * SIGCANCEL, SIGSETXID) ignored in the child; every other one is default. */
    assert_int_equal(ignored & ~(3ull << 31), 0);     /* SIGTERM, ignored here, included */
    command_result_free(&r);
}

/* Another child of ours that has exited stays ours to reap. */
static void own_pid_only(void **state)
{
    (void)state;
    pid_t other = fork();
    assert_true(other >= 0);
    if (other == 0)
        _exit(7);
    command_result r;
    char err[512];
    assert_int_equal(sh("sleep 0.2", 5000, 16, NULL, &r, err, sizeof err), 0);
    command_result_free(&r);
    int ws = 0;
    assert_int_equal(waitpid(other, &ws, 0), other);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exit_codes),
        cmocka_unit_test(signal_end),
        cmocka_unit_test(output_cap),
        cmocka_unit_test(time_limit),
        cmocka_unit_test(stop_flag),
        cmocka_unit_test(missing),
        cmocka_unit_test(environment_and_fds),
        cmocka_unit_test(signal_mask),
        cmocka_unit_test(own_pid_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
