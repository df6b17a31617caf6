/* tests/unit/test_readers.c: the dataset source readers (jobs/idx.h,
 * jobs/cifar.h, jobs/pathlist.h) and what they share (jobs/readers.h).
 *
 * Every file is generated here: IDX files plain and gzipped (libarchive's
 * raw writer with the gzip filter), CIFAR batches as files and in tar.gz
 * archives (libarchive's tar writer), lists with spaces, CRLF and bad
 * labels. Pixels and labels are functions of the image's index, so every
 * byte delivered is checked. Each reader is also fed damaged and random
 * files: it must fail with a message, never crash or read out of bounds
 * (build with -DKILN_SANITIZE=ON to have ASan watch). */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <limits.h>
#include <stdbool.h>
#include <sys/resource.h>

#include <archive.h>
#include <archive_entry.h>

#include "data_util.h"
#include "jobs/cifar.h"
#include "jobs/idx.h"
#include "jobs/pathlist.h"
#include "jobs/readers.h"

typedef struct fixture {
    char root[PATH_MAX];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f || !du_mkdtemp(f->root, sizeof f->root)) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    du_rm_rf(f->root);
    free(f);
    return 0;
}

#define assert_contains(hay, needle)                                                   \
    do {                                                                               \
        const char *h_ = (hay), *n_ = (needle);                                        \
        if (!strstr(h_, n_)) {                                                         \
            print_error("\"%s\"\n  does not contain \"%s\"\n", h_, n_);               \
            fail();                                                                    \
        }                                                                              \
    } while (0)

/* a/b into buf (PATH_MAX bytes). */
static char *join(char *buf, const char *a, const char *b) {
    int n = snprintf(buf, PATH_MAX, "%s/%s", a, b);
    assert_true(n > 0 && n < PATH_MAX);
    return buf;
}

