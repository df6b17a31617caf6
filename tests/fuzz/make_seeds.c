/* tests/fuzz/make_seeds.c: writes the binary seed corpora of tests/fuzz/corpus
 * with kiln's own writers (img_encode_*, st_write, ckpt_save) and libarchive,
 * in the input formats the targets' comments describe. The text seeds (specs,
 * job requests, lists, forms) are written by hand and kept as they are.
 *
 *   build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
 *
 * Deterministic: run again, it writes the same bytes (the files are in git;
 * rerun it only when a format changes). Exits 1 on any failure.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <zlib.h>

#include "engine/checkpoint.h"    /* ckpt_save */
#include "engine/image.h"         /* img_encode_png, img_encode_jpeg */
#include "engine/net.h"           /* net_create, net_save */
#include "engine/safetensors.h"   /* st_write */
#include "fuzz_util.h"            /* FUZZ_SEP, FUZZ_CKPT_* */

static const char *root;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "make_seeds: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---- a growable byte buffer ------------------------------------------------------ */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void add(bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            fail("out of memory");
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void add_str(bytes *b, const char *s) { add(b, s, strlen(s)); }
static void add_byte(bytes *b, uint8_t x) { add(b, &x, 1); }
static void add_sep(bytes *b) { add(b, FUZZ_SEP, FUZZ_SEP_LEN); }

static void add_be32(bytes *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
    add(b, x, 4);
}

/* Writes root/target/name. */
static void seed(const char *target, const char *name, const void *p, size_t n)
{
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", root, target);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        fail("mkdir %s: %s", dir, strerror(errno));
    fuzz_write(fuzz_path(path, dir, name), p, n);
}

