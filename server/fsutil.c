/* server/fsutil.c: small file-system helpers (contract in fsutil.h). */
#define _GNU_SOURCE           /* nftw's FTW_PHYS, FTW_DEPTH */
#include "server/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *dir)
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

int fs_rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlink(path);
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

char *fs_read_file(const char *path, size_t max, size_t *len)
{
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        goto fail;
    if ((uint64_t)sb.st_size > max) {
        errno = EFBIG;
        goto fail;
    }
    size_t cap = (size_t)sb.st_size + 1, used = 0;
    buf = malloc(cap);
    if (!buf)
        goto fail;
    for (;;) {
        if (used + 1 >= cap) {
            if (cap > max) {
                errno = EFBIG;
                goto fail;
            }
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            if (ncap <= cap)
                ncap = cap + 1;
            char *nb = realloc(buf, ncap);
            if (!nb)
                goto fail;
            buf = nb;
            cap = ncap;
        }
        ssize_t k = read(fd, buf + used, cap - 1 - used);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        if (k == 0)
            break;
        used += (size_t)k;
    }
    buf[used] = '\0';
    close(fd);
    if (len)
        *len = used;
    return buf;
fail:
    {
        int e = errno;
        free(buf);
        close(fd);
        errno = e;
    }
    return NULL;
}

void fs_empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path)
            fs_rm_rf(path);
    }
    closedir(d);
}
