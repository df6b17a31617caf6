/* engine/dataset.c: the prepared-dataset format (.kds splits, header.json) and
 * the batch loader. Format in engine/dataset.h.
 *
 * Guarantees:
 * - A split is opened only when its magic, version, encoding and exact size
 *   agree with its header (and, for an encoded split, its offsets increase
 *   from 0 to the end of the file); after that every index below
 *   ds_split_count() is safe to read. The image (or offsets) block starts at
 *   the first multiple of 64 at or after the end of the label array
 *   (24 + 2 * count bytes), so raw images are 64-byte aligned.
 * - Writers never leave a half-written file under the final name: images go to
 *   an unlinked scratch file, and commit writes "<path>.tmp", fsyncs it, renames
 *   it into place and fsyncs the folder.
 * - The loader's output depends only on (seed, epoch, position): the epoch's
 *   order is a Fisher-Yates shuffle driven by a splitmix64 stream seeded from
 *   (seed, epoch); each image's crop position and mirror come from a stream
 *   seeded from (seed, epoch, its position in the epoch). Which thread does
 *   an image, and when, changes nothing.
 * - Threads: `threads` workers fill two batch slots ahead of the consumer.
 *   A slot being filled hands out its images in small runs under the lock;
 *   each worker converts its run outside the lock, and the last one to finish
 *   marks the slot ready. loader_next copies a ready slot out and frees it;
 *   loader_next_view lends it to the consumer (HELD: no worker touches it)
 *   until loader_release or the consumer's next call. loader_next,
 *   loader_next_view, loader_release and loader_start_epoch are called from
 *   one thread at a time (the consumer); loader_start_epoch waits until no
 *   worker is inside a run before it reshuffles.
 * - An image is converted in one pass from the decoded pixels to the batch:
 *   each output row takes its window of a source row, mirrored or not, and
 *   writes (pixel - mean) * scale into each channel's plane. An encoded
 *   colour record is decoded into the worker's own buffer as RGBX (4 bytes a
 *   pixel), so that a mirrored row is reversed as whole 32-bit pixels and the
 *   split into planes is a loop the compiler vectorises; a raw split (CHW)
 *   and a grey record are read a plane row at a time. The arithmetic is the
 *   same float expression whatever the layout, thread or mirror, so a raw
 *   split and a lossless encoded one give the same bytes.
 */
#include "engine/dataset.h"

#include "base/err.h"
#include "base/layout.h"   /* LAYOUT_DATASET_HEADER */
#include "engine/fileio.h"   /* fio_commit, fio_write_atomic, fio_read_file */
#include "engine/image.h"    /* img_decode_chw, img_decode_into, img_encode_png, img_encode_jpeg */
#include "engine/rng.h"      /* rng_splitmix64, rng_splitmix64_below, rng_derive */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define KDS_MAGIC "KILNDS\0"     /* 7 bytes; the 8th is the version */
#define KDS_VERSION_RAW 1
#define KDS_VERSION_ENCODED 2
#define KDS_HEADER 24
#define KDS_ALIGN 64
#define KDS_MAX_CHANNELS 4       /* ds_info.mean has room for 4 */
#define INFO_FORMAT 1
#define INFO_MAX_BYTES (64u << 20)  /* header.json */
#define LOADER_SLOTS 2
#define LOADER_DEFAULT_THREADS_MAX 4

_Static_assert(DS_ENC_RAW == 0 && DS_ENC_PNG == 1 && DS_ENC_JPEG == 2,
               "the encodings are the .kds header's values");

static const char *const encoding_names[DS_ENC_COUNT] = {
    [DS_ENC_RAW] = "raw", [DS_ENC_PNG] = "png", [DS_ENC_JPEG] = "jpeg",
};

const char *ds_encoding_name(int encoding) {
    return encoding >= 0 && encoding < DS_ENC_COUNT ? encoding_names[encoding] : NULL;
}

