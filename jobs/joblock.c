/* jobs/joblock.c: a job folder's lock (contract in joblock.h). */
#include "jobs/joblock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/layout.h"     /* layout_file */

#define POLL_MS 50           /* how often a waiting taker tries again */

static pid_t read_pid(int fd)
{
    char buf[32];
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    if (k <= 0)
        return 0;
    buf[k] = '\0';
    long v = strtol(buf, NULL, 10);
    return v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

/* Writes this process's pid into the locked file. Failing to is not fatal:
 * the pid is for messages only. */
static void write_pid(int fd)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) == n)
        return;
    fprintf(stderr, "kiln: cannot write the pid in the job folder's lock: %s\n", strerror(errno));
}

static int lock_path(const char *dir, char *path, size_t n, char *err, size_t errlen)
{
    if (layout_file(path, n, dir, JOBLOCK_FILE) != 0)
        return set_err(err, errlen, "the path of %s/%s is too long", dir, JOBLOCK_FILE);
    return 0;
}

int joblock_take(const char *dir, int wait_ms, int *fd, pid_t *holder, char *err, size_t errlen)
{
    char path[PATH_MAX];
    *fd = -1;
    *holder = 0;
    if (lock_path(dir, path, sizeof path, err, errlen) != 0)
        return -1;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f < 0)
        return set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
    for (int waited = 0;; waited += POLL_MS) {
        if (flock(f, LOCK_EX | LOCK_NB) == 0) {
            write_pid(f);
            *fd = f;
            return 0;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) {
            set_err(err, errlen, "cannot lock %s: %s", path, strerror(errno));
            close(f);
            return -1;
        }
        if (waited >= wait_ms)
            break;
        struct timespec ts = { 0, POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    *holder = read_pid(f);
    close(f);
    return JOBLOCK_BUSY;
}

int joblock_adopt(const char *dir, int fd, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (lock_path(dir, path, sizeof path, err, errlen) != 0)
        return -1;
    struct stat a, b;
    if (fstat(fd, &a) != 0)
        return set_err(err, errlen, "--lock-fd %d is not an open file: %s", fd, strerror(errno));
    if (stat(path, &b) != 0)
        return set_err(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return set_err(err, errlen, "--lock-fd %d is not %s", fd, path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        pid_t other = read_pid(fd);
        if (other > 0)
            return set_err(err, errlen, "%s is held by another process (pid %ld), not given to "
                           "this worker", path, (long)other);
        return set_err(err, errlen, "%s is held by another process, not given to this worker",
                       path);
    }
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0)
        fcntl(fd, F_SETFD, flags | FD_CLOEXEC);   /* nothing this worker starts inherits it */
    write_pid(fd);
    return 0;
}

pid_t joblock_holder(const char *dir)
{
    char path[PATH_MAX];
    if (lock_path(dir, path, sizeof path, NULL, 0) != 0)
        return 0;
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0)
        return 0;
    pid_t p = read_pid(f);
    close(f);
    return p;
}
