/* tests/unit/test_import_limits.c: names from any encoding made UTF-8
 * (base/utf8.h), and the importer's limits (jobs/import.h): an image over
 * image-pixels is skipped by its header and listed, the images' pixels over
 * import-pixels and a prepared size over dataset-bytes fail the import
 * before anything is written, and a Latin-1 class folder becomes a UTF-8
 * class name. Archives are written here with libarchive, images with
 * engine/image.h's encoder (and one PNG header by hand). */
#define _GNU_SOURCE   /* nftw, mkdtemp (data_util.h) */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "base/utf8.h"
#include "data_util.h"            /* du_mkdtemp, du_rm_rf */
#include "engine/image.h"         /* img_encode_png */
#include "jobs/import.h"

/* ---- base/utf8.h ----------------------------------------------------------------- */

static void expect_utf8(const char *in, const char *want)
{
    char out[64];
    utf8_from_any(in, strlen(in), out, sizeof out);
    assert_string_equal(out, want);
    assert_true(utf8_valid(out, strlen(out), NULL));
}

static void test_utf8_rule(void **state)
{
    (void)state;
    expect_utf8("caf\xe9", "caf\xc3\xa9");                       /* Latin-1 e-acute */
    expect_utf8("na\xc3\xafve", "na\xc3\xafve");                 /* UTF-8 kept */
    expect_utf8("\xc3", "\xc3\x83");                             /* a cut sequence: its byte as Latin-1 */
    expect_utf8("\xed\xa0\x80", "\xc3\xad\xc2\xa0\xc2\x80");     /* a surrogate is not UTF-8 */
    expect_utf8("\xc0\xaf", "\xc3\x80\xc2\xaf");                 /* nor an overlong '/' */
    size_t bad = 99;
    assert_false(utf8_valid("ab\xff", 3, &bad));
    assert_int_equal(bad, 2);
    char small[4];                                               /* cut at a character, never inside one */
    assert_int_equal(utf8_from_any("a\xe9\xe9", 3, small, sizeof small), 3);
    assert_string_equal(small, "a\xc3\xa9");
    char *d = utf8_dup_any("\xff", 1);
    assert_string_equal(d, "\xc3\xbf");
    free(d);
}

/* ---- archives of images ---------------------------------------------------------------- */

typedef struct fixture {
    char root[256];
    char dir[300];
    char archive[300];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || !du_mkdtemp(f->root, sizeof f->root))
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/ds", f->root);
    snprintf(f->archive, sizeof f->archive, "%s/a.tar", f->root);
    if (mkdir(f->dir, 0755) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    du_rm_rf(f->root);
    free(f);
    return 0;
}

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