int ds_encoding_parse(const char *name, int *encoding) {
    for (int i = 0; name && i < DS_ENC_COUNT; i++)
        if (!strcmp(name, encoding_names[i])) {
            *encoding = i;
            return 0;
        }
    return -1;
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static char *str_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* ---- reading a split ------------------------------------------------------ */

struct ds_split {
    void *map;
    size_t size;
    size_t count;
    int c, h, w;
    int encoding;                /* DS_ENC_* */
    size_t image_bytes;
    const uint8_t *labels;       /* count little-endian u16 */
    const uint8_t *images;       /* raw: count * image_bytes */
    const uint8_t *offsets;      /* encoded: count + 1 little-endian u64 */
    const uint8_t *records;      /* encoded: the record block */
};

/* The layout after the labels, checked against the file's size. Returns 0
 * or -1 with err. */
static int map_raw(ds_split *s, const char *path, char *err, size_t errlen) {
    size_t images_at = align_up(KDS_HEADER + 2 * s->count, KDS_ALIGN);
    size_t images_len, expect;
    if (__builtin_mul_overflow(s->count, s->image_bytes, &images_len) ||
        __builtin_add_overflow(images_at, images_len, &expect) || expect != s->size)
        return set_err(err, errlen, "%s: truncated or damaged (%zu bytes, the header says %zu images of %zu "
                       "bytes); re-import the dataset", path, s->size, s->count, s->image_bytes);
    s->images = (const uint8_t *)s->map + images_at;
    return 0;
}

static int map_encoded(ds_split *s, const char *path, char *err, size_t errlen) {
    size_t offsets_at = align_up(KDS_HEADER + 2 * s->count, KDS_ALIGN);
    size_t records_at = align_up(offsets_at + 8 * (s->count + 1), KDS_ALIGN);
    if (records_at > s->size)
        return set_err(err, errlen, "%s: truncated (%zu bytes, less than the offsets of %zu images); "
                       "re-import the dataset", path, s->size, s->count);
    const uint8_t *p = s->map;
    s->offsets = p + offsets_at;
    s->records = p + records_at;
    uint64_t prev = rd64(s->offsets);
    if (prev != 0)
        return set_err(err, errlen, "%s: damaged (the first record does not start at 0); re-import "
                       "the dataset", path);
    for (size_t i = 1; i <= s->count; i++) {
        uint64_t o = rd64(s->offsets + 8 * i);
        if (o <= prev)
            return set_err(err, errlen, "%s: damaged (record %zu is empty or out of order); re-import "
                           "the dataset", path, i - 1);
        prev = o;
    }
    if (prev != s->size - records_at)
        return set_err(err, errlen, "%s: truncated or damaged (%zu bytes of records, the offsets say "
                       "%llu); re-import the dataset", path, s->size - records_at,
                       (unsigned long long)prev);
    return 0;
}

ds_split *ds_split_open(const char *path, char *err, size_t errlen) {
    ds_split *s = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    size_t size = (size_t)st.st_size;
    if (size < KDS_HEADER) {
        set_err(err, errlen, "%s: truncated (%zu bytes, less than the header); re-import the dataset",
                path, size);
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    s->map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        set_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    s->size = size;
    const uint8_t *p = s->map;
    if (memcmp(p, KDS_MAGIC, 7) != 0) {
        set_err(err, errlen, "%s: not a kiln dataset split (bad magic); re-import the dataset", path);
        goto fail;
    }
    if (p[7] != KDS_VERSION_RAW && p[7] != KDS_VERSION_ENCODED) {
        set_err(err, errlen, "%s: split format version %d is not supported (this kiln reads versions "
                "%d and %d); re-import the dataset", path, p[7], KDS_VERSION_RAW, KDS_VERSION_ENCODED);
        goto fail;
    }
    s->count = rd32(p + 8);
    s->c = rd16(p + 12);
    s->h = rd16(p + 14);
    s->w = rd16(p + 16);
    s->encoding = rd16(p + 18);
    if (s->c < 1 || s->c > KDS_MAX_CHANNELS || s->h < 1 || s->w < 1) {
        set_err(err, errlen, "%s: bad image shape [%d, %d, %d] in the header", path, s->c, s->h, s->w);
        goto fail;
    }
    bool encoded = p[7] == KDS_VERSION_ENCODED;
    if (encoded ? s->encoding != DS_ENC_PNG && s->encoding != DS_ENC_JPEG : s->encoding != DS_ENC_RAW) {
        set_err(err, errlen, "%s: encoding %d does not go with format version %d; re-import the dataset",
                path, s->encoding, p[7]);
        goto fail;
    }
    if (encoded && s->c != 1 && s->c != 3) {
        set_err(err, errlen, "%s: an encoded split of %d channels (PNG and JPEG records hold 1 or 3)",
                path, s->c);
        goto fail;
    }
    s->image_bytes = (size_t)s->c * (size_t)s->h * (size_t)s->w;
    s->labels = p + KDS_HEADER;
    if ((encoded ? map_encoded(s, path, err, errlen) : map_raw(s, path, err, errlen)) != 0)
        goto fail;
    close(fd);
    return s;
fail:
    ds_split_close(s);
    s = NULL;
out:
    close(fd);
    return s;
}

void ds_split_close(ds_split *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->size);
    free(s);
}

size_t ds_split_count(const ds_split *s) { return s->count; }

void ds_split_shape(const ds_split *s, int *c, int *h, int *w) {
    if (c) *c = s->c;
    if (h) *h = s->h;
    if (w) *w = s->w;
}

const uint8_t *ds_split_image(const ds_split *s, size_t i) {
    return s->images ? s->images + i * s->image_bytes : NULL;
}

int ds_split_label(const ds_split *s, size_t i) { return rd16(s->labels + 2 * i); }

bool ds_split_encoded(const ds_split *s) { return s->encoding != DS_ENC_RAW; }

int ds_split_encoding(const ds_split *s) { return s->encoding; }

/* Record i of an encoded split (i < count): its bytes and their length. */
static const uint8_t *split_record(const ds_split *s, size_t i, size_t *len) {
    uint64_t a = rd64(s->offsets + 8 * i), b = rd64(s->offsets + 8 * (i + 1));
    *len = (size_t)(b - a);
    return s->records + a;
}

int ds_split_read(const ds_split *s, size_t i, struct img_decoder *d, uint8_t *chw, char *why, size_t whylen) {
    if (i >= s->count)
        return set_err(why, whylen, "image %zu of a split of %zu", i, s->count);
    if (!ds_split_encoded(s)) {
        memcpy(chw, s->images + i * s->image_bytes, s->image_bytes);
        return 0;
    }
    size_t len;
    const uint8_t *rec = split_record(s, i, &len);
    img_decoder *own = NULL;
    if (!d && !(d = own = img_decoder_new()))
        return set_err(why, whylen, "out of memory for an image decoder");
    int rc = img_decode_chw(d, rec, len, s->c, s->h, s->w, chw, why, whylen);
    img_decoder_free(own);
    return rc;
}

/* ---- writing a split ------------------------------------------------------ */

struct ds_writer {
    char *path, *tmp;
    FILE *out;               /* "<path>.tmp": the final file being built */
    FILE *scratch;           /* unlinked: images (or records) in the order added */
    uint16_t *labels;
    uint64_t *ends;          /* encoded: where each record ends in scratch */
    size_t count, cap;
    int c, h, w;
    int encoding, quality;
    size_t image_bytes;
    uint64_t written;        /* bytes in scratch */
    size_t expect;           /* raw with ds_writer_expect: images go straight to out; 0: via scratch */
};

static void writer_free(ds_writer *wr) {
    if (!wr) return;
    if (wr->out) fclose(wr->out);
    if (wr->scratch) fclose(wr->scratch);
    free(wr->labels);
    free(wr->ends);
    free(wr->path);
    free(wr->tmp);
    free(wr);
}

ds_writer *ds_writer_open_encoded(const char *path, int c, int h, int w, int encoding, int quality,
                                  char *err, size_t errlen) {
    if (c < 1 || c > KDS_MAX_CHANNELS || h < 1 || h > 65535 || w < 1 || w > 65535) {
        set_err(err, errlen, "bad image shape [%d, %d, %d] (channels 1..%d, sides 1..65535)",
                c, h, w, KDS_MAX_CHANNELS);
        return NULL;
    }
    if (encoding < 0 || encoding >= DS_ENC_COUNT) {
        set_err(err, errlen, "unknown encoding %d", encoding);
        return NULL;
    }
    if (encoding != DS_ENC_RAW && c != 1 && c != 3) {
        set_err(err, errlen, "%s records hold 1 or 3 channels, not %d", ds_encoding_name(encoding), c);
        return NULL;
    }
    if (encoding == DS_ENC_JPEG && (quality < 1 || quality > 100)) {
        set_err(err, errlen, "JPEG quality %d is out of range 1..100", quality);
        return NULL;
    }
    ds_writer *wr = calloc(1, sizeof *wr);
    char *scratch_name = NULL;
    if (!wr) goto oom;
    wr->c = c;
    wr->h = h;
    wr->w = w;
    wr->encoding = encoding;
    wr->quality = quality;
    wr->image_bytes = (size_t)c * (size_t)h * (size_t)w;
    wr->path = strdup(path);
    wr->tmp = str_cat(path, ".tmp");
    scratch_name = str_cat(path, ".images.tmp");
    if (!wr->path || !wr->tmp || !scratch_name) goto oom;
    wr->out = fopen(wr->tmp, "wbe");
    if (!wr->out) {
        set_err(err, errlen, "%s: %s", wr->tmp, strerror(errno));
        goto fail;
    }
    wr->scratch = fopen(scratch_name, "w+be");
    if (!wr->scratch) {
        set_err(err, errlen, "%s: %s", scratch_name, strerror(errno));
        goto fail;
    }
    unlink(scratch_name);      /* lives until closed, never left behind */
    free(scratch_name);
    return wr;
oom:
    set_err(err, errlen, "out of memory");
fail:
    free(scratch_name);
    if (wr && wr->out) unlink(wr->tmp);
    writer_free(wr);
    return NULL;
}

ds_writer *ds_writer_open(const char *path, int c, int h, int w, char *err, size_t errlen) {
    return ds_writer_open_encoded(path, c, h, w, DS_ENC_RAW, 0, err, errlen);
}

/* Room for one more image's label (and record end). */
static int writer_grow(ds_writer *wr, char *err, size_t errlen) {
    if (wr->count < wr->cap) return 0;
    size_t ncap = wr->cap ? wr->cap * 2 : 1024;
    uint16_t *nl = realloc(wr->labels, ncap * sizeof *nl);
    if (!nl) return set_err(err, errlen, "out of memory");
    wr->labels = nl;
    if (wr->encoding != DS_ENC_RAW) {
        uint64_t *ne = realloc(wr->ends, ncap * sizeof *ne);
        if (!ne) return set_err(err, errlen, "out of memory");
        wr->ends = ne;
    }
    wr->cap = ncap;
    return 0;
}

int ds_writer_expect(ds_writer *wr, size_t count, char *err, size_t errlen) {
    if (wr->encoding != DS_ENC_RAW || wr->count != 0 || wr->expect != 0 || count == 0) return 0;
    /* the images' place in the final file: after the header and count labels */
    size_t at = align_up(KDS_HEADER + 2 * count, KDS_ALIGN);
    if (fseeko(wr->out, (off_t)at, SEEK_SET) != 0)
        return set_err(err, errlen, "writing %s: %s", wr->path, strerror(errno));
    wr->expect = count;
    return 0;
}

int ds_writer_add(ds_writer *wr, const uint8_t *chw, int label, char *err, size_t errlen) {
    if (label < 0 || label > 65535) {
        set_err(err, errlen, "label %d out of range 0..65535", label);
        return -1;
    }
    if (wr->count >= UINT32_MAX) {
        set_err(err, errlen, "too many images in one split");
        return -1;
    }
    if (writer_grow(wr, err, errlen) != 0) return -1;
    const uint8_t *bytes = chw;
    size_t len = wr->image_bytes;
    uint8_t *enc = NULL;
    if (wr->encoding != DS_ENC_RAW) {
        char why[256];
        int rc = wr->encoding == DS_ENC_PNG
                     ? img_encode_png(chw, wr->c, wr->h, wr->w, &enc, &len, why, sizeof why)
                     : img_encode_jpeg(chw, wr->c, wr->h, wr->w, wr->quality, &enc, &len, why, sizeof why);
        if (rc != 0) return set_err(err, errlen, "encoding image %zu as %s: %s", wr->count,
                                    ds_encoding_name(wr->encoding), why);
        bytes = enc;
    }
    if (wr->expect && wr->count >= wr->expect) {
        free(enc);
        return set_err(err, errlen, "writing %s: more than the %zu images announced", wr->path, wr->expect);
    }
    if (fwrite(bytes, 1, len, wr->expect ? wr->out : wr->scratch) != len) {
        set_err(err, errlen, "writing %s: %s", wr->path, strerror(errno));
        free(enc);
        return -1;
    }
    free(enc);
    wr->written += len;
    if (wr->encoding != DS_ENC_RAW) wr->ends[wr->count] = wr->written;
    wr->labels[wr->count++] = (uint16_t)label;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static int write_zeros_to(FILE *f, size_t at, size_t align) {
    static const uint8_t zeros[KDS_ALIGN];
    return write_all(f, zeros, align_up(at, align) - at);
}

/* Encoded: offsets[count + 1] after the labels, padded to 64. */
static int write_offsets(ds_writer *wr, size_t at) {
    uint8_t b[8];
    wr64(b, 0);
    if (write_all(wr->out, b, 8) != 0) return -1;
    for (size_t i = 0; i < wr->count; i++) {
        wr64(b, wr->ends[i]);
        if (write_all(wr->out, b, 8) != 0) return -1;
    }
    return write_zeros_to(wr->out, at + 8 * (wr->count + 1), KDS_ALIGN);
}

int ds_writer_commit(ds_writer *wr, char *err, size_t errlen) {
    int rc = -1;
    uint8_t *buf = NULL;
    bool encoded = wr->encoding != DS_ENC_RAW;
    uint8_t hdr[KDS_HEADER] = {0};
    memcpy(hdr, KDS_MAGIC, 7);
    hdr[7] = encoded ? KDS_VERSION_ENCODED : KDS_VERSION_RAW;
    wr32(hdr + 8, (uint32_t)wr->count);
    wr16(hdr + 12, (uint16_t)wr->c);
    wr16(hdr + 14, (uint16_t)wr->h);
    wr16(hdr + 16, (uint16_t)wr->w);
    wr16(hdr + 18, (uint16_t)wr->encoding);
    errno = 0;
    if (wr->expect) {            /* the images are in place: header and labels go in front */
        if (wr->count != wr->expect) {
            set_err(err, errlen, "writing %s: %zu images announced, %zu added", wr->path, wr->expect, wr->count);
            goto out;
        }
        if (fflush(wr->out) != 0 || fseek(wr->out, 0, SEEK_SET) != 0) goto io;
    }
    if (write_all(wr->out, hdr, sizeof hdr) != 0) goto io;
    uint8_t lb[2];
    for (size_t i = 0; i < wr->count; i++) {
        wr16(lb, wr->labels[i]);
        if (write_all(wr->out, lb, 2) != 0) goto io;
    }
    size_t at = KDS_HEADER + 2 * wr->count;
    if (write_zeros_to(wr->out, at, KDS_ALIGN) != 0) goto io;
    if (encoded && write_offsets(wr, align_up(at, KDS_ALIGN)) != 0) goto io;
    if (wr->expect) goto done;

    if (fflush(wr->scratch) != 0 || ferror(wr->scratch) || fseek(wr->scratch, 0, SEEK_SET) != 0) goto io;
    const size_t bufsz = 1 << 20;
    buf = malloc(bufsz);
    if (!buf) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    uint64_t left = wr->written;
    while (left > 0) {
        size_t n = left < bufsz ? (size_t)left : bufsz;
        if (fread(buf, 1, n, wr->scratch) != n || write_all(wr->out, buf, n) != 0) goto io;
        left -= n;
    }
done:;
    FILE *out = wr->out;
    wr->out = NULL;
    if (fio_commit(out, wr->tmp, wr->path) != 0) goto io;
    rc = 0;
    goto out;
io:
    set_err(err, errlen, "writing %s: %s", wr->path, errno ? strerror(errno) : "I/O error");
out:
    free(buf);
    if (rc != 0) unlink(wr->tmp);
    writer_free(wr);
    return rc;
}

void ds_writer_abort(ds_writer *wr) {
    if (!wr) return;
    if (wr->out) {
        fclose(wr->out);
        wr->out = NULL;
        unlink(wr->tmp);
    }
    writer_free(wr);
}

/* ---- the header ----------------------------------------------------------- */

void ds_info_free(ds_info *info) {
    if (!info) return;
    if (info->classes) {
        for (int i = 0; i < info->nclasses; i++) free(info->classes[i]);
        free(info->classes);
    }
    info->classes = NULL;
    info->nclasses = 0;
}

static int json_int(const cJSON *o, const char *key, long long lo, long long hi, long long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi || d != (double)(long long)d) return -1;
    *out = (long long)d;
    return 0;
}

int ds_info_load(const char *dir, ds_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char *path = str_cat(dir, "/" LAYOUT_DATASET_HEADER);
    char *text = NULL;
    cJSON *root = NULL;
    int rc = -1;
    size_t len = 0;
    if (!path) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    text = fio_read_file(path, INFO_MAX_BYTES, &len, err, errlen);
    if (!text) goto out;
    root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: not a JSON object", path);
        goto out;
    }
    long long format, v;
    if (json_int(root, "format", 0, 1000, &format) != 0 || format != INFO_FORMAT) {
        set_err(err, errlen, "%s: missing or unsupported \"format\" (this kiln reads %d); re-import the dataset",
                path, INFO_FORMAT);
        goto out;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "shape");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 3) {
        set_err(err, errlen, "%s: \"shape\" must be [C, H, W]", path);
        goto out;
    }
    int dims[3];
    for (int i = 0; i < 3; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 65535 ||
            d->valuedouble != (double)(int)d->valuedouble) {
            set_err(err, errlen, "%s: bad \"shape\"", path);
            goto out;
        }
        dims[i] = (int)d->valuedouble;
    }
    if (dims[0] > KDS_MAX_CHANNELS) {
        set_err(err, errlen, "%s: %d channels (at most %d)", path, dims[0], KDS_MAX_CHANNELS);
        goto out;
    }
    out->c = dims[0];
    out->h = dims[1];
    out->w = dims[2];

    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(root, "classes");
    int n = cJSON_IsArray(classes) ? cJSON_GetArraySize(classes) : 0;
    if (n < 1 || n > 65536) {
        set_err(err, errlen, "%s: \"classes\" must be a non-empty array of names", path);
        goto out;
    }
    out->classes = calloc((size_t)n, sizeof *out->classes);
    if (!out->classes) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, classes) {
        if (!cJSON_IsString(it)) {
            set_err(err, errlen, "%s: class names must be strings", path);
            goto out;
        }
        out->classes[out->nclasses] = strdup(it->valuestring);
        if (!out->classes[out->nclasses]) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        out->nclasses++;
    }

    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(root, "counts");
    if (!cJSON_IsObject(counts) || json_int(counts, "train", 0, UINT32_MAX, &v) != 0) {
        set_err(err, errlen, "%s: bad \"counts\"", path);
        goto out;
    }
    out->train_count = (size_t)v;
    if (json_int(counts, "val", 0, UINT32_MAX, &v) != 0) {
        set_err(err, errlen, "%s: bad \"counts\"", path);
        goto out;
    }
    out->val_count = (size_t)v;
    if (cJSON_GetObjectItemCaseSensitive(counts, "test")) {      /* headers before issue 13 have none */
        if (json_int(counts, "test", 0, UINT32_MAX, &v) != 0) {
            set_err(err, errlen, "%s: bad \"counts\"", path);
            goto out;
        }
        out->test_count = (size_t)v;
    }

    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(root, "mean");
    if (!cJSON_IsArray(mean) || cJSON_GetArraySize(mean) != out->c) {
        set_err(err, errlen, "%s: \"mean\" must hold one value per channel", path);
        goto out;
    }
    for (int i = 0; i < out->c; i++) {
        const cJSON *m = cJSON_GetArrayItem(mean, i);
        if (!cJSON_IsNumber(m) || m->valuedouble < 0 || m->valuedouble > 255) {
            set_err(err, errlen, "%s: bad \"mean\"", path);
            goto out;
        }
        out->mean[i] = (float)m->valuedouble;
    }
    const cJSON *resize = cJSON_GetObjectItemCaseSensitive(root, "resize");
    snprintf(out->resize, sizeof out->resize, "%s",
             cJSON_IsString(resize) ? resize->valuestring : "squash");
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(root, "encoding");
    out->encoding = DS_ENC_RAW;                                  /* headers before issue 13 have none */
    if (enc && (!cJSON_IsString(enc) || ds_encoding_parse(enc->valuestring, &out->encoding) != 0)) {
        set_err(err, errlen, "%s: \"encoding\" must be \"raw\", \"png\" or \"jpeg\"", path);
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) ds_info_free(out);
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

