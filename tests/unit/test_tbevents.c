/* tests/unit/test_tbevents.c: TensorBoard event files read back byte by byte:
 * record framing and both masked CRCs, the wire bytes of an event, and a decode
 * of every record with the protobuf-c code generated from our .proto. */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <limits.h>
#include <unistd.h>

#include "data_util.h"
#include "jobs/tbevents.h"
#include "tensorboard.pb-c.h"   /* Tensorflow__Event */

typedef struct record {
    const uint8_t *data;
    size_t len;
} record;

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Splits a file into records, checking both CRCs of each; returns the count. */
static size_t parse_records(const uint8_t *buf, size_t n, record *out, size_t max) {
    size_t off = 0, k = 0;
    while (off < n) {
        assert_true(n - off >= 12);
        uint64_t len = get_le64(buf + off);
        assert_int_equal(get_le32(buf + off + 8), tb_masked_crc(crc32c(0, buf + off, 8)));
        assert_true(len <= n - off - 16);
        const uint8_t *data = buf + off + 12;
        assert_int_equal(get_le32(data + len), tb_masked_crc(crc32c(0, data, (size_t)len)));
        assert_true(k < max);
        out[k].data = data;
        out[k].len = (size_t)len;
        k++;
        off += 12 + (size_t)len + 4;
    }
    assert_int_equal(off, n);
    return k;
}

static void test_write_and_read_back(void **state) {
    (void)state;
    char dir[PATH_MAX], err[256] = "";
    assert_non_null(du_mkdtemp(dir, sizeof dir));
    tb_writer *w = tb_open(dir, 1700000000.75, err, sizeof err);
    assert_non_null(w);

    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    char expect[PATH_MAX + 300];
    snprintf(expect, sizeof expect, "%s/events.out.tfevents.1700000000.%s", dir, host);
    assert_string_equal(tb_path(w), expect);

    static const struct { const char *tag; int64_t step; float value; } ev[] = {
        { "train/loss", 1, 2.302585f },
        { "train/accuracy", 1, 0.125f },
        { "lr", 1, 0.01f },
        { "val/accuracy", 125, 0.0f },   /* a zero must still be written */
        { "val/loss", 125, -1.5f },
        { "train/loss", 5000000000LL, 1e-7f },
    };
    const size_t nev = sizeof ev / sizeof ev[0];
    for (size_t i = 0; i < nev; i++)
        assert_int_equal(tb_scalar(w, ev[i].tag, ev[i].step, ev[i].value, 1700000001.0 + (double)i,
                                   err, sizeof err), 0);

    /* each record is on disk before tb_close */
    size_t n = 0;
    uint8_t *buf = (uint8_t *)du_read_file(tb_path(w), &n);
    assert_non_null(buf);
    record recs[16];
    assert_int_equal(parse_records(buf, n, recs, 16), 1 + nev);
    free(buf);
    tb_close(w);

    buf = (uint8_t *)du_read_file(expect, &n);
    assert_non_null(buf);
    size_t nrec = parse_records(buf, n, recs, 16);
    assert_int_equal(nrec, 1 + nev);

    /* the first record: wall_time (field 1, double) and file_version (field 3) */
    static const char fv[] = "brain.Event:2";
    assert_int_equal(recs[0].len, 9 + 2 + strlen(fv));
    assert_int_equal(recs[0].data[0], 0x09);
    double wt;
    memcpy(&wt, recs[0].data + 1, 8);
    assert_true(wt == 1700000000.75);
    assert_int_equal(recs[0].data[9], 0x1A);
    assert_int_equal(recs[0].data[10], strlen(fv));
    assert_memory_equal(recs[0].data + 11, fv, strlen(fv));

    /* the wire bytes of the "lr" event, field numbers as TensorFlow's event.proto */
    const uint8_t *d = recs[3].data;
    assert_int_equal(recs[3].len, 9 + 2 + 2 + 2 + 2 + 2 + 5);
    assert_int_equal(d[0], 0x09);            /* wall_time, 64-bit */
    assert_int_equal(d[9], 0x10);            /* step, varint */
    assert_int_equal(d[10], 1);
    assert_int_equal(d[11], 0x2A);           /* summary, field 5, length-delimited */
    assert_int_equal(d[12], 11);
    assert_int_equal(d[13], 0x0A);           /* Summary.value, field 1 */
    assert_int_equal(d[14], 9);
    assert_int_equal(d[15], 0x0A);           /* Value.tag, field 1 */
    assert_int_equal(d[16], 2);
    assert_memory_equal(d + 17, "lr", 2);
    assert_int_equal(d[19], 0x15);           /* Value.simple_value, field 2, 32-bit */
    float f;
    memcpy(&f, d + 20, 4);
    assert_true(f == 0.01f);

    /* decode every record */
    Tensorflow__Event *e0 = tensorflow__event__unpack(NULL, recs[0].len, recs[0].data);
    assert_non_null(e0);
    assert_int_equal(e0->what_case, TENSORFLOW__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(e0->file_version, fv);
    tensorflow__event__free_unpacked(e0, NULL);
    for (size_t i = 0; i < nev; i++) {
        Tensorflow__Event *e = tensorflow__event__unpack(NULL, recs[i + 1].len, recs[i + 1].data);
        assert_non_null(e);
        assert_true(e->has_wall_time);
        assert_true(e->wall_time == 1700000001.0 + (double)i);
        assert_true(e->has_step);
        assert_int_equal(e->step, ev[i].step);
        assert_int_equal(e->what_case, TENSORFLOW__EVENT__WHAT_SUMMARY);
        assert_int_equal(e->summary->n_value, 1);
        const Tensorflow__Summary__Value *v = e->summary->value[0];
        assert_string_equal(v->tag, ev[i].tag);
        assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        assert_true(v->simple_value == ev[i].value);
        tensorflow__event__free_unpacked(e, NULL);
    }
    free(buf);
    du_rm_rf(dir);
}

static void test_open_errors(void **state) {
    (void)state;
    char dir[PATH_MAX], err[256] = "", missing[PATH_MAX + 16];
    assert_non_null(du_mkdtemp(dir, sizeof dir));
    snprintf(missing, sizeof missing, "%s/nope", dir);
    assert_null(tb_open(missing, 1.0, err, sizeof err));
    assert_non_null(strstr(err, "nope"));

    /* an existing file is never truncated or appended to */
    tb_writer *w = tb_open(dir, 42.0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(tb_scalar(w, "lr", 1, 0.5f, 43.0, err, sizeof err), 0);
    size_t before = 0, after = 0;
    free(du_read_file(tb_path(w), &before));
    err[0] = '\0';
    assert_null(tb_open(dir, 42.0, err, sizeof err));
    assert_true(err[0] != '\0');
    free(du_read_file(tb_path(w), &after));
    assert_int_equal(before, after);
    tb_close(w);
    tb_close(NULL);
    du_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_read_back),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
