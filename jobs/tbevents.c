/* jobs/tbevents.c: TensorBoard event files (format in DESIGN.md and tbevents.h).
 *
 * Guarantees: every record is framed and written with one write(2) loop as soon
 * as tb_scalar is called, so the file is readable while the job runs and after
 * a crash holds only whole records (up to a torn last record). The first
 * record carries file_version "brain.Event:2". tb_close fsyncs. The file is
 * created with O_EXCL: an existing file is never appended to or truncated.
 */
#include "jobs/tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "tensorboard.pb-c.h"   /* Tensorflow__Event, generated from jobs/proto/tensorboard.proto */

#define TB_FILE_VERSION "brain.Event:2"

struct tb_writer {
    int fd;
    char *path;
};


static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Frames one serialized event as a record and writes it. */
static int write_event(tb_writer *w, const Tensorflow__Event *ev, char *err, size_t errlen) {
    size_t len = tensorflow__event__get_packed_size(ev);
    size_t total = 8 + 4 + len + 4;
    uint8_t *rec = malloc(total);
    if (!rec) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    put_le64(rec, (uint64_t)len);
    put_le32(rec + 8, tb_masked_crc(crc32c(0, rec, 8)));
    tensorflow__event__pack(ev, rec + 12);
    put_le32(rec + 12 + len, tb_masked_crc(crc32c(0, rec + 12, len)));
    int rc = 0;
    size_t off = 0;
    while (off < total) {
        ssize_t n = write(w->fd, rec + off, total - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            set_err(err, errlen, "writing %s: %s", w->path, strerror(errno));
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    free(rec);
    return rc;
}

tb_writer *tb_open(const char *dir, double wall_time, char *err, size_t errlen) {
    char host[256];
    if (gethostname(host, sizeof host) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    tb_writer *w = calloc(1, sizeof *w);
    if (!w) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    w->fd = -1;
    int n = snprintf(NULL, 0, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
    w->path = malloc((size_t)n + 1);
    if (!w->path) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    snprintf(w->path, (size_t)n + 1, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        set_err(err, errlen, "creating %s: %s", w->path, strerror(errno));
        goto fail;
    }
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)TB_FILE_VERSION;
    if (write_event(w, &ev, err, errlen) != 0) {
        close(w->fd);
        unlink(w->path);
        w->fd = -1;
        goto fail;
    }
    return w;
fail:
    free(w->path);
    free(w);
    return NULL;
}

int tb_scalar(tb_writer *w, const char *tag, int64_t step, float value, double wall_time,
              char *err, size_t errlen) {
    Tensorflow__Summary__Value val = TENSORFLOW__SUMMARY__VALUE__INIT;
    val.tag = (char *)tag;
    val.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    val.simple_value = value;
    Tensorflow__Summary__Value *vals[1] = { &val };
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = vals;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.has_step = 1;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(w, &ev, err, errlen);
}

void tb_close(tb_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        fsync(w->fd);
        close(w->fd);
    }
    free(w->path);
    free(w);
}

const char *tb_path(const tb_writer *w) { return w->path; }