cJSON *ds_info_to_json(const ds_info *info) {
    cJSON *root = cJSON_CreateObject(), *a, *counts;
    const int shape[3] = { info->c, info->h, info->w };
    bool ok = root &&
              cJSON_AddItemToObject(root, "classes",
                                    cJSON_CreateStringArray((const char *const *)info->classes,
                                                            info->nclasses)) &&
              cJSON_AddItemToObject(root, "shape", cJSON_CreateIntArray(shape, 3)) &&
              (counts = cJSON_AddObjectToObject(root, "counts")) &&
              cJSON_AddNumberToObject(counts, "train", (double)info->train_count) &&
              cJSON_AddNumberToObject(counts, "val", (double)info->val_count) &&
              cJSON_AddNumberToObject(counts, "test", (double)info->test_count) &&
              (a = cJSON_AddArrayToObject(root, "mean"));
    for (int i = 0; ok && i < info->c && i < KDS_MAX_CHANNELS; i++) {
        /* rounded to 1e-4 so the text stays short; plenty for a mean of bytes */
        double m = (double)(long long)(info->mean[i] * 10000.0 + 0.5) / 10000.0;
        ok = cJSON_AddItemToArray(a, cJSON_CreateNumber(m));
    }
    ok = ok && cJSON_AddStringToObject(root, "resize", info->resize[0] ? info->resize : "squash");
    const char *enc = ds_encoding_name(info->encoding);
    ok = ok && cJSON_AddStringToObject(root, "encoding", enc ? enc : "raw");
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int ds_info_save(const char *dir, const ds_info *info, const char *source, char *err, size_t errlen) {
    int rc = -1;
    char *text = NULL, *path = NULL;
    cJSON *root = ds_info_to_json(info);
    if (!root || !cJSON_AddNumberToObject(root, "format", INFO_FORMAT) ||
        !cJSON_AddStringToObject(root, "source", source ? source : ""))
        goto oom;
    text = cJSON_Print(root);
    path = str_cat(dir, "/" LAYOUT_DATASET_HEADER);
    if (!text || !path) goto oom;
    rc = fio_write_atomic(path, text, strlen(text), err, errlen);
    goto out;
oom:
    set_err(err, errlen, "out of memory");
out:
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

/* ---- the loader ----------------------------------------------------------- */

int ds_augment_check(const ds_augment *aug, int h, int w, char *err, size_t errlen) {
    if (aug->crop_h < 0 || aug->crop_w < 0)
        return set_err(err, errlen, "augmentation.crop must be 0 (none) or a size in pixels");
    if (aug->crop_h > h || aug->crop_w > w) {
        if (aug->crop_h == aug->crop_w)
            return set_err(err, errlen, "augmentation.crop %d is larger than the dataset's %dx%d images "
                           "(width x height); give at most %d", aug->crop_h, w, h, h < w ? h : w);
        return set_err(err, errlen, "augmentation.crop %dx%d is larger than the dataset's %dx%d images",
                       aug->crop_w, aug->crop_h, w, h);
    }
    if (aug->pad < 0 || aug->pad > DS_AUGMENT_PAD_MAX)
        return set_err(err, errlen, "augmentation.pad must be from 0 to %d pixels", DS_AUGMENT_PAD_MAX);
    return 0;
}

size_t loader_batch_count(size_t count, int batch, bool drop_last) {
    size_t b = batch > 0 ? (size_t)batch : 1;
    if (count == 0) return 0;
    if (drop_last && count >= b) return count / b;
    return (count + b - 1) / b;
}

int loader_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n < LOADER_DEFAULT_THREADS_MAX ? (int)n : LOADER_DEFAULT_THREADS_MAX;
}

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD /* lent by loader_next_view */ };