static void make_dir(const char *a, const char *b) {
    char p[PATH_MAX];
    assert_int_equal(mkdir(join(p, a, b), 0755), 0);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* p[0..n) gzipped into path, as gzip(1) would (libarchive's raw writer). */
static void write_gz(const char *path, const void *p, size_t n) {
    struct archive *a = archive_write_new();
    assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    assert_int_equal(archive_write_set_format_raw(a), ARCHIVE_OK);
    assert_int_equal(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "data");
    archive_entry_set_filetype(e, AE_IFREG);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    if (n) assert_int_equal(archive_write_data(a, p, n), (la_ssize_t)n);
    archive_entry_free(e);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static void put_file(const char *dir, const char *name, const void *p, size_t n, bool gz) {
    char path[PATH_MAX];
    join(path, dir, name);
    if (gz)
        write_gz(path, p, n);
    else
        assert_int_equal(du_write_file(path, p, n), 0);
}

/* ---- readers.h ---------------------------------------------------------------------------- */

static void test_grouped_and_class_names(void **state) {
    (void)state;
    char b[32], err[256];
    assert_string_equal(readers_grouped(b, 0), "0");
    assert_string_equal(readers_grouped(b, 999), "999");
    assert_string_equal(readers_grouped(b, 1000), "1,000");
    assert_string_equal(readers_grouped(b, 60000), "60,000");
    assert_string_equal(readers_grouped(b, 47040016), "47,040,016");
    assert_string_equal(readers_grouped(b, UINT64_MAX), "18,446,744,073,709,551,615");

    class_names c;
    const char ok[] = "\r\n  airplane \r\n\n\tautomobile\nbird\xc3\xa9\n\n";   /* no final newline needed */
    assert_int_equal(class_names_parse(&c, ok, sizeof ok - 1, "m.txt", 256, err, sizeof err), 0);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.name[0], "airplane");
    assert_string_equal(c.name[1], "automobile");
    assert_string_equal(c.name[2], "bird\xc3\xa9");
    class_names_free(&c);
    assert_int_equal(c.n, 0);
    assert_null(c.name);

    static const struct { const char *text; const char *why; } bad[] = {
        { "a\nb\na\n", "m.txt: line 3 repeats the class \"a\" of line 1" },
        { "\n\n \r\n", "m.txt: names no classes" },
        { "", "m.txt: names no classes" },
        { "a\nb\x01" "c\n", "m.txt: line 2: a control character" },
        { "a\n\xff\xfe\n", "m.txt: line 2: a class name that is not UTF-8" },
        { "a\n\xc0\xaf\n", "not UTF-8" },                  /* an overlong '/' */
        { "a\n\xed\xa0\x80\n", "not UTF-8" },              /* a surrogate */
        { "a\nb\nc\nd\n", "m.txt: more than 3 class names" },
        { "a\nb\xc2\x85" "c\n", "m.txt: line 2: a control character" },   /* U+0085, a C1 control */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int max = i == 7 ? 3 : 256;
        err[0] = '\0';
        assert_int_equal(class_names_parse(&c, bad[i].text, strlen(bad[i].text), "m.txt", max, err, sizeof err), -1);
        assert_contains(err, bad[i].why);
        assert_int_equal(c.n, 0);
    }
    const char nul[] = "a\0b\n";
    assert_int_equal(class_names_parse(&c, nul, sizeof nul - 1, "m.txt", 256, err, sizeof err), -1);
    assert_contains(err, "NUL");
    char lng[READERS_NAME_MAX + 3];
    memset(lng, 'x', sizeof lng);
    assert_int_equal(class_names_parse(&c, lng, READERS_NAME_MAX, "m.txt", 256, err, sizeof err), 0);
    class_names_free(&c);
    assert_int_equal(class_names_parse(&c, lng, READERS_NAME_MAX + 1, "m.txt", 256, err, sizeof err), -1);
    assert_contains(err, "longer than 255 bytes");

    assert_int_equal(class_names_numbered(&c, 12, err, sizeof err), 0);
    assert_int_equal(c.n, 12);
    assert_string_equal(c.name[0], "0");
    assert_string_equal(c.name[11], "11");
    class_names_free(&c);
    assert_int_equal(class_names_numbered(&c, 0, err, sizeof err), 0);
    assert_int_equal(c.n, 0);
    assert_int_equal(class_names_load(&c, "/nonexistent/names.txt", "names.txt", 10, err, sizeof err), -1);
    assert_contains(err, "names.txt: No such file");
}

/* ---- IDX ----------------------------------------------------------------------------------- */

static uint8_t idx_pix(size_t i, uint32_t y, uint32_t x, int salt) {
    return (uint8_t)(i * 7 + y * 31 + x * 3 + (size_t)salt * 101);
}
static int idx_label(size_t i, int salt) { return (int)((i * (size_t)(salt + 1) + (size_t)salt) % 10); }

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* An IDX images file's bytes (header + count images of rows x cols). */
static uint8_t *idx_images(uint32_t count, uint32_t rows, uint32_t cols, int salt, size_t *n) {
    *n = 16 + (size_t)count * rows * cols;
    uint8_t *p = malloc(*n);
    assert_non_null(p);
    be32(p, 0x803), be32(p + 4, count), be32(p + 8, rows), be32(p + 12, cols);
    for (size_t i = 0; i < count; i++)
        for (uint32_t y = 0; y < rows; y++)
            for (uint32_t x = 0; x < cols; x++) p[16 + (i * rows + y) * cols + x] = idx_pix(i, y, x, salt);
    return p;
}

static uint8_t *idx_labels(uint32_t count, int salt, size_t *n) {
    *n = 8 + (size_t)count;
    uint8_t *p = malloc(*n);
    assert_non_null(p);
    be32(p, 0x801), be32(p + 4, count);
    for (size_t i = 0; i < count; i++) p[8 + i] = (uint8_t)idx_label(i, salt);
    return p;
}

typedef struct mnist_spec {
    uint32_t ntrain, ntest;      /* ntest 0: no t10k files */
    uint32_t rows, cols;
    bool gz, dotted;
} mnist_spec;

static const char *const std_names[4] = { "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte" };
static const char *const dot_names[4] = { "train-images.idx3-ubyte", "train-labels.idx1-ubyte",
                                          "t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte" };

/* The name of file k (0..3, in std_names' order) as the spec writes it. */
static void mnist_name(char *buf, size_t n, const mnist_spec *m, int k) {
    snprintf(buf, n, "%s%s", (m->dotted ? dot_names : std_names)[k], m->gz ? ".gz" : "");
}

static void make_mnist(const char *dir, const mnist_spec *m) {
    for (int k = 0; k < 4; k++) {
        int salt = k >= 2;
        uint32_t count = salt ? m->ntest : m->ntrain;
        if (salt && count == 0) continue;
        size_t n;
        uint8_t *p = k % 2 == 0 ? idx_images(count, m->rows, m->cols, salt, &n) : idx_labels(count, salt, &n);
        char name[64];
        mnist_name(name, sizeof name, m, k);
        put_file(dir, name, p, n, m->gz);
        free(p);
    }
}

typedef struct idx_seen {
    size_t n[2];
    int bad;
    int w, h;
    size_t stop_at;              /* stop after this many images (0: never) */
    bool check_pixels;
} idx_seen;

static int idx_collect(void *arg, const idx_image *im, char *err, size_t errlen) {
    idx_seen *s = arg;
    if (im->split != READER_TRAIN && im->split != READER_TEST) {
        s->bad++;
        return 0;
    }
    int salt = im->split == READER_TEST;
    if (im->index != s->n[im->split] || im->w != s->w || im->h != s->h) s->bad++;
    if (im->split == READER_TRAIN && s->n[READER_TEST] > 0) s->bad++;        /* train comes first */
    if (im->label != idx_label(im->index, salt)) s->bad++;
    if (s->check_pixels) {
        for (int y = 0; y < im->h; y++)
            for (int x = 0; x < im->w; x++)
                if (im->pixels[y * im->w + x] != idx_pix(im->index, (uint32_t)y, (uint32_t)x, salt)) {
                    s->bad++;
                    y = im->h;
                    break;
                }
    }
    s->n[im->split]++;
    if (s->stop_at && s->n[0] + s->n[1] == s->stop_at) {
        snprintf(err, errlen, "stopped by the callback");
        return -1;
    }
    return 0;
}

static void test_idx_plain_with_test_split(void **state) {
    fixture *f = *state;
    mnist_spec m = { .ntrain = 50, .ntest = 20, .rows = 5, .cols = 7 };
    make_mnist(f->root, &m);
    char err[256] = "";
    idx_source *s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);
    assert_string_equal(err, "");
    assert_int_equal(idx_count(s, READER_TRAIN), 50);
    assert_int_equal(idx_count(s, READER_TEST), 20);
    int w, h;
    idx_shape(s, &w, &h);
    assert_int_equal(w, 7);         /* cols */
    assert_int_equal(h, 5);         /* rows */
    assert_int_equal(idx_nclasses(s), 10);
    assert_string_equal(idx_class_name(s, 0), "0");
    assert_string_equal(idx_class_name(s, 9), "9");
    assert_null(idx_class_name(s, 10));
    assert_null(idx_class_name(s, -1));
    for (int pass = 0; pass < 2; pass++) {       /* idx_read may be called again */
        idx_seen seen = { .w = 7, .h = 5, .check_pixels = true };
        assert_int_equal(idx_read(s, idx_collect, &seen, err, sizeof err), 0);
        assert_int_equal(seen.n[READER_TRAIN], 50);
        assert_int_equal(seen.n[READER_TEST], 20);
        assert_int_equal(seen.bad, 0);
    }
    /* a callback that stops the read: its message comes back */
    idx_seen stop = { .w = 7, .h = 5, .stop_at = 55 };
    assert_int_equal(idx_read(s, idx_collect, &stop, err, sizeof err), -1);
    assert_string_equal(err, "stopped by the callback");
    assert_int_equal(stop.n[READER_TRAIN] + stop.n[READER_TEST], 55);
    idx_close(s);
    idx_close(NULL);
}

static void test_idx_gzipped_dotted_no_test(void **state) {
    fixture *f = *state;
    /* 70,000 tiny images: more labels than one read block of the reader */
    mnist_spec m = { .ntrain = 70000, .rows = 3, .cols = 2, .gz = true, .dotted = true };
    make_mnist(f->root, &m);
    char err[256] = "";
    idx_source *s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(idx_count(s, READER_TRAIN), 70000);
    assert_int_equal(idx_count(s, READER_TEST), 0);
    idx_seen seen = { .w = 2, .h = 3, .check_pixels = true };
    assert_int_equal(idx_read(s, idx_collect, &seen, err, sizeof err), 0);
    assert_int_equal(seen.n[READER_TRAIN], 70000);
    assert_int_equal(seen.n[READER_TEST], 0);
    assert_int_equal(seen.bad, 0);
    idx_close(s);
}

static void test_idx_classes_are_max_label_plus_one(void **state) {
    fixture *f = *state;
    mnist_spec m = { .ntrain = 4, .rows = 2, .cols = 2 };
    make_mnist(f->root, &m);                       /* labels 0..3 */
    char err[256];
    idx_source *s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(idx_nclasses(s), 4);
    idx_close(s);
    /* a test split with a larger label raises the count: labels 0 and 200 */
    size_t n;
    uint8_t *p = idx_images(2, 2, 2, 1, &n);
    put_file(f->root, "t10k-images-idx3-ubyte", p, n, false);
    free(p);
    uint8_t lab[10] = { 0, 0, 8, 1, 0, 0, 0, 2, 0, 200 };
    put_file(f->root, "t10k-labels-idx1-ubyte", lab, sizeof lab, false);
    s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(idx_nclasses(s), 201);
    assert_string_equal(idx_class_name(s, 200), "200");
    idx_close(s);
}

/* Writes a standard plain MNIST folder, lets edit change one file's bytes,
 * and expects idx_open to fail with err holding want (and want2). */
typedef void (*idx_edit)(uint8_t **p, size_t *n);

static void expect_idx_error(const char *root, const char *sub, int file, bool gz, idx_edit edit, const char *want,
                             const char *want2) {
    char dir[PATH_MAX];
    make_dir(root, sub);
    join(dir, root, sub);
    mnist_spec m = { .ntrain = 30, .ntest = 10, .rows = 4, .cols = 4 };
    make_mnist(dir, &m);
    if (file >= 0) {
        size_t n;
        int salt = file >= 2;
        uint8_t *p = file % 2 == 0 ? idx_images(salt ? 10 : 30, 4, 4, salt, &n) : idx_labels(salt ? 10 : 30, salt, &n);
        edit(&p, &n);
        char path[PATH_MAX];
        unlink(join(path, dir, std_names[file]));
        char name[64];
        snprintf(name, sizeof name, "%s%s", std_names[file], gz ? ".gz" : "");
        put_file(dir, name, p, n, gz);
        free(p);
    }
    char err[512] = "";
    idx_source *s = idx_open(dir, err, sizeof err);
    if (s) print_error("idx_open of %s succeeded; expected \"%s\"\n", sub, want);
    assert_null(s);
    assert_contains(err, want);
    if (want2) assert_contains(err, want2);
}

static void edit_magic_labels(uint8_t **p, size_t *n) { be32(*p, 0x801); }
static void edit_magic_images(uint8_t **p, size_t *n) { be32(*p, 0x803); }
static void edit_magic_float(uint8_t **p, size_t *n) { be32(*p, 0x0d03); }
static void edit_truncate(uint8_t **p, size_t *n) { *n -= 5; }
static void edit_one_short_label(uint8_t **p, size_t *n) { *n -= 1; }
static void edit_extra(uint8_t **p, size_t *n) {
    uint8_t *q = realloc(*p, *n + 3);
    assert_non_null(q);
    memset(q + *n, 0, 3);
    *p = q;
    *n += 3;
}
static void edit_header_cut(uint8_t **p, size_t *n) { *n = 10; }
static void edit_empty(uint8_t **p, size_t *n) { *n = 0; }
static void edit_three_bytes(uint8_t **p, size_t *n) { *n = 3; }
static void edit_rows_zero(uint8_t **p, size_t *n) { be32(*p + 8, 0); }
static void edit_cols_big(uint8_t **p, size_t *n) { be32(*p + 12, 5000); }
/* 9,999 labels for a t10k images file saying 10,000 (headers checked before lengths) */
static void edit_count_9999(uint8_t **p, size_t *n) { be32(*p + 4, 9999); }
static void edit_count_10000(uint8_t **p, size_t *n) { be32(*p + 4, 10000); }
static void edit_count_29(uint8_t **p, size_t *n) {
    be32(*p + 4, 29);
    *n -= 1;
}
static void edit_rows_5(uint8_t **p, size_t *n) { be32(*p + 8, 5); }

static void test_idx_bad_files(void **state) {
    fixture *f = *state;
    const char *r = f->root;
    /* 0 train images, 1 train labels, 2 t10k images, 3 t10k labels */
    expect_idx_error(r, "magic1", 0, false, edit_magic_labels, "train-images-idx3-ubyte: magic number 0x00000801, "
                     "expected 0x00000803", NULL);
    expect_idx_error(r, "magic2", 3, false, edit_magic_images, "t10k-labels-idx1-ubyte: magic number 0x00000803",
                     NULL);
    expect_idx_error(r, "magic3", 2, true, edit_magic_float, "t10k-images-idx3-ubyte.gz: magic number 0x00000d03",
                     NULL);
    expect_idx_error(r, "trunc", 0, false, edit_truncate, "train-images-idx3-ubyte: truncated: 491 bytes where "
                     "a 16-byte header and 30 images of 4x4 make 496", NULL);
    expect_idx_error(r, "truncgz", 2, true, edit_truncate, "t10k-images-idx3-ubyte.gz: truncated: 171 bytes once "
                     "uncompressed where a 16-byte header and 10 images of 4x4 make 176", NULL);
    expect_idx_error(r, "trunclab", 1, false, edit_one_short_label, "train-labels-idx1-ubyte: truncated: 37 bytes "
                     "where an 8-byte header and 30 labels make 38", NULL);
    expect_idx_error(r, "extra", 0, false, edit_extra, "train-images-idx3-ubyte: 499 bytes where a 16-byte header "
                     "and 30 images of 4x4 make 496", NULL);
    expect_idx_error(r, "extragz", 3, true, edit_extra, "t10k-labels-idx1-ubyte.gz: 21 bytes once uncompressed",
                     "make 18");
    expect_idx_error(r, "hdr", 0, false, edit_header_cut, "train-images-idx3-ubyte: truncated inside its 16-byte "
                     "header", NULL);
    expect_idx_error(r, "empty", 1, false, edit_empty, "train-labels-idx1-ubyte: 0 bytes, too short", NULL);
    expect_idx_error(r, "emptygz", 1, true, edit_empty, "train-labels-idx1-ubyte.gz: 0 bytes, too short", NULL);
    expect_idx_error(r, "three", 2, false, edit_three_bytes, "t10k-images-idx3-ubyte: 3 bytes, too short", NULL);
    expect_idx_error(r, "rows0", 0, false, edit_rows_zero, "train-images-idx3-ubyte: images of 0 rows and 4 cols; "
                     "each must be 1..4096", NULL);
    expect_idx_error(r, "cols", 2, false, edit_cols_big, "t10k-images-idx3-ubyte: images of 4 rows and 5000 cols",
                     NULL);
    expect_idx_error(r, "count", 1, false, edit_count_29, "train-labels-idx1-ubyte: 29 labels for 30 images", NULL);
    expect_idx_error(r, "shape", 2, false, edit_rows_5, "t10k-images-idx3-ubyte: images of 4x5, but "
                     "train-images-idx3-ubyte holds images of 4x4", NULL);

    /* the brief's own example: 9,999 labels for 10,000 images */
    char dir[PATH_MAX];
    make_dir(r, "big");
    join(dir, r, "big");
    mnist_spec m = { .ntrain = 10, .rows = 2, .cols = 2 };
    make_mnist(dir, &m);
    size_t n;
    uint8_t *p = idx_images(10, 2, 2, 1, &n);
    edit_count_10000(&p, &n);
    put_file(dir, "t10k-images-idx3-ubyte", p, n, false);
    free(p);
    p = idx_labels(10, 1, &n);
    edit_count_9999(&p, &n);
    put_file(dir, "t10k-labels-idx1-ubyte", p, n, false);
    free(p);
    char err[256];
    assert_null(idx_open(dir, err, sizeof err));
    assert_string_equal(err, "t10k-labels-idx1-ubyte: 9,999 labels for 10,000 images");
}

static void test_idx_missing_files(void **state) {
    fixture *f = *state;
    char err[256], dir[PATH_MAX], path[PATH_MAX];
    assert_null(idx_open(join(dir, f->root, "nowhere"), err, sizeof err));
    assert_contains(err, "No such file or directory");

    mnist_spec m = { .ntrain = 3, .ntest = 2, .rows = 2, .cols = 2 };
    make_mnist(f->root, &m);
    assert_null(idx_open(join(path, f->root, "train-images-idx3-ubyte"), err, sizeof err));
    assert_contains(err, "is not a folder");

    unlink(join(path, f->root, "t10k-labels-idx1-ubyte"));
    assert_null(idx_open(f->root, err, sizeof err));
    assert_contains(err, "t10k-images-idx3-ubyte without t10k-labels-idx1-ubyte");

    unlink(join(path, f->root, "t10k-images-idx3-ubyte"));
    idx_source *s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);                           /* t10k is optional */
    assert_int_equal(idx_count(s, READER_TEST), 0);
    idx_close(s);

    unlink(join(path, f->root, "train-labels-idx1-ubyte"));
    assert_null(idx_open(f->root, err, sizeof err));
    assert_contains(err, "no train-labels-idx1-ubyte (or train-labels-idx1-ubyte.gz) in ");

    /* a folder in the place of a file does not count as the file */
    assert_int_equal(mkdir(path, 0755), 0);
    assert_null(idx_open(f->root, err, sizeof err));
    assert_contains(err, "no train-labels-idx1-ubyte");
    rmdir(path);

    /* a symbolic link in a file's place is refused, not followed */
    char target[PATH_MAX];
    make_dir(f->root, "linked");
    join(dir, f->root, "linked");
    m.ntest = 0;
    make_mnist(dir, &m);
    join(target, dir, "train-labels-idx1-ubyte");
    assert_int_equal(rename(target, join(path, f->root, "elsewhere")), 0);
    assert_int_equal(symlink(path, target), 0);
    assert_null(idx_open(dir, err, sizeof err));
    assert_string_equal(err, "train-labels-idx1-ubyte is a symbolic link; links in an import folder are not followed");

    /* a plain file is read before a gzipped one of the same name */
    make_dir(f->root, "both");
    join(dir, f->root, "both");
    make_mnist(dir, &m);
    put_file(dir, "train-images-idx3-ubyte.gz", "garbage", 7, false);
    s = idx_open(dir, err, sizeof err);
    assert_non_null(s);
    idx_close(s);
}

