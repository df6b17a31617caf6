/* safetensors (engine/safetensors.h): round trips, the exact bytes on disk,
 * atomic replacement, and hostile or truncated files refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"

static char dir[64];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-st-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_roundtrip(void **state)
{
    char path[128], tmp[140], err[256] = "";
    float a[6] = { 1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f };
    int64_t step[1] = { 123456789012LL };
    uint8_t bytes[5] = { 1, 2, 3, 250, 255 };
    float scalar = 42.0f;
    st_tensor t[] = {
        { .name = "conv1.weight", .dtype = ST_F32, .ndim = 2, .shape = { 2, 3 }, .data = a,
          .bytes = sizeof a },
        { .name = "odd", .dtype = ST_U8, .ndim = 1, .shape = { 5 }, .data = bytes,
          .bytes = sizeof bytes },
        { .name = "state.step", .dtype = ST_I64, .ndim = 1, .shape = { 1 }, .data = step,
          .bytes = sizeof step },
        { .name = "scale", .dtype = ST_F32, .ndim = 0, .data = &scalar, .bytes = 4 },
        { .name = "empty", .dtype = ST_F32, .ndim = 2, .shape = { 0, 4 }, .data = NULL,
          .bytes = 0 },
    };
    const char *meta[] = { "kiln_format", "1", "note", "quotes \" and \\ survive", NULL };
    path_of(path, sizeof path, "rt.safetensors");
    assert_int_equal(st_write(path, t, 5, meta, err, sizeof err), 0);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(exists(tmp));

    st_file *f = st_open(path, err, sizeof err);
    if (!f) {
        print_error("%s\n", err);
        fail();
    }
    assert_int_equal(st_count(f), 5);
    /* In file order (by offset), which is the order written. */
    for (int i = 0; i < 5; i++) {
        const st_tensor *g = st_get(f, i);
        assert_string_equal(g->name, t[i].name);
        assert_int_equal(g->dtype, t[i].dtype);
        assert_int_equal(g->ndim, t[i].ndim);
        for (int d = 0; d < g->ndim; d++)
            assert_int_equal(g->shape[d], t[i].shape[d]);
        assert_int_equal(g->bytes, t[i].bytes);
        if (g->bytes)
            assert_memory_equal(g->data, t[i].data, g->bytes);
    }
    assert_ptr_equal(st_find(f, "odd"), st_get(f, 1));
    assert_null(st_find(f, "missing"));
    assert_null(st_get(f, 5));
    assert_string_equal(st_meta(f, "kiln_format"), "1");
    assert_string_equal(st_meta(f, "note"), "quotes \" and \\ survive");
    assert_null(st_meta(f, "nope"));
    st_close(f);
    st_close(NULL);
}

/* The bytes on disk, as the format defines them. */
static void test_format_bytes(void **state)
{
    char path[128], err[256] = "";
    float v[2] = { 1.0f, -2.0f };
    st_tensor t = { .name = "a", .dtype = ST_F32, .ndim = 1, .shape = { 2 }, .data = v,
                    .bytes = 8 };
    path_of(path, sizeof path, "fmt.safetensors");
    assert_int_equal(st_write(path, &t, 1, NULL, err, sizeof err), 0);
    size_t size;
    unsigned char *b = slurp(path, &size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)b[i] << (8 * i);
    assert_int_equal(n % 8, 0);                 /* header padded so data is 8-aligned */
    assert_int_equal(size, 8 + n + 8);
    assert_int_equal(b[8], '{');
    /* the header: compact JSON then spaces */
    char *h = (char *)b + 8;
    size_t json_len = strlen("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}");
    assert_memory_equal(h, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                        json_len);
    for (size_t i = json_len; i < n; i++)
        assert_int_equal(h[i], ' ');
    /* little-endian IEEE 754: 1.0f = 0x3f800000, -2.0f = 0xc0000000 */
    const unsigned char want[8] = { 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0 };
    assert_memory_equal(b + 8 + n, want, 8);
    free(b);
}

