/* jobs/import_folder.c: a folder on the server, walked like an archive
 * (jobs/import_internal.h).
 */
#include "jobs/import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "jobs/import_internal.h"

/* ---- reading a folder on the server ------------------------------------------------ */

/* A folder is walked like an archive: the same passes see the same relative
 * paths in a fixed order (names sorted by strcmp at each level), hidden files
 * and __MACOSX are passed over, the caps hold. Every step below the root is
 * an openat with O_NOFOLLOW from the folder's own descriptor, so a link (to a
 * file or a folder, in or out of the tree) is never followed: it is listed as
 * skipped, and nothing outside the folder is read even if the tree changes
 * during the walk. */
#define FOLDER_MAX_DEPTH 64

typedef struct folder_walk {
    importer *im;
    const archive_pass *p;
    import_progress_fn progress;
    void *arg;
    caps cp;
    size_t files, total;     /* regular files seen so far; in the whole tree (0 while counting) */
    bool counting;           /* the first walk only counts files, for the progress */
    char *err;
    size_t errlen;
} folder_walk;

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names in the open folder fd (closed here), sorted; *n of them. */
static char **folder_names(int fd, size_t *n, char *err, size_t errlen) {
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        set_err(err, errlen, "reading a folder: %s", strerror(errno));
        return NULL;
    }
    char **names = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *de;
    bool oom = false;
    while (!oom && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn) {
                oom = true;
                break;
            }
            names = nn;
            cap = ncap;
        }
        if (!(names[cnt] = strdup(de->d_name))) oom = true;
        else cnt++;
    }
    closedir(d);
    if (oom) {
        for (size_t i = 0; i < cnt; i++) free(names[i]);
        free(names);
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    if (cnt) qsort(names, cnt, sizeof *names, cmp_name);
    *n = cnt;
    return names ? names : calloc(1, sizeof *names);
}

/* Reads the open regular file fd (closed here) of st_size bytes within the
 * caps. Returns 0 with *buf, 1 (unreadable, why) or -1 (fatal, err). */
int imp_read_fd(caps *cp, int fd, off_t size, uint8_t **buf, size_t *len, char *why, size_t whylen,
                        char *err, size_t errlen) {
    int rc = 1;
    uint8_t *b = NULL;
    if (size > (off_t)IMPORT_MAX_FILE) {
        set_err(why, whylen, "file larger than %zu bytes", IMPORT_MAX_FILE);
        goto out;
    }
    cp->total_bytes += (unsigned long long)size;
    if (imp_over_bytes(cp, err, errlen) != 0) {
        rc = -1;
        goto out;
    }
    if (!(b = malloc(size > 0 ? (size_t)size : 1))) {
        rc = set_err(err, errlen, "out of memory");
        goto out;
    }
    size_t n = 0;
    while (n < (size_t)size) {
        ssize_t got = read(fd, b + n, (size_t)size - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            set_err(why, whylen, "%s", got < 0 ? strerror(errno) : "file shrank while read");
            goto out;
        }
        n += (size_t)got;
    }
    *buf = b;
    *len = n;
    b = NULL;
    rc = 0;
out:
    free(b);
    close(fd);
    return rc;
}

/* Visits the entries of the open folder pfd (the caller's, left open), rel
 * its path below the root ("" for the root). */
static int walk_folder(folder_walk *fw, int pfd, const char *rel, int depth) {
    importer *im = fw->im;
    bool listing = fw->p->listing && !fw->counting;
    size_t n = 0;
    int lfd = dup(pfd);                  /* fdopendir takes it; pfd stays for the *at calls */
    if (lfd < 0) return set_err(fw->err, fw->errlen, "reading %s: %s", *rel ? rel : "the folder", strerror(errno));
    char **names = folder_names(lfd, &n, fw->err, fw->errlen);
    if (!names) return -1;
    int rc = -1;
    char path[4096], why[256];
    for (size_t i = 0; i < n; i++) {
        const char *name = names[i];
        if (snprintf(path, sizeof path, "%s%s%s", rel, *rel ? "/" : "", name) >= (int)sizeof path) {
            if (listing) imp_log_file(im, &im->rep.skipped, "skipped", name, "path too long");
            continue;
        }
        if (name[0] == '.' || !strcmp(name, "__MACOSX")) continue;
        struct stat st;
        if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (listing) imp_log_file(im, &im->rep.unreadable, "unreadable", path, strerror(errno));
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            if (listing) imp_log_file(im, &im->rep.skipped, "skipped", path, "a link (links are not followed)");
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (depth + 1 >= FOLDER_MAX_DEPTH) {
                if (listing) imp_log_file(im, &im->rep.skipped, "skipped", path, "folders nested too deep");
                continue;
            }
            int cfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd < 0) {
                if (listing) imp_log_file(im, &im->rep.unreadable, "unreadable", path, strerror(errno));
                continue;
            }
            int r = walk_folder(fw, cfd, path, depth + 1);
            close(cfd);
            if (r != 0) goto out;
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            if (listing) imp_log_file(im, &im->rep.skipped, "skipped", path, "not a regular file (device or pipe)");
            continue;
        }
        if (++fw->files > fw->cp.max_entries) {
            set_err(fw->err, fw->errlen, "the folder has more than %lu files (the limit)", fw->cp.max_entries);
            goto out;
        }
        if (fw->counting) continue;
        double x = fw->total ? (double)fw->files / (double)fw->total : 1;
        if (x > 1) x = 1;
        if (imp_report(fw->progress, fw->arg, fw->p->from * (1 - x) + fw->p->to * x, fw->err, fw->errlen) != 0)
            goto out;
        uint8_t *buf = NULL;
        size_t len = 0;
        int rr;
        int ffd = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (ffd < 0) {
            set_err(why, sizeof why, "%s", strerror(errno));
            rr = 1;
        } else {
            rr = imp_read_fd(&fw->cp, ffd, st.st_size, &buf, &len, why, sizeof why, fw->err, fw->errlen);
            if (rr < 0) goto out;
        }
        rr = fw->p->visit(im, fw->p->ctx, path, rr, buf, len, why, sizeof why, fw->err, fw->errlen);
        free(buf);
        if (rr < 0) goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* The walker of a folder on the server: imp_each_archive_file's contract. */
int imp_each_folder_file(importer *im, const char *root, const archive_pass *p,
                            import_progress_fn progress, void *arg, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    folder_walk fw = { im, p, progress, arg,
                       { o->max_bytes ? o->max_bytes : IMPORT_MAX_BYTES_DEFAULT, 0,
                         o->max_entries ? o->max_entries : IMPORT_MAX_ENTRIES_DEFAULT },
                       0, 0, true, err, errlen };
    for (int pass = 0; pass < 2; pass++) {
        int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) return set_err(err, errlen, "cannot read the folder %s: %s", root, strerror(errno));
        int r = walk_folder(&fw, fd, "", 0);
        close(fd);
        if (r != 0) return -1;
        if (pass == 0) {             /* the count done, the real walk */
            fw.total = fw.files;
            fw.files = 0;
            fw.counting = false;
        }
    }
    return 0;
}

