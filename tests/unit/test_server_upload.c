/* tests/unit/test_server_upload.c: the upload's archive check (server/upload.c):
 * what is answered 400 at once (not an archive, no images) and what goes on to
 * the import. Archives are written here with libarchive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "server/upload.h"

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
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-upload-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/a", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Writes entries as a gzip'ed tar (zip when zip is true) at path. */
static void write_archive(const char *path, const entry *e, size_t n, bool zip)
{
    struct archive *a = archive_write_new();
    assert_non_null(a);
    if (zip) {
        assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
    } else {
        assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    }
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

static int probe(const char *path, char *code)
{
    char msg[600];
    code[0] = '\0';
    int rc = upload_probe_archive(path, code, 48, msg, sizeof msg);
    if (rc != 0)
        assert_true(strlen(msg) > 0);       /* every refusal says why */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_not_an_archive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_images_found, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