static void seed_bytes(const char *target, const char *name, bytes *b)
{
    seed(target, name, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail("%s: %s", path, strerror(errno));
    bytes b = { 0 };
    uint8_t buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        add(&b, buf, k);
    fclose(f);
    *n = b.n;
    return b.p;
}

/* ---- images ----------------------------------------------------------------------- */

/* A c x h x w CHW pattern: gradients, so that every resize mode has work. */
static uint8_t *pattern(int c, int h, int w)
{
    uint8_t *p = malloc((size_t)c * h * w);
    if (!p)
        fail("out of memory");
    for (int k = 0; k < c; k++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                p[((size_t)k * h + y) * w + x] = (uint8_t)(x * 255 / w + y * 17 + k * 80);
    return p;
}

static uint8_t *encode(bool jpeg, int c, int h, int w, size_t *n)
{
    uint8_t *chw = pattern(c, h, w), *out = NULL;
    char why[256];
    int rc = jpeg ? img_encode_jpeg(chw, c, h, w, 90, &out, n, why, sizeof why)
                  : img_encode_png(chw, c, h, w, &out, n, why, sizeof why);
    if (rc != 0)
        fail("encode: %s", why);
    free(chw);
    return out;
}

static void image_seed(const char *name, const uint8_t ctl[4], bool jpeg, int c, int h, int w)
{
    size_t n;
    uint8_t *img = encode(jpeg, c, h, w, &n);
    bytes b = { 0 };
    add(&b, ctl, 4);
    add(&b, img, n);
    seed_bytes("image", name, &b);
    free(img);
}

static void images(void)
{
    image_seed("png-gray-8x6", (const uint8_t[]){ 0, 15, 15, 0 }, false, 1, 6, 8);
    image_seed("png-rgb-9x7-crop", (const uint8_t[]){ 1, 4, 2, 1 }, false, 3, 7, 9);
    image_seed("jpeg-rgb-16x12-fill-scaled", (const uint8_t[]){ 1, 7, 7, 0x82 }, true, 3, 12, 16);
    image_seed("jpeg-gray-8x8-half-crop", (const uint8_t[]){ 0, 19, 9, 3 }, true, 1, 8, 8);
}

/* ---- archives (libarchive, through a temporary file) -------------------------------- */

typedef struct entry {
    const char *path;
    const void *p;
    size_t n;
} entry;

enum { AR_TAR_GZ, AR_ZIP, AR_TAR };

static uint8_t *make_archive(int kind, const entry *e, int count, size_t *n)
{
    char path[PATH_MAX];
    fuzz_path(path, fuzz_scratch(), "seed-archive");
    struct archive *a = archive_write_new();
    if (kind == AR_ZIP)
        archive_write_set_format_zip(a);
    else
        archive_write_set_format_pax_restricted(a);
    if (kind == AR_TAR_GZ)
        archive_write_add_filter_gzip(a);
    if (archive_write_open_filename(a, path) != ARCHIVE_OK)
        fail("archive: %s", archive_error_string(a));
    for (int i = 0; i < count; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].path);
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        archive_entry_set_size(ae, (la_int64_t)e[i].n);
        archive_entry_set_mtime(ae, 1700000000, 0);
        if (archive_write_header(a, ae) != ARCHIVE_OK ||
            archive_write_data(a, e[i].p, e[i].n) != (la_ssize_t)e[i].n)
            fail("archive: %s", archive_error_string(a));
        archive_entry_free(ae);
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        fail("archive: %s", archive_error_string(a));
    archive_write_free(a);
    uint8_t *out = read_all(path, n);
    unlink(path);
    return out;
}

static void archive_seed(const char *name, const uint8_t ctl[4], int kind, const entry *e, int count)
{
    size_t n;
    uint8_t *ar = make_archive(kind, e, count, &n);
    bytes b = { 0 };
    add(&b, ctl, 4);
    add(&b, ar, n);
    seed_bytes("archive", name, &b);
    free(ar);
}

static void archives(void)
{
    size_t n1, n2, n3, n4;
    uint8_t *p1 = encode(false, 1, 6, 6, &n1), *p2 = encode(false, 3, 5, 7, &n2);
    uint8_t *j1 = encode(true, 3, 8, 8, &n3), *j2 = encode(true, 1, 6, 6, &n4);
    const entry classes[] = {
        { "cats/a.png", p1, n1 }, { "cats/b.jpg", j1, n3 }, { "dogs/c.png", p2, n2 },
        { "dogs/deeper/d.jpg", j2, n4 }, { "dogs/notes.txt", "not an image", 12 },
    };
    archive_seed("classes.tar.gz", (const uint8_t[]){ 0, 0, 0, 2 }, AR_TAR_GZ, classes, 5);
    archive_seed("classes-8x6-gray-crop-png.zip", (const uint8_t[]){ 8, 5, 1 | 1 << 2 | 1 << 4, 1 }, AR_ZIP,
                 classes, 5);
    const entry splits[] = {
        { "train/cats/a.png", p1, n1 }, { "train/dogs/c.png", p2, n2 }, { "val/cats/b.jpg", j1, n3 },
        { "val/dogs/d.jpg", j2, n4 }, { "test/cats/e.png", p1, n1 }, { "test/dogs/f.png", p2, n2 },
    };
    archive_seed("splits-4x4-rgb-fill-jpeg.tar", (const uint8_t[]){ 4, 3, 2 | 2 << 2 | 2 << 4, 4 }, AR_TAR,
                 splits, 6);
    free(p1);
    free(p2);
    free(j1);
    free(j2);
}

/* ---- safetensors and checkpoints ----------------------------------------------------- */

static void safetensors(void)
{
    float w[6] = { 1, -2, 0.5f, 3, 0, -0.25f };
    int64_t steps[2] = { 7, -1 };
    uint8_t flag = 1;
    uint16_t half[3] = { 0x3c00, 0xc000, 0x7bff };
    const st_tensor ts[] = {
        { .name = "dense.weight", .dtype = ST_F32, .ndim = 2, .shape = { 2, 3 }, .data = w, .bytes = sizeof w },
        { .name = "steps", .dtype = ST_I64, .ndim = 1, .shape = { 2 }, .data = steps, .bytes = sizeof steps },
        { .name = "flag", .dtype = ST_BOOL, .ndim = 0, .data = &flag, .bytes = 1 },
        { .name = "half", .dtype = ST_F16, .ndim = 1, .shape = { 3 }, .data = half, .bytes = sizeof half },
    };
    const char *meta[] = { "format", "pt", "kiln", "seed", NULL };
    char path[PATH_MAX], err[256];
    fuzz_path(path, fuzz_scratch(), "seed.safetensors");
    if (st_write(path, ts, 4, meta, err, sizeof err) != 0)
        fail("st_write: %s", err);
    size_t n;
    uint8_t *p = read_all(path, &n);
    seed("safetensors", "four-dtypes.safetensors", p, n);
    free(p);
    if (st_write(path, ts, 1, NULL, err, sizeof err) != 0)
        fail("st_write: %s", err);
    p = read_all(path, &n);
    seed("safetensors", "one-tensor.safetensors", p, n);
    free(p);
}

static void checkpoints(void)
{
    cJSON *spec = cJSON_Parse(FUZZ_CKPT_SPEC);
    net_solver sv = { .type = SOLVER_ADAM, .lr = 0.01f };
    char err[512], path[PATH_MAX];
    net *n = net_create(spec, FUZZ_CKPT_SHAPE, FUZZ_CKPT_CLASSES, 2, NULL, &sv, 1, err, sizeof err);
    cJSON_Delete(spec);
    if (!n)
        fail("net_create: %s", err);
    float x[2 * 16];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i % 7) / 7.0f;
    int32_t labels[2] = { 0, 2 };
    net_stats st;
    if (net_train_step(n, x, labels, 2, 0.01f, &st, err, sizeof err) != 0)
        fail("net_train_step: %s", err);
    fuzz_path(path, fuzz_scratch(), "seed-ckpt.safetensors");
    const ckpt_info info = { .step = 1, .epoch = 0, .epoch_step = 1, .seed = 1 };
    if (ckpt_save(n, path, &info, err, sizeof err) != 0)
        fail("ckpt_save: %s", err);
    size_t len;
    uint8_t *p = read_all(path, &len);
    seed("checkpoint", "adam-step1.safetensors", p, len);
    seed("safetensors", "checkpoint.safetensors", p, len);
    free(p);
    if (net_save(n, path, err, sizeof err) != 0)
        fail("net_save: %s", err);
    p = read_all(path, &len);
    seed("checkpoint", "weights-only.safetensors", p, len);
    free(p);
    net_free(n);
}

