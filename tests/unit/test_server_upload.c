/* tests/unit/test_server_upload.c: the upload's archive check (import_probe,
 * jobs/import.c, which server/upload.c runs before it answers): what is
 * answered 400 at once (not an archive, no images) and what goes on to the
 * import; and that the check opens archives exactly as the importer does
 * (mtree specs and filters outside the importer's list are refused by both).
 * Archives are written here with libarchive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "jobs/import.h"          /* import_probe */

static const unsigned char png_head[16] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                                            0, 0, 0, 13, 'I', 'H', 'D', 'R' };
static const unsigned char jpeg_head[8] = { 0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F' };

typedef struct entry {
    const char *name;
    const void *data;
    size_t len;
    bool dir;
} entry;

typedef struct fixture {
    char dir[64];
    char path[128];
    char extra[128];                 /* a second file, for the mtree test */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-upload-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/a", f->dir);
    snprintf(f->extra, sizeof f->extra, "%s/b.png", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->path);
    unlink(f->extra);
    rmdir(f->dir);
    free(f);
    return 0;
}

typedef int (*archive_setup)(struct archive *);

/* Writes entries at path in format, through filter (NULL: none). */
static void write_archive_as(const char *path, const entry *e, size_t n, archive_setup format,
                             archive_setup filter)
{
    struct archive *a = archive_write_new();
    assert_non_null(a);
    assert_int_equal(format(a), ARCHIVE_OK);
    if (filter)
        assert_int_equal(filter(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_filetype(ae, e[i].dir ? AE_IFDIR : AE_IFREG);
        archive_entry_set_perm(ae, e[i].dir ? 0755 : 0644);
        archive_entry_set_size(ae, e[i].dir ? 0 : (la_int64_t)e[i].len);
        assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
        if (!e[i].dir && e[i].len)
            assert_int_equal(archive_write_data(a, e[i].data, e[i].len), (la_ssize_t)e[i].len);
        archive_entry_free(ae);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* Writes entries as a gzip'ed tar (zip when zip is true) at path. */
static void write_archive(const char *path, const entry *e, size_t n, bool zip)
{
    if (zip)
        write_archive_as(path, e, n, archive_write_set_format_zip, NULL);
    else
        write_archive_as(path, e, n, archive_write_set_format_pax_restricted, archive_write_add_filter_gzip);
}

static int probe(const char *path, char *code)
{
    api_error e;
    memset(&e, 0, sizeof e);
    import_check found;
    int rc = import_probe(path, NULL, &found, &e);
    snprintf(code, 48, "%s", e.code);
    if (rc != 0)
        assert_true(strlen(e.message) > 0);  /* every refusal says why */
    return rc;
}

static void test_not_an_archive(void **state)
{
    fixture *f = *state;
    char code[48];
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs("these are not the images you are looking for\n", fp);
    fclose(fp);
    assert_int_equal(probe(f->path, code), -1);
    assert_string_equal(code, "invalid_archive");

    /* A gzip stream that is cut short is damaged, not an archive of images. */
    static const unsigned char gz_cut[] = { 0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0x03, 0x2b };
    fp = fopen(f->path, "wb");
    fwrite(gz_cut, 1, sizeof gz_cut, fp);
    fclose(fp);
    assert_int_equal(probe(f->path, code), -1);
    assert_string_equal(code, "invalid_archive");
}

static void test_no_images(void **state)
{
    fixture *f = *state;
    char code[48];
    const entry text_only[] = {
        { "cats/", NULL, 0, true },
        { "cats/readme.txt", "no pictures here\n", 17, false },
    };
    write_archive(f->path, text_only, 2, false);
    assert_int_equal(probe(f->path, code), -1);
    assert_string_equal(code, "no_images");

    /* A PNG named .png but outside any class folder, a hidden one, and one in
     * __MACOSX do not count; a .png holding text does not either. */
    const entry outside[] = {
        { "loose.png", png_head, sizeof png_head, false },
        { "cats/.hidden.png", png_head, sizeof png_head, false },
        { "__MACOSX/cats/x.png", png_head, sizeof png_head, false },
        { "cats/fake.png", "not a png", 9, false },
    };
    write_archive(f->path, outside, 4, false);
    assert_int_equal(probe(f->path, code), -1);
    assert_string_equal(code, "no_images");

    /* An empty file reads as an empty archive. */
    FILE *fp = fopen(f->path, "w");
    fclose(fp);
    assert_int_equal(probe(f->path, code), -1);
    assert_string_equal(code, "no_images");
}

static void test_images_found(void **state)
{
    fixture *f = *state;
    char code[48];
    const entry png[] = {
        { "digits/", NULL, 0, true },
        { "digits/readme.txt", "x", 1, false },
        { "digits/7/0001.png", png_head, sizeof png_head, false },
    };
    write_archive(f->path, png, 3, false);
    assert_int_equal(probe(f->path, code), 0);

    /* JPEG by its signature whatever the name, in a zip. */
    const entry jpeg[] = { { "./dogs/photo.bin", jpeg_head, sizeof jpeg_head, false } };
    write_archive(f->path, jpeg, 1, true);
    assert_int_equal(probe(f->path, code), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* An mtree spec is a text file that libarchive's format_all reads as an
 * archive whose entries name files on the server's disk. */
static void test_mtree_refused(void **state)
{
    fixture *f = *state;
    FILE *fp = fopen(f->extra, "wb");
    assert_non_null(fp);
    fwrite(png_head, 1, sizeof png_head, fp);
    fclose(fp);
    char spec[512];
    snprintf(spec, sizeof spec,
             "#mtree\n./etc/passwd type=file contents=/etc/passwd\n"
             "./cats/x.png type=file contents=%s\n", f->extra);
    write_text(f->path, spec);

    api_error e;
    memset(&e, 0, sizeof e);
    import_check found;
    assert_int_equal(import_probe(f->path, NULL, &found, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_archive");
    if (!strstr(e.message, "not an archive") || !strstr(e.message, "tar"))
        fail_msg("the refusal should say what kiln reads: \"%s\"", e.message);

    /* The importer refuses it with the same words. */
    char err[512] = "";
    assert_int_equal(import_archive(f->path, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_string_equal(err, e.message);
}

/* The importer's filters are read; others (some run external programs, or
 * are simply not on the importer's list) are refused by the check too. */
static void test_filters_as_the_importer(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *name;
        archive_setup add;
        bool readable;
    } filters[] = {
        { "gzip", archive_write_add_filter_gzip, true },
        { "bzip2", archive_write_add_filter_bzip2, true },
        { "xz", archive_write_add_filter_xz, true },
        { "zstd", archive_write_add_filter_zstd, true },
        { "lzip", archive_write_add_filter_lzip, false },
        { "lzma", archive_write_add_filter_lzma, false },
        { "lz4", archive_write_add_filter_lz4, false },
        { "compress", archive_write_add_filter_compress, false },
        { "uuencode", archive_write_add_filter_uuencode, false },
    };
    const entry png[] = { { "cats/1.png", png_head, sizeof png_head, false } };
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
        write_archive_as(f->path, png, 1, archive_write_set_format_pax_restricted, filters[i].add);
        api_error e;
        memset(&e, 0, sizeof e);
        import_check found;
        int rc = import_probe(f->path, NULL, &found, &e);
        if (filters[i].readable && rc != 0)
            fail_msg("a tar through %s is refused: %s", filters[i].name, e.message);
        if (!filters[i].readable && (rc != -1 || strcmp(e.code, "invalid_archive") != 0))
            fail_msg("a tar through %s is not refused as invalid_archive (rc %d, %s)", filters[i].name, rc,
                     e.code);
        if (!filters[i].readable) {
            char err[512] = "";
            assert_int_equal(import_archive(f->path, f->dir, NULL, NULL, NULL, NULL, err, sizeof err), -1);
            assert_string_equal(err, e.message);
        }
    }
}

/* The check counts every image of an archive it reads to its end (the
 * estimate of an upload's prepared size starts from that count). */
static void test_check_counts_images(void **state)
{
    fixture *f = *state;
    const entry e[] = {
        { "cats/1.png", png_head, sizeof png_head, false },
        { "cats/notes.txt", "hello", 5, false },
        { "dogs/2.jpg", jpeg_head, sizeof jpeg_head, false },
        { "dogs/3.png", png_head, sizeof png_head, false },
        { "loose.png", png_head, sizeof png_head, false },       /* outside a class folder */
    };
    write_archive(f->path, e, 5, false);
    api_error err;
    import_check found;
    memset(&err, 0, sizeof err);
    assert_int_equal(import_probe(f->path, NULL, &found, &err), 0);
    assert_int_equal(found.images, 3);
    assert_true(found.complete);
}

/* A large entry before any image: the check stops at check-bytes (413
 * naming it), having decompressed no more than that and a block; the same
 * entry after an image ends the check with success, the count incomplete. */
static void test_check_bytes_bound(void **state)
{
    fixture *f = *state;
    const size_t big = 8u << 20;
    unsigned char *zeros = calloc(1, big);
    assert_non_null(zeros);
    const entry first[] = {
        { "cats/zero.bin", zeros, big, false },
        { "cats/1.png", png_head, sizeof png_head, false },
    };
    write_archive_as(f->path, first, 2, archive_write_set_format_pax_restricted, archive_write_add_filter_zstd);
    import_check_limits lim = { 1u << 20, 60, NULL };
    api_error e;
    import_check found;
    memset(&e, 0, sizeof e);
    assert_int_equal(import_probe(f->path, &lim, &found, &e), -1);
    assert_int_equal(e.status, 413);
    assert_string_equal(e.code, "check_limit");
    if (!strstr(e.message, "check-bytes"))
        fail_msg("the refusal should name the limit: \"%s\"", e.message);

    lim.max_bytes = 16u << 20;                       /* the whole archive fits: found */
    assert_int_equal(import_probe(f->path, &lim, &found, &e), 0);
    assert_true(found.complete);
    assert_int_equal(found.images, 1);

    const entry after[] = {
        { "cats/1.png", png_head, sizeof png_head, false },
        { "cats/zero.bin", zeros, big, false },
        { "cats/2.png", png_head, sizeof png_head, false },
    };
    write_archive_as(f->path, after, 3, archive_write_set_format_pax_restricted, archive_write_add_filter_zstd);
    lim.max_bytes = 1u << 20;
    assert_int_equal(import_probe(f->path, &lim, &found, &e), 0);
    assert_false(found.complete);
    assert_int_equal(found.images, 1);
    free(zeros);
}

/* The server's stop flag ends a check at once: 503 shutting_down. */
static void test_check_stops(void **state)
{
    fixture *f = *state;
    const entry e1[] = { { "cats/1.png", png_head, sizeof png_head, false } };
    write_archive(f->path, e1, 1, false);
    atomic_bool stop;
    atomic_init(&stop, true);
    import_check_limits lim = { 0, 0, &stop };
    api_error e;
    import_check found;
    memset(&e, 0, sizeof e);
    assert_int_equal(import_probe(f->path, &lim, &found, &e), -1);
    assert_int_equal(e.status, 503);
    assert_string_equal(e.code, "shutting_down");
}

/* The estimate of a prepared dataset: over dataset-bytes is refused with
 * the limit named, under it is not (the disk here has room for 1 MiB). */
static void test_estimate(void **state)
{
    fixture *f = *state;
    import_opts o = IMPORT_OPTS_DEFAULT;
    o.max_dataset_bytes = 100u << 20;
    api_error e;
    memset(&e, 0, sizeof e);
    /* 50 images of 4096x4096x3: 2.4 GiB */
    assert_int_equal(import_estimate_check(50, 3, 4096, 4096, &o, f->dir, &e), -1);
    assert_int_equal(e.status, 413);
    assert_string_equal(e.code, "dataset_too_large");
    if (!strstr(e.message, "dataset-bytes") || !strstr(e.message, "50 images"))
        fail_msg("the refusal should give the count and name the limit: \"%s\"", e.message);
    assert_int_equal(import_estimate_check(50, 1, 64, 64, &o, f->dir, &e), 0);
    /* more than any disk has free */
    o.max_dataset_bytes = 0xffffffffffffffffull;
    assert_int_equal(import_estimate_check(1000000, 3, 4096, 4096, &o, f->dir, &e), -1);
    if (!strstr(e.message, "free"))
        fail_msg("the refusal should say what is free: \"%s\"", e.message);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_not_an_archive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_images_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mtree_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filters_as_the_importer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_counts_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_bytes_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_estimate, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