static void test_idx_corrupt_gzip(void **state) {
    fixture *f = *state;
    mnist_spec m = { .ntrain = 200, .rows = 8, .cols = 8, .gz = true };
    make_mnist(f->root, &m);
    char path[PATH_MAX], err[256];
    size_t n = 0;
    uint8_t *p = (uint8_t *)du_read_file(join(path, f->root, "train-images-idx3-ubyte.gz"), &n);
    assert_non_null(p);
    /* a gzip stream cut in the middle, then one with its body scrambled */
    assert_int_equal(du_write_file(path, p, n / 2), 0);
    assert_null(idx_open(f->root, err, sizeof err));
    assert_contains(err, "train-images-idx3-ubyte.gz: ");
    for (size_t i = 20; i < n - 8; i++) p[i] ^= 0x5a;
    assert_int_equal(du_write_file(path, p, n), 0);
    assert_null(idx_open(f->root, err, sizeof err));
    assert_contains(err, "train-images-idx3-ubyte.gz: ");
    free(p);
}

/* Random bytes in every place, and headers that are right with random rest. */
static void test_idx_garbage_never_crashes(void **state) {
    fixture *f = *state;
    uint64_t rng = 13;
    char err[512];
    for (int round = 0; round < 60; round++) {
        char dir[PATH_MAX], sub[32];
        snprintf(sub, sizeof sub, "g%d", round);
        make_dir(f->root, sub);
        join(dir, f->root, sub);
        mnist_spec m = { .ntrain = 12, .ntest = 5, .rows = 3, .cols = 3, .gz = round % 3 == 0 };
        make_mnist(dir, &m);
        int k = round % 4;
        size_t n = splitmix(&rng) % 400;
        uint8_t *p = malloc(n + 16);
        for (size_t i = 0; i < n + 16; i++) p[i] = (uint8_t)splitmix(&rng);
        if (round % 2 == 0 && n >= 16) {    /* a right magic, random dimensions and data */
            be32(p, k % 2 == 0 ? 0x803 : 0x801);
            if (round % 4 == 0) be32(p + 4, (uint32_t)(splitmix(&rng) % 20));
        }
        char name[64];
        mnist_name(name, sizeof name, &m, k);
        put_file(dir, name, p, n, m.gz && round % 2 == 0);    /* sometimes random bytes where gzip should be */
        free(p);
        idx_source *s = idx_open(dir, err, sizeof err);
        if (!s) {
            assert_true(strlen(err) > 0);
            continue;
        }
        /* it passed every check: then it reads to the end */
        int w, h;
        idx_shape(s, &w, &h);
        idx_seen seen = { .w = w, .h = h };
        assert_int_equal(idx_read(s, idx_collect, &seen, err, sizeof err), 0);
        assert_int_equal(seen.n[0], idx_count(s, READER_TRAIN));
        assert_int_equal(seen.n[1], idx_count(s, READER_TEST));
        idx_close(s);
    }
}