typedef struct loader_slot {
    float *x;
    int32_t *labels;
    int state;
    size_t index;            /* which batch of the epoch it holds (FILLING, READY) */
    int n;                   /* images in the batch */
    int claimed, done;       /* FILLING: images handed out to workers, and finished */
    bool failed;             /* an image did not decode: loader_next gives -1 */
    char why[512];           /* failed: the first image's reason */
} loader_slot;

typedef struct loader_worker {
    struct loader *l;
    pthread_t thread;
    img_decoder *dec;        /* encoded splits: this thread's decoder */
    uint8_t *pix;            /* encoded splits: one stored image, decoded (h x w x l->stride) */
    uint8_t *rev;            /* one mirrored row of 4-byte pixels (4 * out_w bytes) */
    float *row;              /* one plane row before it is mirrored (out_w floats) */
} loader_worker;

struct loader {
    const ds_split *s;
    int batch;
    bool train, drop_last;
    uint64_t seed, aug_seed;
    float mean[KDS_MAX_CHANNELS];
    float scale;
    ds_augment aug;
    int c, h, w;             /* stored */
    int stride;              /* bytes a pixel in a worker's pix: 4 for a colour record (RGBX), else 1 */
    int oh, ow;              /* out: the crop */
    size_t count, nbatches;
    uint32_t *perm;          /* this epoch's order; read by the workers */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers wait here for images to do */
    pthread_cond_t done_cv;  /* the consumer waits here for a batch or an idle pool */
    loader_worker *workers;
    int nthreads, started;
    loader_slot slot[LOADER_SLOTS];   /* batch b lives in slot[b % LOADER_SLOTS] */
    loader_slot *held;       /* the slot loader_next_view lent out, or NULL */
    int epoch;
    size_t produce_next, consume_next;
    int busy;                /* workers converting images outside the lock */
    bool resetting;          /* loader_start_epoch is waiting for the workers */
    bool stop;
    char error[512];         /* the consumer's: why loader_next gave -1 */
};