/* Writing over an existing file replaces it whole. */
static void test_atomic_replace(void **state)
{
    char path[128], err[256] = "";
    float big[1000] = { 0 }, small[1] = { 5.0f };
    st_tensor t1 = { .name = "w", .dtype = ST_F32, .ndim = 1, .shape = { 1000 }, .data = big,
                     .bytes = sizeof big };
    st_tensor t2 = { .name = "w", .dtype = ST_F32, .ndim = 1, .shape = { 1 }, .data = small,
                     .bytes = sizeof small };
    path_of(path, sizeof path, "replace.safetensors");
    assert_int_equal(st_write(path, &t1, 1, NULL, err, sizeof err), 0);
    assert_int_equal(st_write(path, &t2, 1, NULL, err, sizeof err), 0);
    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    assert_int_equal(st_get(f, 0)->shape[0], 1);
    assert_true(*(const float *)st_get(f, 0)->data == 5.0f);
    st_close(f);

    /* A directory that does not exist: an error, and nothing left behind. */
    assert_int_equal(st_write("/tmp/kiln-no-such-dir/x.safetensors", &t2, 1, NULL, err,
                              sizeof err), -1);
    assert_non_null(strstr(err, "cannot create"));
}

static void test_write_errors(void **state)
{
    char path[128], err[256] = "";
    float v[2] = { 0 };
    st_tensor t[2] = {
        { .name = "x", .dtype = ST_F32, .ndim = 1, .shape = { 2 }, .data = v, .bytes = 8 },
        { .name = "x", .dtype = ST_F32, .ndim = 1, .shape = { 2 }, .data = v, .bytes = 8 },
    };
    path_of(path, sizeof path, "bad.safetensors");
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), -1);
    assert_string_equal(err, "safetensors: two tensors are named \"x\"");
    t[1].name = "y";
    t[1].bytes = 4;                         /* does not match the shape */
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), -1);
    assert_string_equal(err, "safetensors: tensor \"y\": shape and size do not agree");
    assert_false(exists(path));
}

/* Writes a hand-made file: the length prefix (declared_len, or the header's
 * own length when 0), the header text, then data_len bytes of data. */
static void write_raw(const char *path, const char *header, uint64_t declared_len,
                      const void *data, size_t data_len)
{
    size_t hl = strlen(header);
    if (declared_len == 0)
        declared_len = hl;
    unsigned char *b = malloc(8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(declared_len >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data_len)
        memcpy(b + 8 + hl, data, data_len);
    spit(path, b, 8 + hl + data_len);
    free(b);
}

static void refuse_raw(const char *header, uint64_t declared, size_t data_len, const char *part)
{
    char path[128], err[256] = "";
    unsigned char data[64] = { 0 };
    path_of(path, sizeof path, "raw.safetensors");
    write_raw(path, header, declared, data, data_len);
    st_file *f = st_open(path, err, sizeof err);
    if (f || !strstr(err, part)) {
        print_error("header %s: %s (wanted \"%s\")\n", header, f ? "accepted" : err, part);
        st_close(f);
        fail();
    }
}

static void test_read_errors(void **state)
{
    char err[256] = "";
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t okl = strlen(ok);
    /* the well-formed one first, to show the others fail for their own reason */
    {
        char path[128];
        unsigned char data[8] = { 0 };
        path_of(path, sizeof path, "raw.safetensors");
        write_raw(path, ok, okl, data, 8);
        st_file *f = st_open(path, err, sizeof err);
        assert_non_null(f);
        st_close(f);
    }
    refuse_raw(ok, okl, 4, "outside the 4 data bytes");                 /* truncated data */
    refuse_raw(ok, okl + 100, 8, "header length");                       /* length past EOF */
    refuse_raw(ok, (uint64_t)1 << 40, 8, "header length");              /* absurd length */
    refuse_raw(ok, okl, 12, "4 data bytes after the last tensor");       /* trailing bytes */
    refuse_raw("{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8,
               "unknown dtype \"F17\"");
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8,
               "its shape needs 12 bytes but its offsets hold 8");
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8,
               "starts at data byte 4, expected 0");                      /* a gap */
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8,
               "gap or overlap");                                         /* overlap */
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8,
               "bad shape");
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8,
               "needs dtype, shape and data_offsets");
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 0, 8,
               "trailing bytes after the safetensors header");
    refuse_raw("[1,2]", 0, 0, "not a JSON object");
    refuse_raw("{\"__metadata__\":{\"k\":1}}", 0, 0, "__metadata__ must map names to strings");
    refuse_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8,
               "appears twice");
    {
        char path[128];
        path_of(path, sizeof path, "short.safetensors");
        spit(path, "abc", 3);
        assert_null(st_open(path, err, sizeof err));
        assert_non_null(strstr(err, "not a safetensors file"));
        path_of(path, sizeof path, "missing.safetensors");
        assert_null(st_open(path, err, sizeof err));
        assert_non_null(strstr(err, "cannot open"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_read_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