/* 60,000 images of 28x28, gzipped: the reader's memory does not grow with
 * the file (47 MB of pixels). Runs first, before other tests raise the peak. */
static void test_idx_60000_streams(void **state) {
    fixture *f = *state;
    const uint32_t count = 60000, side = 28;
    char path[PATH_MAX];
    /* the images written one at a time, so that the test does not hold them either */
    struct archive *a = archive_write_new();
    assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    assert_int_equal(archive_write_set_filter_option(a, "gzip", "compression-level", "1"), ARCHIVE_OK);
    assert_int_equal(archive_write_set_format_raw(a), ARCHIVE_OK);
    assert_int_equal(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, join(path, f->root, "train-images-idx3-ubyte.gz")), ARCHIVE_OK);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "data");
    archive_entry_set_filetype(e, AE_IFREG);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    archive_entry_free(e);
    uint8_t hdr[16], img[28 * 28];
    be32(hdr, 0x803), be32(hdr + 4, count), be32(hdr + 8, side), be32(hdr + 12, side);
    assert_int_equal(archive_write_data(a, hdr, 16), 16);
    for (size_t i = 0; i < count; i++) {
        for (uint32_t y = 0; y < side; y++)
            for (uint32_t x = 0; x < side; x++) img[y * side + x] = idx_pix(i, y, x, 0);
        assert_int_equal(archive_write_data(a, img, sizeof img), (la_ssize_t)sizeof img);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    size_t n;
    uint8_t *lab = idx_labels(count, 0, &n);
    put_file(f->root, "train-labels-idx1-ubyte.gz", lab, n, true);
    free(lab);

    struct rusage before, after;
    assert_int_equal(getrusage(RUSAGE_SELF, &before), 0);
    char err[256];
    idx_source *s = idx_open(f->root, err, sizeof err);
    assert_non_null(s);
    idx_seen seen = { .w = 28, .h = 28, .check_pixels = true };
    assert_int_equal(idx_read(s, idx_collect, &seen, err, sizeof err), 0);
    idx_close(s);
    assert_int_equal(getrusage(RUSAGE_SELF, &after), 0);
    assert_int_equal(seen.n[READER_TRAIN], count);
    assert_int_equal(seen.bad, 0);
    long grew_kib = after.ru_maxrss - before.ru_maxrss;
    print_message("idx: 60,000 gzipped 28x28 images read; peak resident memory grew by %ld KiB\n", grew_kib);
    assert_true(grew_kib < 8 * 1024);
}

/* ---- CIFAR ---------------------------------------------------------------------------------- */

static uint8_t cifar_pix(int salt, size_t rec, size_t k) { return (uint8_t)(rec * 13 + k * 7 + (size_t)salt * 31); }
static int cifar_fine(int salt, size_t rec, int nfine) { return (int)((rec * 3 + (size_t)salt) % (size_t)nfine); }
static int cifar_coarse(int salt, size_t rec, int ncoarse) { return (int)((rec + (size_t)salt * 5) % (size_t)ncoarse); }

/* n records of a batch: CIFAR-10 (label = the fine one) or CIFAR-100. */
static uint8_t *cifar_batch(cifar_variant v, int salt, size_t nrec, int nfine, int ncoarse, size_t *len) {
    size_t lb = v == CIFAR_100 ? 2 : 1, rec = lb + CIFAR_PIXELS;
    *len = nrec * rec;
    uint8_t *p = malloc(*len + 1);
    assert_non_null(p);
    for (size_t r = 0; r < nrec; r++) {
        uint8_t *q = p + r * rec;
        if (v == CIFAR_100) {
            q[0] = (uint8_t)cifar_coarse(salt, r, ncoarse);
            q[1] = (uint8_t)cifar_fine(salt, r, nfine);
        } else {
            q[0] = (uint8_t)cifar_fine(salt, r, nfine);
        }
        for (size_t k = 0; k < CIFAR_PIXELS; k++) q[lb + k] = cifar_pix(salt, r, k);
    }
    return p;
}

/* The records expected, in order: (split, salt, record). */
typedef struct cifar_expect {
    struct {
        reader_split split;
        int salt;
        size_t rec;
    } at[4096];
    size_t n, pos;
    size_t index[2];
    int bad;
    bool coarse;
    int nfine, ncoarse;
    size_t stop_at;
} cifar_expect;