/* The order of epoch `epoch`: a function of (seed, epoch) only. */
static void make_perm(loader *l) {
    for (size_t i = 0; i < l->count; i++) l->perm[i] = (uint32_t)i;
    if (!l->train || l->count < 2) return;
    uint64_t st = l->seed;
    uint64_t mix = rng_splitmix64(&st);
    st = mix ^ ((uint64_t)(uint32_t)l->epoch * 0xD1B54A32D192ED03ull);
    (void)rng_splitmix64(&st);
    for (size_t i = l->count - 1; i > 0; i--) {
        size_t j = (size_t)rng_splitmix64_below(&st, (uint64_t)i + 1);
        uint32_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

/* Where the window of one image starts in the stored image (negative: in
 * the padding) and whether it is mirrored: drawn from (seed, epoch, pos) in
 * training, the centre and no mirror otherwise. */
static void place(const loader *l, int epoch, size_t pos, int *y0, int *x0, bool *flip) {
    int ph = l->h + 2 * l->aug.pad, pw = l->w + 2 * l->aug.pad;
    if (!l->train) {
        *y0 = (ph - l->oh) / 2 - l->aug.pad;
        *x0 = (pw - l->ow) / 2 - l->aug.pad;
        *flip = false;
        return;
    }
    uint64_t st = l->aug_seed ^ ((uint64_t)(uint32_t)epoch * 0xD1B54A32D192ED03ull);
    st = rng_splitmix64(&st) ^ ((uint64_t)pos * 0x9E3779B97F4A7C15ull);
    *y0 = (int)rng_splitmix64_below(&st, (uint64_t)(ph - l->oh + 1)) - l->aug.pad;
    *x0 = (int)rng_splitmix64_below(&st, (uint64_t)(pw - l->ow + 1)) - l->aug.pad;
    *flip = l->aug.mirror && (rng_splitmix64(&st) >> 63);
}

/* ---- one image into the batch: loops written for the compiler to vectorise ---- */

static void fill_floats(float *restrict d, int n, float v) {
    for (int i = 0; i < n; i++) d[i] = v;
}

/* n bytes p to (p - m) * s. */
static void bytes_to_floats(const uint8_t *restrict p, int n, float m, float s, float *restrict d) {
    for (int i = 0; i < n; i++) d[i] = ((float)p[i] - m) * s;
}

static void reverse_floats(const float *restrict a, int n, float *restrict d) {
    for (int i = 0; i < n; i++) d[i] = a[n - 1 - i];
}

/* n pixels of 4 bytes, last first (whole 32-bit words, which SSE2 shuffles;
 * single bytes it cannot). */
static void reverse_pixels(const uint8_t *restrict p, int n, uint8_t *restrict d) {
    for (int i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, p + 4 * (size_t)(n - 1 - i), 4);
        memcpy(d + 4 * (size_t)i, &v, 4);
    }
}

/* n RGBX pixels to (p - m[k]) * s in three planes. */
static void rgbx_to_planes(const uint8_t *restrict p, int n, const float *m, float s, float *restrict d0,
                           float *restrict d1, float *restrict d2) {
    const float m0 = m[0], m1 = m[1], m2 = m[2];
    for (int i = 0; i < n; i++) {
        const uint8_t *q = p + 4 * (size_t)i;
        d0[i] = ((float)q[0] - m0) * s;
        d1[i] = ((float)q[1] - m1) * s;
        d2[i] = ((float)q[2] - m2) * s;
    }
}

/* The oh x ow window at (y0, x0) of a stored c x h x w image, mirrored when
 * flip, as (pixel - mean[c]) * scale into dst (CHW); outside the image a
 * pixel is 0. src is the image as packed RGBX when rgbx (c 3, a decoded
 * colour record), else as c planes of h x w (a raw split's CHW, or a decoded
 * grey record). Window column u is image column x0 + u; it lands at column u,
 * or at ow - 1 - u when mirrored. */
static void put_image(const loader *l, loader_worker *wk, const uint8_t *src, bool rgbx, int y0, int x0,
                      bool flip, float *dst) {
    const int c = l->c, h = l->h, w = l->w, oh = l->oh, ow = l->ow;
    const size_t plane_out = (size_t)oh * (size_t)ow, plane_in = (size_t)h * (size_t)w;
    const float scale = l->scale;
    float padv[KDS_MAX_CHANNELS];
    for (int ch = 0; ch < c; ch++) padv[ch] = (0.0f - l->mean[ch]) * scale;
    /* the columns u of the window inside the image: [ua, ub); n of them,
     * written from output column v0 on */
    int ua = x0 < 0 ? -x0 : 0, ub = w - x0 < ow ? w - x0 : ow;
    if (ub < ua) ub = ua;
    const int n = ub - ua, v0 = flip ? ow - ub : ua;
    for (int y = 0; y < oh; y++) {
        const int sy = y0 + y;
        const bool inside = sy >= 0 && sy < h && n > 0;
        for (int ch = 0; ch < c; ch++) {
            float *d = dst + (size_t)ch * plane_out + (size_t)y * (size_t)ow;
            if (!inside) {
                fill_floats(d, ow, padv[ch]);
                continue;
            }
            fill_floats(d, v0, padv[ch]);
            fill_floats(d + v0 + n, ow - v0 - n, padv[ch]);
        }
        if (!inside) continue;
        const size_t first = (size_t)sy * (size_t)w + (size_t)(x0 + ua);   /* pixel of window column ua */
        float *d0 = dst + (size_t)y * (size_t)ow + (size_t)v0;
        if (rgbx) {
            const uint8_t *p = src + 4 * first;
            if (flip) {
                reverse_pixels(p, n, wk->rev);
                p = wk->rev;
            }
            rgbx_to_planes(p, n, l->mean, scale, d0, d0 + plane_out, d0 + 2 * plane_out);
            continue;
        }
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *p = src + (size_t)ch * plane_in + first;
            float *d = d0 + (size_t)ch * plane_out;
            if (!flip) {
                bytes_to_floats(p, n, l->mean[ch], scale, d);
            } else {
                bytes_to_floats(p, n, l->mean[ch], scale, wk->row);
                reverse_floats(wk->row, n, d);
            }
        }
    }
}

