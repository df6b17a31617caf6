/* engine/fileio.c: atomic writes, whole-file reads, mkdir -p, rm -rf
 * (contract in engine/fileio.h). */
#define _GNU_SOURCE           /* nftw's FTW_PHYS and FTW_DEPTH */
#include "engine/fileio.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIO_READ_MAX (SIZE_MAX / 2)   /* keeps the buffer arithmetic below from overflowing */


int fio_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int fio_fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return fio_fsync_dir(".");
    if (slash == path)
        return fio_fsync_dir("/");
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    return fio_fsync_dir(dir);
}

int fio_commit(FILE *f, const char *tmp, const char *path)
{
    int e = 0;
    if (ferror(f))
        e = errno ? errno : EIO;
    else if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        e = errno;
    if (fclose(f) != 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) != 0)
        e = errno;
    if (e) {
        errno = e;
        return -1;
    }
    fio_fsync_parent(path);
    return 0;
}

int fio_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    size_t n = strlen(path);
    char *tmp = malloc(n + sizeof ".tmp");
    if (!tmp) {
        set_err(err, errlen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", sizeof ".tmp");
    int rc = -1, e = 0;
    FILE *f = fopen(tmp, "wbe");
    if (!f) {
        e = errno;
        set_err(err, errlen, "cannot create %s: %s", tmp, strerror(e));
        goto out;
    }
    errno = 0;
    if (len > 0 && fwrite(data, 1, len, f) != len) {
        e = errno ? errno : EIO;
        fclose(f);
        goto fail;
    }
    if (fio_commit(f, tmp, path) != 0) {
        e = errno;
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    set_err(err, errlen, "writing %s: %s", path, strerror(e));
    unlink(tmp);
out:
    free(tmp);
    if (rc != 0)
        errno = e;
    return rc;
}

char *fio_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    char *buf = NULL;
    int e = 0;
    if (max > FIO_READ_MAX)
        max = FIO_READ_MAX;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        set_err(err, errlen, "cannot open %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        e = errno;
        goto read_fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        e = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        set_err(err, errlen, "%s is not a regular file", path);
        goto out;
    }
    if ((uint64_t)sb.st_size > max)
        goto too_big;
    /* Room for the NUL and one byte more, so that the read that sees the end
     * needs no second buffer when the file is as large as fstat said. */
    size_t cap = (size_t)sb.st_size + 2, used = 0;
    if (!(buf = malloc(cap)))
        goto oom;
    for (;;) {
        if (used + 1 == cap) {                /* the file grew: used <= max here */
            size_t ncap = cap <= (max + 2) / 2 ? cap * 2 : max + 2;
            char *nb = realloc(buf, ncap);
            if (!nb)
                goto oom;
            buf = nb;
            cap = ncap;
        }
        ssize_t k = read(fd, buf + used, cap - 1 - used);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            e = errno;
            goto read_fail;
        }
        if (k == 0)
            break;
        used += (size_t)k;
        if (used > max)
            goto too_big;
    }
    buf[used] = '\0';
    if (len)
        *len = used;
    close(fd);
    return buf;
too_big:
    e = EFBIG;
    set_err(err, errlen, "%s is larger than %zu bytes", path, max);
    goto out;
oom:
    e = ENOMEM;
    set_err(err, errlen, "out of memory reading %s (%lld bytes)", path, (long long)sb.st_size);
    goto out;
read_fail:
    set_err(err, errlen, "cannot read %s: %s", path, strerror(e));
out:
    free(buf);
    close(fd);
    errno = e;
    return NULL;
}

int fio_mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    if (stat(buf, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    int r = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    if (r != 0 && errno != ENOENT)
        return -1;
    return 0;
}

int fio_rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlink(path);
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int fio_empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = 0, e = 0;
    struct dirent *ent;
    char path[PATH_MAX];
    while ((ent = readdir(d))) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= (int)sizeof path) {
            rc = -1;
            e = ENAMETOOLONG;
        } else if (fio_rm_rf(path) != 0) {
            rc = -1;
            e = errno;
        }
    }
    closedir(d);
    if (rc != 0)
        errno = e;
    return rc;
}