static void expect_batch(cifar_expect *x, reader_split split, int salt, size_t nrec) {
    for (size_t r = 0; r < nrec; r++) {
        assert_true(x->n < sizeof x->at / sizeof x->at[0]);
        x->at[x->n].split = split;
        x->at[x->n].salt = salt;
        x->at[x->n++].rec = r;
    }
}

static int cifar_collect(void *arg, const cifar_image *im, char *err, size_t errlen) {
    cifar_expect *x = arg;
    if (x->pos >= x->n) {
        x->bad++;
        return 0;
    }
    int salt = x->at[x->pos].salt;
    size_t rec = x->at[x->pos].rec;
    if (im->split != x->at[x->pos].split || im->index != x->index[im->split]) x->bad++;
    int want = x->coarse ? cifar_coarse(salt, rec, x->ncoarse) : cifar_fine(salt, rec, x->nfine);
    if (im->label != want) x->bad++;
    for (size_t k = 0; k < CIFAR_PIXELS; k++)
        if (im->chw[k] != cifar_pix(salt, rec, k)) {
            x->bad++;
            break;
        }
    x->index[im->split]++;
    x->pos++;
    if (x->stop_at && x->pos == x->stop_at) {
        snprintf(err, errlen, "cancelled");
        return -1;
    }
    return 0;
}

static const char cifar10_meta[] = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";

static void put_batch(const char *dir, const char *name, cifar_variant v, int salt, size_t nrec, int nfine,
                      int ncoarse) {
    size_t len;
    uint8_t *p = cifar_batch(v, salt, nrec, nfine, ncoarse, &len);
    put_file(dir, name, p, len, false);
    free(p);
}