/* Images first..first+k-1 of the batch in sl (which holds batch sl->index of
 * epoch `epoch`). Returns 0, or -1 with why. */
static int fill_images(loader_worker *wk, const loader_slot *sl, int epoch, int first, int k,
                       char *why, size_t whylen) {
    const loader *l = wk->l;
    size_t out_bytes = (size_t)l->c * (size_t)l->oh * (size_t)l->ow;
    for (int i = first; i < first + k; i++) {
        size_t pos = sl->index * (size_t)l->batch + (size_t)i;
        size_t idx = l->perm[pos];
        const uint8_t *src = ds_split_image(l->s, idx);
        bool rgbx = false;
        if (!src) {
            char inner[384];
            size_t len;
            const uint8_t *rec = split_record(l->s, idx, &len);
            if (img_decode_into(wk->dec, rec, len, l->c, l->h, l->w, l->stride, wk->pix, inner, sizeof inner) != 0)
                return set_err(why, whylen, "image %zu of the split: %s", idx, inner);
            src = wk->pix;
            rgbx = l->stride == 4;
        }
        int y0, x0;
        bool flip;
        place(l, epoch, pos, &y0, &x0, &flip);
        put_image(l, wk, src, rgbx, y0, x0, flip, sl->x + (size_t)i * out_bytes);
        sl->labels[i] = ds_split_label(l->s, idx);
    }
    return 0;
}