/* ---- dataset sources ------------------------------------------------------------------ */

static void gzip_bytes(const bytes *in, bytes *out)
{
    z_stream z = { 0 };
    if (deflateInit2(&z, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        fail("deflateInit2");
    uint8_t buf[65536];
    z.next_in = in->p;
    z.avail_in = (uInt)in->n;
    int rc;
    do {
        z.next_out = buf;
        z.avail_out = sizeof buf;
        rc = deflate(&z, Z_FINISH);
        add(out, buf, sizeof buf - z.avail_out);
    } while (rc == Z_OK);
    if (rc != Z_STREAM_END)
        fail("deflate");
    deflateEnd(&z);
}

/* An IDX images file of count images rows x cols, and its labels file. */
static void idx_pair(bytes *img, bytes *lab, uint32_t count, uint32_t rows, uint32_t cols, int first_label)
{
    add_be32(img, 0x803);
    add_be32(img, count);
    add_be32(img, rows);
    add_be32(img, cols);
    for (uint32_t i = 0; i < count * rows * cols; i++)
        add_byte(img, (uint8_t)(i * 13));
    add_be32(lab, 0x801);
    add_be32(lab, count);
    for (uint32_t i = 0; i < count; i++)
        add_byte(lab, (uint8_t)((first_label + (int)i) % 10));
}

static void idx_seeds(void)
{
    for (int gz = 0; gz < 2; gz++) {
        bytes f[4] = { 0 }, b = { 0 };
        idx_pair(&f[0], &f[1], 3, 4, 5, 0);
        idx_pair(&f[2], &f[3], 2, 4, 5, 7);
        add_byte(&b, gz ? 0x0f : 0);
        for (int i = 0; i < 4; i++) {
            if (i)
                add_sep(&b);
            if (gz) {
                bytes z = { 0 };
                gzip_bytes(&f[i], &z);
                add(&b, z.p, z.n);
                free(z.p);
            } else {
                add(&b, f[i].p, f[i].n);
            }
            free(f[i].p);
        }
        seed_bytes("idx", gz ? "train-test-gz" : "train-test", &b);
    }
    bytes f[2] = { 0 }, b = { 0 };
    idx_pair(&f[0], &f[1], 2, 3, 3, 4);
    add_byte(&b, 0);
    add(&b, f[0].p, f[0].n);
    add_sep(&b);
    add(&b, f[1].p, f[1].n);
    seed_bytes("idx", "train-only", &b);
    free(f[0].p);
    free(f[1].p);
}

/* CIFAR records: `labels` label bytes (1 or 2) each, then the pixels. */
static void cifar_records(bytes *b, int count, int labels, int first)
{
    for (int r = 0; r < count; r++) {
        for (int k = 0; k < labels; k++)
            add_byte(b, (uint8_t)((first + r + k) % 4));
        for (int i = 0; i < 3072; i++)
            add_byte(b, (uint8_t)(i * 7 + r));
    }
}

static const char CIFAR10_NAMES[] = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";

static void cifar_seeds(void)
{
    bytes train = { 0 }, test = { 0 }, b = { 0 };
    cifar_records(&train, 2, 1, 1);
    cifar_records(&test, 1, 1, 3);
    for (int sub = 0; sub < 2; sub++) {
        add_byte(&b, sub ? 4 : 0);
        add(&b, train.p, train.n);
        add_sep(&b);
        add(&b, test.p, test.n);
        add_sep(&b);
        add_str(&b, sub ? "" : CIFAR10_NAMES);
        seed_bytes("cifar", sub ? "cifar10-subfolder-numbered" : "cifar10-folder", &b);
    }
    const entry e[] = {
        { "cifar-10-batches-bin/data_batch_1.bin", train.p, train.n },
        { "cifar-10-batches-bin/test_batch.bin", test.p, test.n },
        { "cifar-10-batches-bin/batches.meta.txt", CIFAR10_NAMES, sizeof CIFAR10_NAMES - 1 },
    };
    size_t n;
    uint8_t *ar = make_archive(AR_TAR_GZ, e, 3, &n);
    add_byte(&b, 1);
    add(&b, ar, n);
    seed_bytes("cifar", "cifar10-archive", &b);
    free(ar);
    free(train.p);
    free(test.p);

    bytes train100 = { 0 }, test100 = { 0 };
    cifar_records(&train100, 2, 2, 0);
    cifar_records(&test100, 1, 2, 2);
    for (int coarse = 0; coarse < 2; coarse++) {
        add_byte(&b, coarse ? 2 : 0);
        add_sep(&b);                      /* no data_batch_1.bin */
        add_sep(&b);                      /* no test_batch.bin */
        add_sep(&b);                      /* no batches.meta.txt */
        add(&b, train100.p, train100.n);
        add_sep(&b);
        add(&b, test100.p, test100.n);
        add_sep(&b);
        add_str(&b, "apple\r\n  aquarium_fish\nbaby\n\nbear\n");
        add_sep(&b);
        add_str(&b, "fruit\nfish\npeople\nmammals\n");
        seed_bytes("cifar", coarse ? "cifar100-coarse" : "cifar100-fine", &b);
    }
    free(train100.p);
    free(test100.p);
}

static void mnist_json_seed(void)
{
    bytes b = { 0 };
    for (int d = 0; d < 10; d++) {
        if (d)
            add_sep(&b);
        add_str(&b, "{\"data\":[");
        for (int i = 0; i < 28 * 28; i++) {
            static const char *const v[] = { "0", "1", "0.5", "0.25" };
            add_str(&b, v[(i * (d + 1)) % 4]);
            if (i + 1 < 28 * 28)
                add_str(&b, ",");
        }
        add_str(&b, "]}");
    }
    seed_bytes("mnist_json", "one-digit-each", &b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    root = argv[1];
    images();
    archives();
    safetensors();
    checkpoints();
    idx_seeds();
    cifar_seeds();
    mnist_json_seed();
    return 0;
}