static blob small_png(uint8_t v)
{
    uint8_t pix[8 * 8];
    memset(pix, v, sizeof pix);
    blob b = { NULL, 0 };
    char why[128];
    assert_int_equal(img_encode_png(pix, 1, 8, 8, &b.p, &b.n, why, sizeof why), 0);
    return b;
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG whose header says side x side (its data is not there: the header
 * alone must decide). */
static blob huge_png_header(uint32_t side)
{
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    blob b = { malloc(8 + 25), 33 };
    assert_non_null(b.p);
    memcpy(b.p, sig, 8);
    uint8_t *c = b.p + 8;
    put_be32(c, 13);
    memcpy(c + 4, "IHDR", 4);
    put_be32(c + 8, side);
    put_be32(c + 12, side);
    c[16] = 8, c[17] = 0, c[18] = 0, c[19] = 0, c[20] = 0;      /* 8-bit grey */
    put_be32(c + 21, crc32_of(c + 4, 17));
    return b;
}

typedef struct named {
    const char *name;
    blob b;
} named;

static void write_tar(const char *path, named *e, size_t n)
{
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(archive_write_set_format_gnutar(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_copy_pathname(ae, e[i].name);             /* bytes as they are: Latin-1 stays */
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        archive_entry_set_size(ae, (la_int64_t)e[i].b.n);
        assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
        assert_int_equal(archive_write_data(a, e[i].b.p, e[i].b.n), (la_ssize_t)e[i].b.n);
        archive_entry_free(ae);
        free(e[i].b.p);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* Four 8x8 images in two classes, and extra (may be NULL) in class b. */
static void write_classes(const fixture *f, const char *class_a, blob *extra)
{
    char a1[64], a2[64];
    snprintf(a1, sizeof a1, "%s/1.png", class_a);
    snprintf(a2, sizeof a2, "%s/2.png", class_a);
    named e[5] = { { a1, small_png(10) }, { a2, small_png(20) }, { "b/1.png", small_png(200) },
                   { "b/2.png", small_png(210) }, { "b/huge.png", { NULL, 0 } } };
    size_t n = 4;
    if (extra)
        e[n++].b = *extra;
    write_tar(f->archive, e, n);
}

static size_t files_in(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* An image over image-pixels is passed over by its header: listed as
 * skipped with the limit named, the rest imported. */
static void test_image_pixels_skipped(void **state)
{
    fixture *f = *state;
    blob huge = huge_png_header(8192);                          /* 64 Mpx: over the default 32 Mi */
    write_classes(f, "a", &huge);
    import_opts o = IMPORT_OPTS_DEFAULT;
    import_report rep;
    ds_info info;
    char err[512] = "";
    if (import_archive_reported(f->archive, f->dir, &o, NULL, NULL, &info, &rep, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(info.train_count + info.val_count, 4);
    assert_int_equal(rep.skipped, 1);
    bool named_limit = false;
    for (int i = 0; i < rep.nproblems; i++)
        named_limit = named_limit || (strstr(rep.problems[i].path, "huge.png") &&
                                      strstr(rep.problems[i].why, "image-pixels"));
    assert_true(named_limit);
    ds_info_free(&info);
    import_report_free(&rep);
}

/* The images' pixels over import-pixels: the import fails before decoding
 * or writing anything. */
static void test_import_pixels(void **state)
{
    fixture *f = *state;
    write_classes(f, "a", NULL);
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.max_import_pixels = 3 * 64;                               /* three of the four 8x8 images */
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    if (!strstr(err, "import-pixels"))
        fail_msg("the failure should name the limit: \"%s\"", err);
    assert_int_equal(files_in(f->dir), 0);
    o.max_import_pixels = 4 * 64;                               /* exactly: imported */
    if (import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err) != 0)
        fail_msg("%s", err);
}

/* A size asked for that makes the prepared dataset larger than
 * dataset-bytes: refused from the count and shape, nothing written. */
static void test_dataset_bytes(void **state)
{
    fixture *f = *state;
    write_classes(f, "a", NULL);
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.width = o.height = 4096;
    o.channels = 3;
    o.max_dataset_bytes = 64u << 20;                            /* 4 x 48 MiB do not fit */
    char err[512] = "";
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    if (!strstr(err, "dataset-bytes") || !strstr(err, "4 images"))
        fail_msg("the failure should give the count and name the limit: \"%s\"", err);
    assert_int_equal(files_in(f->dir), 0);
    o.channels = 0;                                             /* the census picks the channels: grey */
    o.max_dataset_bytes = 4u * 16u << 20;                       /* 4 x 16 MiB and the records' extra: over */
    assert_int_equal(import_archive(f->archive, f->dir, &o, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "dataset-bytes"));
}

/* A class folder named in Latin-1 (as a GNU tar made on such a system
 * stores it): its name becomes UTF-8, and so does every path listed. */
static void test_latin1_class(void **state)
{
    fixture *f = *state;
    blob bad = { (uint8_t *)strdup("not an image"), 12 };
    write_classes(f, "caf\xe9", &bad);
    import_opts o = IMPORT_OPTS_DEFAULT;
    import_report rep;
    ds_info info;
    char err[512] = "";
    if (import_archive_reported(f->archive, f->dir, &o, NULL, NULL, &info, &rep, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(info.nclasses, 2);
    assert_string_equal(info.classes[1], "caf\xc3\xa9");        /* "b" sorts before it */
    assert_string_equal(info.classes[0], "b");
    for (int i = 0; i < rep.nproblems; i++)
        assert_true(utf8_valid(rep.problems[i].path, strlen(rep.problems[i].path), NULL));
    ds_info_free(&info);
    import_report_free(&rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_rule),
        cmocka_unit_test_setup_teardown(test_image_pixels_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_pixels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dataset_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latin1_class, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