/* Images to do, under the lock: a run of the lowest batch being filled, or
 * the start of the next batch when its slot is free. */
static bool claim(loader *l, loader_slot **out, int *first, int *k) {
    if (l->resetting) return false;
    loader_slot *sl = NULL;
    for (int i = 0; i < LOADER_SLOTS; i++) {
        loader_slot *t = &l->slot[i];
        if (t->state == SLOT_FILLING && t->claimed < t->n && (!sl || t->index < sl->index)) sl = t;
    }
    if (!sl && l->produce_next < l->nbatches &&
        l->slot[l->produce_next % LOADER_SLOTS].state == SLOT_FREE) {
        sl = &l->slot[l->produce_next % LOADER_SLOTS];
        size_t b = l->produce_next++;
        size_t first_img = b * (size_t)l->batch, left = l->count - first_img;
        sl->state = SLOT_FILLING;
        sl->index = b;
        sl->n = left < (size_t)l->batch ? (int)left : l->batch;
        sl->claimed = sl->done = 0;
        sl->failed = false;
        if (l->nthreads > 1) pthread_cond_broadcast(&l->work_cv);   /* others may help */
    }
    if (!sl) return false;
    /* runs of about a quarter of a thread's share: few lock trips, even loads */
    int run = sl->n / (4 * l->nthreads);
    if (run < 1) run = 1;
    *out = sl;
    *first = sl->claimed;
    *k = sl->n - sl->claimed < run ? sl->n - sl->claimed : run;
    sl->claimed += *k;
    return true;
}