static void test_cifar10_folder(void **state) {
    fixture *f = *state;
    char dir[PATH_MAX];
    make_dir(f->root, "cifar-10-batches-bin");
    join(dir, f->root, "cifar-10-batches-bin");
    /* data_batch_10 after data_batch_2: ordered by number, not by name */
    put_batch(dir, "data_batch_10.bin", CIFAR_10, 3, 3, 10, 0);
    put_batch(dir, "data_batch_1.bin", CIFAR_10, 1, 70, 10, 0);   /* more than one read block */
    put_batch(dir, "data_batch_2.bin", CIFAR_10, 2, 5, 10, 0);
    put_batch(dir, "test_batch.bin", CIFAR_10, 4, 6, 10, 0);
    put_file(dir, "batches.meta.txt", cifar10_meta, sizeof cifar10_meta - 1, false);
    put_file(dir, "readme.html", "<html>", 6, false);

    static cifar_expect x;
    x = (cifar_expect){ .nfine = 10 };
    expect_batch(&x, READER_TRAIN, 1, 70);
    expect_batch(&x, READER_TRAIN, 2, 5);
    expect_batch(&x, READER_TRAIN, 3, 3);
    expect_batch(&x, READER_TEST, 4, 6);

    /* the folder itself, and its parent (the subfolder of the published archive) */
    const char *paths[2] = { dir, f->root };
    for (int i = 0; i < 2; i++) {
        char err[256] = "";
        cifar_source *s = cifar_open(paths[i], CIFAR_LABELS_FINE, err, sizeof err);
        assert_non_null(s);
        assert_int_equal(cifar_kind(s), CIFAR_10);
        assert_int_equal(cifar_count(s, READER_TRAIN), 78);
        assert_int_equal(cifar_count(s, READER_TEST), 6);
        assert_int_equal(cifar_nclasses(s), 10);
        assert_string_equal(cifar_class_name(s, 0), "airplane");
        assert_string_equal(cifar_class_name(s, 9), "truck");
        assert_null(cifar_class_name(s, 10));
        assert_string_equal(cifar_names_file(s), i == 0 ? "batches.meta.txt" : "cifar-10-batches-bin/batches.meta.txt");
        x.pos = 0, x.index[0] = x.index[1] = 0, x.bad = 0;
        assert_int_equal(cifar_read(s, cifar_collect, &x, err, sizeof err), 0);
        assert_int_equal(x.pos, x.n);
        assert_int_equal(x.bad, 0);
        /* the callback stops it */
        x.pos = 0, x.index[0] = x.index[1] = 0, x.stop_at = 72;
        assert_int_equal(cifar_read(s, cifar_collect, &x, err, sizeof err), -1);
        assert_string_equal(err, "cancelled");
        assert_int_equal(x.pos, 72);
        x.stop_at = 0;
        cifar_close(s);
    }
    cifar_close(NULL);

    /* without the meta file the classes are numbered up to the largest label */
    char path[PATH_MAX], err[256];
    unlink(join(path, dir, "batches.meta.txt"));
    cifar_source *s = cifar_open(dir, CIFAR_LABELS_FINE, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(cifar_nclasses(s), 10);
    assert_string_equal(cifar_class_name(s, 7), "7");
    assert_null(cifar_names_file(s));
    cifar_close(s);
}

typedef struct tar_entry {
    const char *name;
    const void *data;       /* NULL: a folder */
    size_t len;
} tar_entry;

static void write_tar(const char *path, bool gz, const tar_entry *e, size_t n) {
    struct archive *a = archive_write_new();
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    if (gz) assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_filetype(ae, e[i].data ? AE_IFREG : AE_IFDIR);
        archive_entry_set_perm(ae, e[i].data ? 0644 : 0755);
        archive_entry_set_size(ae, e[i].data ? (la_int64_t)e[i].len : 0);
        assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
        if (e[i].data && e[i].len) assert_int_equal(archive_write_data(a, e[i].data, e[i].len), (la_ssize_t)e[i].len);
        archive_entry_free(ae);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

static const char fine_names[] = "apple\nbee\ncar\ndolphin\nelm\nfox\ngirl\nhouse\n";   /* 8 */
static const char coarse_names[] = "fruit\r\nanimals\r\nvehicles\r\n";                 /* 3 */

static void test_cifar100_tar_gz(void **state) {
    fixture *f = *state;
    size_t ntr, nte;
    uint8_t *tr = cifar_batch(CIFAR_100, 1, 90, 8, 3, &ntr), *te = cifar_batch(CIFAR_100, 2, 17, 8, 3, &nte);
    const tar_entry entries[] = {
        { "cifar-100-binary/", NULL, 0 },
        { "cifar-100-binary/coarse_label_names.txt", coarse_names, sizeof coarse_names - 1 },
        { "cifar-100-binary/test.bin", te, nte },              /* test before train: archive order */
        { "cifar-100-binary/._train.bin", "mac", 3 },          /* hidden: ignored */
        { "cifar-100-binary/train.bin", tr, ntr },
        { "cifar-100-binary/fine_label_names.txt", fine_names, sizeof fine_names - 1 },
        { "cifar-100-binary/readme.txt", "x", 1 },
    };
    char path[PATH_MAX], err[256] = "";
    write_tar(join(path, f->root, "cifar-100-binary.tar.gz"), true, entries, sizeof entries / sizeof entries[0]);
    static cifar_expect x;
    for (int coarse = 0; coarse < 2; coarse++) {
        cifar_source *s = cifar_open(path, coarse ? CIFAR_LABELS_COARSE : CIFAR_LABELS_FINE, err, sizeof err);
        assert_non_null(s);
        assert_int_equal(cifar_kind(s), CIFAR_100);
        assert_int_equal(cifar_count(s, READER_TRAIN), 90);
        assert_int_equal(cifar_count(s, READER_TEST), 17);
        assert_int_equal(cifar_nclasses(s), coarse ? 3 : 8);
        assert_string_equal(cifar_class_name(s, 0), coarse ? "fruit" : "apple");
        assert_string_equal(cifar_class_name(s, 2), coarse ? "vehicles" : "car");
        assert_string_equal(cifar_names_file(s), coarse ? "cifar-100-binary/coarse_label_names.txt"
                                                        : "cifar-100-binary/fine_label_names.txt");
        x = (cifar_expect){ .nfine = 8, .ncoarse = 3, .coarse = coarse };
        expect_batch(&x, READER_TEST, 2, 17);
        expect_batch(&x, READER_TRAIN, 1, 90);
        assert_int_equal(cifar_read(s, cifar_collect, &x, err, sizeof err), 0);
        assert_int_equal(x.pos, x.n);
        assert_int_equal(x.bad, 0);
        cifar_close(s);
    }
    /* the same as a plain tar, and CIFAR-10 in a tar too */
    write_tar(join(path, f->root, "c100.tar"), false, entries, sizeof entries / sizeof entries[0]);
    cifar_source *s = cifar_open(path, CIFAR_LABELS_FINE, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(cifar_count(s, READER_TRAIN), 90);
    cifar_close(s);
    free(tr);
    free(te);

    uint8_t *b1 = cifar_batch(CIFAR_10, 1, 3, 10, 0, &ntr);
    const tar_entry c10[] = {
        { "cifar-10-batches-bin/data_batch_1.bin", b1, ntr },
        { "cifar-10-batches-bin/batches.meta.txt", cifar10_meta, sizeof cifar10_meta - 1 },
    };
    write_tar(join(path, f->root, "c10.tar.gz"), true, c10, 2);
    s = cifar_open(path, CIFAR_LABELS_COARSE, err, sizeof err);      /* coarse: nothing to CIFAR-10 */
    assert_non_null(s);
    assert_int_equal(cifar_kind(s), CIFAR_10);
    assert_int_equal(cifar_count(s, READER_TRAIN), 3);
    assert_int_equal(cifar_count(s, READER_TEST), 0);
    assert_int_equal(cifar_nclasses(s), 10);
    x = (cifar_expect){ .nfine = 10 };
    expect_batch(&x, READER_TRAIN, 1, 3);
    assert_int_equal(cifar_read(s, cifar_collect, &x, err, sizeof err), 0);
    assert_int_equal(x.bad, 0);
    assert_int_equal(x.pos, 3);
    cifar_close(s);
    free(b1);
}

/* A CIFAR-10 folder of two good batches and a meta file, then one change. */
static void cifar10_folder(const char *root, const char *sub, char *dir) {
    make_dir(root, sub);
    join(dir, root, sub);
    put_batch(dir, "data_batch_1.bin", CIFAR_10, 1, 12, 10, 0);
    put_batch(dir, "test_batch.bin", CIFAR_10, 2, 4, 10, 0);
    put_file(dir, "batches.meta.txt", cifar10_meta, sizeof cifar10_meta - 1, false);
}

static void expect_cifar_error(const char *path, cifar_labels l, const char *want) {
    char err[512] = "";
    cifar_source *s = cifar_open(path, l, err, sizeof err);
    if (s) print_error("cifar_open(%s) succeeded; expected \"%s\"\n", path, want);
    assert_null(s);
    assert_contains(err, want);
}

static void test_cifar_bad_input(void **state) {
    fixture *f = *state;
    char dir[PATH_MAX], path[PATH_MAX];
    const char *r = f->root;

    /* a batch that is not a whole number of records: 12 records and 2 bytes */
    cifar10_folder(r, "len", dir);
    size_t n;
    uint8_t *p = cifar_batch(CIFAR_10, 1, 12, 10, 0, &n);
    put_file(dir, "data_batch_2.bin", p, n + 2 > 3073 ? n - 3071 : n, false);   /* 11 records + 2 bytes */
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "data_batch_2.bin: 33,805 bytes is not a whole number of "
                       "3,073-byte records (1 label byte and 3072 pixel bytes each)");
    free(p);

    /* an empty batch is a whole number (0) of records; one byte is not */
    cifar10_folder(r, "one", dir);
    put_file(dir, "test_batch.bin", "x", 1, false);
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "test_batch.bin: 1 bytes is not a whole number");

    /* a label beyond the meta file's classes */
    cifar10_folder(r, "label", dir);
    p = cifar_batch(CIFAR_10, 1, 12, 10, 0, &n);
    p[5 * 3073] = 10;
    put_file(dir, "data_batch_3.bin", p, n, false);
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "data_batch_3.bin: record 6 has label 10, beyond the 10 classes of "
                       "batches.meta.txt");
    free(p);

    /* CIFAR-100: a fine label beyond fine_label_names.txt, in the .tar.gz; the coarse labels are fine */
    p = cifar_batch(CIFAR_100, 1, 5, 8, 3, &n);
    p[2 * 3074 + 1] = 8;
    const tar_entry bad100[] = {
        { "d/train.bin", p, n },
        { "d/fine_label_names.txt", fine_names, sizeof fine_names - 1 },
        { "d/coarse_label_names.txt", coarse_names, sizeof coarse_names - 1 },
    };
    write_tar(join(path, r, "bad100.tar.gz"), true, bad100, 3);
    expect_cifar_error(path, CIFAR_LABELS_FINE, "d/train.bin: record 3 has fine label 8, beyond the 8 classes of "
                       "d/fine_label_names.txt");
    char err[256];
    cifar_source *s = cifar_open(path, CIFAR_LABELS_COARSE, err, sizeof err);
    assert_non_null(s);
    cifar_close(s);
    /* its length not whole, in the archive */
    const tar_entry badlen[] = { { "d/train.bin", p, n - 1 } };
    write_tar(join(path, r, "badlen.tar.gz"), true, badlen, 1);
    expect_cifar_error(path, CIFAR_LABELS_FINE, "d/train.bin: 15,369 bytes is not a whole number of 3,074-byte "
                       "records (2 label bytes and 3072 pixel bytes each)");
    /* two entries of one name */
    const tar_entry twice[] = { { "a/train.bin", p, n }, { "b/train.bin", p, n } };
    write_tar(join(path, r, "twice.tar"), false, twice, 2);
    expect_cifar_error(path, CIFAR_LABELS_FINE, "two files named train.bin: a/train.bin and b/train.bin");
    /* both layouts */
    cifar10_folder(r, "both", dir);
    put_file(dir, "train.bin", p, n, false);
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "holds both CIFAR-10");
    free(p);

    /* a batch that is a symbolic link */
    cifar10_folder(r, "link", dir);
    char target[PATH_MAX];
    join(target, dir, "test_batch.bin");
    assert_int_equal(rename(target, join(path, r, "tb.bin")), 0);
    assert_int_equal(symlink(path, target), 0);
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "test_batch.bin is a symbolic link; links in an import folder are not "
                       "followed");

    /* no training batch; an empty folder; a meta file that is not a class list */
    cifar10_folder(r, "notrain", dir);
    unlink(join(path, dir, "data_batch_1.bin"));
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "no CIFAR training batches in");
    make_dir(r, "empty");
    expect_cifar_error(join(path, r, "empty"), CIFAR_LABELS_FINE, "no CIFAR training batches in");
    cifar10_folder(r, "meta", dir);
    put_file(dir, "batches.meta.txt", "cat\ndog\ncat\n", 12, false);
    expect_cifar_error(dir, CIFAR_LABELS_FINE, "batches.meta.txt: line 3 repeats the class \"cat\" of line 1");

    /* a missing path; a file that is no archive; the python version's archive */
    expect_cifar_error(join(path, r, "nowhere"), CIFAR_LABELS_FINE, "No such file or directory");
    put_file(r, "junk.tar.gz", "this is not an archive at all", 29, false);
    expect_cifar_error(join(path, r, "junk.tar.gz"), CIFAR_LABELS_FINE, "not a tar or tar.gz archive of CIFAR batches");
    put_file(r, "empty.tar.gz", "", 0, false);
    expect_cifar_error(join(path, r, "empty.tar.gz"), CIFAR_LABELS_FINE, "no CIFAR training batches in");
    const tar_entry py[] = { { "cifar-10-batches-py/data_batch_1", "pickle", 6 } };
    write_tar(join(path, r, "py.tar.gz"), true, py, 1);
    expect_cifar_error(path, CIFAR_LABELS_FINE, "expected CIFAR's binary version");
}

/* Counts records per split (arg: size_t[2]); labels must be within the classes. */
static int cifar_count_records(void *arg, const cifar_image *im, char *err, size_t errlen) {
    size_t *seen = arg;
    if (im->index != seen[im->split]) return -1;
    seen[im->split]++;
    return 0;
}

static void test_cifar_garbage_never_crashes(void **state) {
    fixture *f = *state;
    uint64_t rng = 99;
    char err[512], path[PATH_MAX];
    /* a real archive cut at many places */
    size_t n;
    uint8_t *b = cifar_batch(CIFAR_10, 1, 40, 10, 0, &n);
    const tar_entry c10[] = {
        { "cifar-10-batches-bin/batches.meta.txt", cifar10_meta, sizeof cifar10_meta - 1 },
        { "cifar-10-batches-bin/data_batch_1.bin", b, n },
        { "cifar-10-batches-bin/test_batch.bin", b, n },
    };
    write_tar(join(path, f->root, "full.tar.gz"), true, c10, 3);
    free(b);
    size_t len = 0;
    uint8_t *whole = (uint8_t *)du_read_file(path, &len);
    assert_non_null(whole);
    for (int round = 0; round < 40; round++) {
        char name[64];
        snprintf(name, sizeof name, "cut%d.tar.gz", round);
        join(path, f->root, name);
        size_t cut = (size_t)(splitmix(&rng) % len);
        uint8_t *q = malloc(len);
        memcpy(q, whole, len);
        if (round % 2) q[splitmix(&rng) % len] ^= (uint8_t)(1 + splitmix(&rng) % 255);   /* or one byte flipped */
        assert_int_equal(du_write_file(path, q, round % 2 ? len : cut), 0);
        free(q);
        cifar_source *s = cifar_open(path, CIFAR_LABELS_FINE, err, sizeof err);
        if (!s) {
            assert_true(strlen(err) > 0);
            continue;
        }
        size_t seen[2] = { 0, 0 };
        int rc = cifar_read(s, cifar_count_records, seen, err, sizeof err);
        if (rc == 0) {
            assert_int_equal(seen[READER_TRAIN], cifar_count(s, READER_TRAIN));
            assert_int_equal(seen[READER_TEST], cifar_count(s, READER_TEST));
        } else {
            assert_true(strlen(err) > 0);
        }
        cifar_close(s);
    }
    free(whole);
    /* random files as batches, meta files and archives */
    for (int round = 0; round < 40; round++) {
        char dir[PATH_MAX], sub[32];
        snprintf(sub, sizeof sub, "r%d", round);
        make_dir(f->root, sub);
        join(dir, f->root, sub);
        size_t rn = round % 5 == 0 ? 3073 * (1 + splitmix(&rng) % 4) : splitmix(&rng) % 20000;
        uint8_t *q = malloc(rn + 1);
        for (size_t i = 0; i < rn; i++) q[i] = (uint8_t)splitmix(&rng);
        static const char *const names[] = { "data_batch_1.bin", "train.bin", "batches.meta.txt", "x.tar.gz" };
        const char *name = names[round % 4];
        if (round % 4 == 2) put_batch(dir, "data_batch_1.bin", CIFAR_10, 1, 3, 10, 0);
        put_file(dir, name, q, rn, round % 8 == 3);
        free(q);
        cifar_source *s = cifar_open(round % 4 == 3 ? join(path, dir, name) : dir, CIFAR_LABELS_FINE, err, sizeof err);
        if (!s) {
            assert_true(strlen(err) > 0);
            continue;
        }
        assert_true(cifar_nclasses(s) >= 1 && cifar_nclasses(s) <= 256);
        cifar_close(s);
    }
}

/* ---- path label lists ----------------------------------------------------------------------- */

typedef struct list_seen {
    pathlist_entry e[64];
    char path[64][PATH_MAX];
    char problem[64][512];
    size_t n;
    size_t images, problems;
    int max_label;
    int nclasses;
    size_t stop_at;
    int bad;
} list_seen;

static int list_collect(void *arg, const pathlist_entry *e, char *err, size_t errlen) {
    list_seen *s = arg;
    if (e->problem) {
        s->problems++;
        if (e->label != -1) s->bad++;
    } else {
        s->images++;
        if (!e->path || e->label < 0 || e->label >= s->nclasses) s->bad++;
    }
    if (s->n < 64) {
        s->e[s->n] = *e;
        snprintf(s->path[s->n], PATH_MAX, "%s", e->path ? e->path : "(null)");
        snprintf(s->problem[s->n], 512, "%s", e->problem ? e->problem : "");
        s->n++;
    }
    if (s->stop_at && s->images + s->problems == s->stop_at) {
        snprintf(err, errlen, "enough");
        return -1;
    }
    return 0;
}

static void test_pathlist_with_labels(void **state) {
    fixture *f = *state;
    char dir[PATH_MAX], list[PATH_MAX], labels[PATH_MAX], want[PATH_MAX + 64];
    make_dir(f->root, "my lists");
    join(dir, f->root, "my lists");
    const char text[] =
        "# made by an earlier tool\r\n"          /* 1 */
        "\r\n"                                   /* 2 */
        "cats/a cat 1.png 0\r\n"                 /* 3: a path with spaces */
        "  dogs/b.png\t1  \r\n"                  /* 4: tabs and blanks around */
        "/abs/c d.png 2\n"                       /* 5: absolute */
        "../up/e.png 1\n"                        /* 6: joined, .. kept */
        "nolabel.png\n"                          /* 7 */
        "f.png cat\n"                            /* 8 */
        "g.png 3\n"                              /* 9: out of range */
        "h.png -1\n"                             /* 10 */
        "   # an indented comment\n"             /* 11 */
        "\t \n"                                  /* 12 */
        "i.png 2";                               /* 13: no final newline */
    put_file(dir, "train.txt", text, sizeof text - 1, false);
    const char names[] = "cat\r\n\r\ndog\n  bird  \n\n";
    put_file(dir, "labels.txt", names, sizeof names - 1, false);
    join(list, dir, "train.txt");
    join(labels, dir, "labels.txt");

    char err[256] = "";
    pathlist *l = pathlist_open(list, labels, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(pathlist_count(l), 5);
    assert_int_equal(pathlist_problems(l), 4);
    assert_int_equal(pathlist_nclasses(l), 3);
    assert_string_equal(pathlist_class_name(l, 0), "cat");
    assert_string_equal(pathlist_class_name(l, 2), "bird");
    assert_null(pathlist_class_name(l, 3));

    static list_seen s;
    s = (list_seen){ .nclasses = 3 };
    assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), 0);
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.n, 9);
    static const struct {
        unsigned long line;
        const char *path;     /* relative to dir, or absolute; NULL: none */
        int label;
        const char *problem;
    } want_e[] = {
        { 3, "cats/a cat 1.png", 0, NULL },
        { 4, "dogs/b.png", 1, NULL },
        { 5, "/abs/c d.png", 2, NULL },
        { 6, "../up/e.png", 1, NULL },
        { 7, "nolabel.png", -1, "no label: expected `path label`" },
        { 8, "f.png", -1, "label \"cat\" is not a whole number" },
        { 9, "g.png", -1, "label 3 is out of range: labels.txt names 3 classes (0..2)" },
        { 10, "h.png", -1, "label -1 is negative" },
        { 13, "i.png", 2, NULL },
    };
    for (size_t i = 0; i < 9; i++) {
        assert_int_equal(s.e[i].line, want_e[i].line);
        assert_int_equal(s.e[i].label, want_e[i].label);
        if (want_e[i].path[0] == '/')
            snprintf(want, sizeof want, "%s", want_e[i].path);
        else
            snprintf(want, sizeof want, "%s/%s", dir, want_e[i].path);
        assert_string_equal(s.path[i], want);
        assert_string_equal(s.problem[i], want_e[i].problem ? want_e[i].problem : "");
    }
    /* read again; and stopped by the callback */
    s = (list_seen){ .nclasses = 3, .stop_at = 2 };
    assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), -1);
    assert_string_equal(err, "enough");
    assert_int_equal(s.n, 2);
    pathlist_close(l);
    pathlist_close(NULL);

    /* without the labels file: classes "0" .. the largest label, 3 now good */
    l = pathlist_open(list, NULL, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(pathlist_count(l), 6);
    assert_int_equal(pathlist_problems(l), 3);
    assert_int_equal(pathlist_nclasses(l), 4);
    assert_string_equal(pathlist_class_name(l, 3), "3");
    s = (list_seen){ .nclasses = 4 };
    assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), 0);
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.images, 6);
    assert_int_equal(s.e[6].line, 9);
    assert_int_equal(s.e[6].label, 3);
    pathlist_close(l);
}