static void *worker_main(void *arg) {
    loader_worker *wk = arg;
    loader *l = wk->l;
    char why[512];
    pthread_mutex_lock(&l->mu);
    for (;;) {
        loader_slot *sl = NULL;
        int first = 0, k = 0;
        while (!l->stop && !claim(l, &sl, &first, &k)) pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->stop) break;
        int epoch = l->epoch;
        l->busy++;
        pthread_mutex_unlock(&l->mu);
        int rc = fill_images(wk, sl, epoch, first, k, why, sizeof why);
        pthread_mutex_lock(&l->mu);
        l->busy--;
        if (rc != 0 && !sl->failed) {
            sl->failed = true;
            snprintf(sl->why, sizeof sl->why, "%s", why);
        }
        sl->done += k;
        if (sl->done == sl->n) {
            sl->state = SLOT_READY;
            pthread_cond_broadcast(&l->done_cv);
        } else if (l->resetting && l->busy == 0) {
            pthread_cond_broadcast(&l->done_cv);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void loader_free(loader *l) {
    for (int i = 0; i < LOADER_SLOTS; i++) {
        free(l->slot[i].x);
        free(l->slot[i].labels);
    }
    for (int i = 0; l->workers && i < l->nthreads; i++) {
        img_decoder_free(l->workers[i].dec);
        free(l->workers[i].pix);
        free(l->workers[i].rev);
        free(l->workers[i].row);
    }
    free(l->workers);
    free(l->perm);
    free(l);
}

/* Stops and joins the workers that were started. */
static void stop_workers(loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->started; i++) pthread_join(l->workers[i].thread, NULL);
    l->started = 0;
}

loader *loader_open(const ds_split *s, const loader_opts *o, char *err, size_t errlen) {
    if (o->batch < 1) {
        set_err(err, errlen, "batch size must be at least 1");
        return NULL;
    }
    int c, h, w;
    ds_split_shape(s, &c, &h, &w);
    if (ds_augment_check(&o->aug, h, w, err, errlen) != 0) return NULL;
    if (o->threads < 0 || o->threads > LOADER_THREADS_MAX) {
        set_err(err, errlen, "loader threads must be from 0 (automatic) to %d", LOADER_THREADS_MAX);
        return NULL;
    }
    loader *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    l->s = s;
    l->batch = o->batch;
    l->train = o->train;
    l->drop_last = o->drop_last;
    l->seed = o->seed;
    l->aug_seed = rng_derive(o->seed, "augment");
    l->scale = o->scale;
    l->aug = o->aug;
    for (int i = 0; i < c && o->mean; i++) l->mean[i] = o->mean[i];
    l->c = c;
    l->h = h;
    l->w = w;
    l->stride = ds_split_encoded(s) && c == 3 ? 4 : 1;
    l->oh = o->aug.crop_h ? o->aug.crop_h : h;
    l->ow = o->aug.crop_w ? o->aug.crop_w : w;
    l->count = ds_split_count(s);
    l->nbatches = loader_batch_count(l->count, o->batch, o->drop_last);
    l->nthreads = o->threads ? o->threads : loader_default_threads();
    size_t per_image = (size_t)c * (size_t)l->oh * (size_t)l->ow, xlen;
    if (__builtin_mul_overflow(per_image, (size_t)o->batch, &xlen) ||
        __builtin_mul_overflow(xlen, sizeof(float), &xlen)) {
        set_err(err, errlen, "batch too large");
        free(l);
        return NULL;
    }
    l->perm = malloc((l->count ? l->count : 1) * sizeof *l->perm);
    l->workers = calloc((size_t)l->nthreads, sizeof *l->workers);
    bool ok = l->perm && l->workers;
    for (int i = 0; i < LOADER_SLOTS && ok; i++) {
        l->slot[i].x = malloc(xlen);
        l->slot[i].labels = malloc((size_t)o->batch * sizeof(int32_t));
        ok = l->slot[i].x && l->slot[i].labels;
    }
    for (int i = 0; i < l->nthreads && ok; i++) {
        loader_worker *wk = &l->workers[i];
        wk->l = l;
        wk->rev = malloc(4 * (size_t)l->ow);
        wk->row = malloc((size_t)l->ow * sizeof *wk->row);
        ok = wk->rev && wk->row;
        if (ok && ds_split_encoded(s)) {
            wk->dec = img_decoder_new();
            wk->pix = malloc((size_t)h * (size_t)w * (size_t)l->stride);
            ok = wk->dec && wk->pix;
        }
    }
    if (!ok) {
        set_err(err, errlen, "out of memory for a batch of %d images", o->batch);
        loader_free(l);
        return NULL;
    }
    make_perm(l);            /* epoch 0, ready before the first loader_start_epoch */
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->done_cv, NULL);
    for (; l->started < l->nthreads; l->started++) {
        int e = pthread_create(&l->workers[l->started].thread, NULL, worker_main, &l->workers[l->started]);
        if (e != 0) {
            set_err(err, errlen, "starting a loader thread: %s", strerror(e));
            loader_close(l);
            return NULL;
        }
    }
    return l;
}

void loader_close(loader *l) {
    if (!l) return;
    stop_workers(l);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    loader_free(l);
}

void loader_shape(const loader *l, int *c, int *h, int *w) {
    if (c) *c = l->c;
    if (h) *h = l->oh;
    if (w) *w = l->ow;
}

size_t loader_batches(const loader *l) { return l->nbatches; }

int loader_threads(const loader *l) { return l->nthreads; }

const char *loader_error(const loader *l) { return l->error; }

void loader_start_epoch(loader *l, int epoch) {
    pthread_mutex_lock(&l->mu);
    if (epoch == l->epoch && l->consume_next == 0) {
        /* already at the start of this epoch: keep what is prefetched */
        pthread_mutex_unlock(&l->mu);
        return;
    }
    l->resetting = true;
    while (l->busy > 0) pthread_cond_wait(&l->done_cv, &l->mu);
    l->epoch = epoch;
    make_perm(l);
    for (int i = 0; i < LOADER_SLOTS; i++) l->slot[i].state = SLOT_FREE;
    l->held = NULL;                  /* a lent batch comes back with the rest */
    l->produce_next = l->consume_next = 0;
    l->resetting = false;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
}

/* Hands back the slot loader_next_view lent, under the lock. */
static void release_locked(loader *l) {
    if (!l->held) return;
    l->held->state = SLOT_FREE;
    l->held = NULL;
    pthread_cond_broadcast(&l->work_cv);
}

/* Waits for the next batch, under the lock: its slot, or NULL at the end of
 * the epoch (0 in *rc) or on a record that did not decode (-1). */
static loader_slot *next_ready(loader *l, int *rc) {
    release_locked(l);
    if (l->consume_next >= l->nbatches) {
        *rc = 0;
        return NULL;
    }
    size_t b = l->consume_next;
    loader_slot *sl = &l->slot[b % LOADER_SLOTS];
    while (!(sl->state == SLOT_READY && sl->index == b)) pthread_cond_wait(&l->done_cv, &l->mu);
    if (sl->failed) {
        snprintf(l->error, sizeof l->error, "%s", sl->why);
        *rc = -1;                    /* stays failed until loader_start_epoch */
        return NULL;
    }
    *rc = sl->n;
    return sl;
}

int loader_next(loader *l, float *x, int32_t *labels) {
    int n;
    pthread_mutex_lock(&l->mu);
    loader_slot *sl = next_ready(l, &n);
    pthread_mutex_unlock(&l->mu);
    if (!sl) return n;

    /* the workers leave a READY slot alone, so it is read without the lock */
    memcpy(x, sl->x, (size_t)n * (size_t)l->c * (size_t)l->oh * (size_t)l->ow * sizeof(float));
    memcpy(labels, sl->labels, (size_t)n * sizeof(int32_t));

    pthread_mutex_lock(&l->mu);
    sl->state = SLOT_FREE;
    l->consume_next++;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return n;
}

int loader_next_view(loader *l, const float **x, const int32_t **labels) {
    int n;
    pthread_mutex_lock(&l->mu);
    loader_slot *sl = next_ready(l, &n);
    if (sl) {
        sl->state = SLOT_HELD;
        l->held = sl;
        l->consume_next++;
    }
    pthread_mutex_unlock(&l->mu);
    *x = sl ? sl->x : NULL;
    *labels = sl ? sl->labels : NULL;
    return n;
}

void loader_release(loader *l) {
    pthread_mutex_lock(&l->mu);
    release_locked(l);
    pthread_mutex_unlock(&l->mu);
}