static void test_pathlist_odd_lines(void **state) {
    fixture *f = *state;
    char list[PATH_MAX], err[256];
    /* a line too long, one with a NUL byte, labels around the limit, then a good line */
    const char odd[] = "x\0y.png 1\nbig.png 99999999999999999999\nmax.png 65534\nmaxp1.png 65535\nok.png +0\n";
    put_file(f->root, "odd2.txt", odd, sizeof odd - 1, false);
    char big_line[PATHLIST_LINE_MAX + 64];
    memset(big_line, 'b', sizeof big_line);
    memcpy(big_line + sizeof big_line - 3, " 1\n", 3);
    char path2[PATH_MAX];
    FILE *fp = fopen(join(path2, f->root, "odd3.txt"), "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(big_line, 1, sizeof big_line, fp), sizeof big_line);
    assert_int_equal(fwrite(odd, 1, sizeof odd - 1, fp), sizeof odd - 1);
    fclose(fp);
    pathlist *l = pathlist_open(path2, NULL, err, sizeof err);
    assert_non_null(l);
    static list_seen s;
    s = (list_seen){ .nclasses = 65535 };
    assert_int_equal(pathlist_nclasses(l), 65535);
    assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), 0);
    assert_int_equal(s.n, 6);
    assert_int_equal(s.e[0].line, 1);
    assert_string_equal(s.problem[0], "line longer than 8,192 bytes");
    assert_int_equal(s.e[1].line, 2);
    assert_string_equal(s.problem[1], "line holds a NUL byte (not a text list)");
    assert_int_equal(s.e[2].line, 3);
    assert_string_equal(s.problem[2], "label 99999999999999999999 is out of range: at most 65534");
    assert_int_equal(s.e[3].label, 65534);
    assert_string_equal(s.problem[4], "label 65535 is out of range: at most 65534");
    assert_int_equal(s.e[5].label, 0);
    assert_int_equal(s.e[5].line, 6);
    assert_int_equal(s.bad, 0);
    pathlist_close(l);

    /* a list in the current folder: paths joined to "." */
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->root), 0);
    put_file(".", "here.txt", "p q.png 0\n", 10, false);
    l = pathlist_open("here.txt", NULL, err, sizeof err);
    assert_int_equal(chdir(cwd), 0);
    assert_non_null(l);
    s = (list_seen){ .nclasses = 1 };
    assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), 0);
    assert_string_equal(s.path[0], "./p q.png");
    pathlist_close(l);

    /* an empty list opens with nothing in it */
    put_file(f->root, "empty.txt", "", 0, false);
    l = pathlist_open(join(list, f->root, "empty.txt"), NULL, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(pathlist_count(l), 0);
    assert_int_equal(pathlist_nclasses(l), 0);
    pathlist_close(l);
}

static void test_pathlist_bad_files(void **state) {
    fixture *f = *state;
    char list[PATH_MAX], labels[PATH_MAX], err[256];
    join(list, f->root, "l.txt");
    put_file(f->root, "l.txt", "a.png 0\n", 8, false);
    assert_null(pathlist_open(join(labels, f->root, "missing.txt"), NULL, err, sizeof err));
    assert_contains(err, "cannot read");
    assert_contains(err, "No such file or directory");
    assert_null(pathlist_open(f->root, NULL, err, sizeof err));
    assert_contains(err, "is not a regular file");
    assert_null(pathlist_open(list, labels, err, sizeof err));
    assert_contains(err, "missing.txt: No such file or directory");
    put_file(f->root, "dup.txt", "a\nb\na\n", 6, false);
    assert_null(pathlist_open(list, join(labels, f->root, "dup.txt"), err, sizeof err));
    assert_contains(err, "dup.txt: line 3 repeats the class \"a\"");
    put_file(f->root, "blank.txt", "\n\n", 2, false);
    assert_null(pathlist_open(list, join(labels, f->root, "blank.txt"), err, sizeof err));
    assert_contains(err, "blank.txt: names no classes");
}

static void test_pathlist_garbage_never_crashes(void **state) {
    fixture *f = *state;
    uint64_t rng = 7;
    static const char alphabet[] = "ab /.\t\r\n#0123456789-+\xff\xc3";
    char err[256], path[PATH_MAX];
    join(path, f->root, "g.txt");
    for (int round = 0; round < 80; round++) {
        size_t n = splitmix(&rng) % 30000;
        char *t = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = splitmix(&rng);
            t[i] = round % 2 ? (char)r : alphabet[r % (sizeof alphabet - 1)];
            if (round % 5 == 0 && r % 97 == 0) t[i] = '\0';
        }
        assert_int_equal(du_write_file(path, t, n), 0);
        free(t);
        pathlist *l = pathlist_open(path, NULL, err, sizeof err);
        assert_non_null(l);
        static list_seen s;
        s = (list_seen){ .nclasses = pathlist_nclasses(l) };
        assert_int_equal(pathlist_read(l, list_collect, &s, err, sizeof err), 0);
        assert_int_equal(s.images, pathlist_count(l));
        assert_int_equal(s.problems, pathlist_problems(l));
        assert_int_equal(s.bad, 0);
        pathlist_close(l);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idx_60000_streams, setup, teardown),   /* first: it measures memory */
        cmocka_unit_test(test_grouped_and_class_names),
        cmocka_unit_test_setup_teardown(test_idx_plain_with_test_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_gzipped_dotted_no_test, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_classes_are_max_label_plus_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_missing_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_corrupt_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_garbage_never_crashes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cifar10_folder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cifar100_tar_gz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cifar_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cifar_garbage_never_crashes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pathlist_with_labels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pathlist_odd_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pathlist_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pathlist_garbage_never_crashes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
