/* tests/unit/test_dataset.c: the .kds split format, header.json and the loader.
 *
 * Round trips with odd shapes, damaged files refused, and the loader's
 * contract: every image once per epoch, order a function of (seed, epoch),
 * values (pixel - mean[c]) * scale in NCHW, a short last batch, restarts in the
 * middle of an epoch with batches already prefetched. */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <limits.h>

#include "data_util.h"
#include "engine/dataset.h"

typedef struct fixture {
    char dir[PATH_MAX];
    char path[PATH_MAX + 32];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f || !du_mkdtemp(f->dir, sizeof f->dir)) return -1;
    snprintf(f->path, sizeof f->path, "%s/train.kds", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    du_rm_rf(f->dir);
    free(f);
    return 0;
}

/* Image i: byte p is (i * 7 + p * 3) mod 251, label i mod nclasses. */
static uint8_t pixel(size_t i, size_t p) { return (uint8_t)((i * 7 + p * 3) % 251); }

static void write_split(const char *path, int c, int h, int w, size_t n, int nclasses) {
    char err[256] = "";
    size_t sz = (size_t)c * (size_t)h * (size_t)w;
    uint8_t *img = malloc(sz);
    assert_non_null(img);
    ds_writer *wr = ds_writer_open(path, c, h, w, err, sizeof err);
    assert_non_null(wr);
    for (size_t i = 0; i < n; i++) {
        for (size_t p = 0; p < sz; p++) img[p] = pixel(i, p);
        assert_int_equal(ds_writer_add(wr, img, (int)(i % (size_t)nclasses), err, sizeof err), 0);
    }
    assert_int_equal(ds_writer_commit(wr, err, sizeof err), 0);
    free(img);
}

static void check_split(const char *path, int c, int h, int w, size_t n, int nclasses) {
    char err[256] = "";
    ds_split *s = ds_split_open(path, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(ds_split_count(s), n);
    int sc, sh, sw;
    ds_split_shape(s, &sc, &sh, &sw);
    assert_int_equal(sc, c);
    assert_int_equal(sh, h);
    assert_int_equal(sw, w);
    size_t sz = (size_t)c * (size_t)h * (size_t)w;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ds_split_label(s, i), (int)(i % (size_t)nclasses));
        const uint8_t *img = ds_split_image(s, i);
        for (size_t p = 0; p < sz; p++) assert_int_equal(img[p], pixel(i, p));
    }
    ds_split_close(s);
}

static void test_round_trip(void **state) {
    fixture *f = *state;
    static const struct { int c, h, w; size_t n; int classes; } cases[] = {
        { 3, 5, 7, 37, 5 },       /* labels end mid-block: padding to 64 */
        { 1, 1, 1, 1000, 300 },
        { 1, 28, 28, 20, 10 },
        { 4, 3, 2, 20, 2 },       /* 24 + 40 = 64: no padding needed */
        { 2, 65535, 1, 2, 65535 - 1 },
        { 1, 3, 3, 0, 1 },        /* an empty split is valid */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_split(f->path, cases[k].c, cases[k].h, cases[k].w, cases[k].n, cases[k].classes);
        check_split(f->path, cases[k].c, cases[k].h, cases[k].w, cases[k].n, cases[k].classes);
        /* the size on disk follows the format: header, labels padded to 64, images */
        size_t len = 0;
        free(du_read_file(f->path, &len));
        size_t labels_end = 24 + 2 * cases[k].n;
        size_t images_at = (labels_end + 63) / 64 * 64;
        assert_int_equal(len, images_at + cases[k].n * (size_t)cases[k].c * (size_t)cases[k].h *
                                              (size_t)cases[k].w);
    }
    /* no temporary file is left behind */
    assert_int_equal(du_count_suffix(f->dir, ".tmp"), 0);
    /* the header bytes as documented in engine/dataset.h */
    write_split(f->path, 3, 5, 7, 37, 5);
    size_t len = 0;
    uint8_t *b = (uint8_t *)du_read_file(f->path, &len);
    assert_non_null(b);
    assert_memory_equal(b, "KILNDS\0\1", 8);
    assert_int_equal(b[8] | b[9] << 8 | b[10] << 16 | b[11] << 24, 37);
    assert_int_equal(b[12] | b[13] << 8, 3);
    assert_int_equal(b[14] | b[15] << 8, 5);
    assert_int_equal(b[16] | b[17] << 8, 7);
    assert_int_equal(b[24 + 2 * 6] | b[25 + 2 * 6] << 8, 6 % 5);   /* label of image 6 */
    assert_int_equal(b[128 + 105 * 2 + 4], pixel(2, 4));            /* image 2, byte 4 */
    free(b);
}

static void expect_refused(const char *path, const char *what) {
    char err[256] = "";
    ds_split *s = ds_split_open(path, err, sizeof err);
    assert_null(s);
    if (!strstr(err, what)) fail_msg("error \"%s\" does not mention \"%s\"", err, what);
}

static void test_damaged_files(void **state) {
    fixture *f = *state;
    write_split(f->path, 1, 4, 4, 10, 3);
    size_t len = 0;
    uint8_t *good = (uint8_t *)du_read_file(f->path, &len);
    assert_non_null(good);
    char bad[PATH_MAX + 32];
    snprintf(bad, sizeof bad, "%s/bad.kds", f->dir);

    assert_int_equal(du_write_file(bad, good, len - 1), 0);       /* one byte short */
    expect_refused(bad, "truncated");
    uint8_t *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, good, len);
    longer[len] = 0;
    assert_int_equal(du_write_file(bad, longer, len + 1), 0);     /* one byte too many */
    expect_refused(bad, "truncated");
    free(longer);
    assert_int_equal(du_write_file(bad, good, 10), 0);            /* shorter than the header */
    expect_refused(bad, "truncated");

    good[0] = 'X';                                                /* bad magic */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "magic");
    good[0] = 'K';
    good[7] = 2;                                                  /* a future version */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "version");
    good[7] = 1;
    good[8] = 11;                                                 /* count disagrees with the size */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "truncated");
    good[8] = 10;
    good[12] = 0;                                                 /* zero channels */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "shape");
    good[12] = 1;
    assert_int_equal(du_write_file(bad, good, len), 0);           /* restored: accepted */
    char err[256];
    ds_split *s = ds_split_open(bad, err, sizeof err);
    assert_non_null(s);
    ds_split_close(s);
    free(good);

    snprintf(bad, sizeof bad, "%s/missing.kds", f->dir);
    expect_refused(bad, "missing.kds");
    ds_split_close(NULL);
}

static void test_writer_abort_and_bad_input(void **state) {
    fixture *f = *state;
    char err[256] = "";
    ds_writer *wr = ds_writer_open(f->path, 1, 2, 2, err, sizeof err);
    assert_non_null(wr);
    uint8_t img[4] = { 1, 2, 3, 4 };
    assert_int_equal(ds_writer_add(wr, img, 0, err, sizeof err), 0);
    assert_int_equal(ds_writer_add(wr, img, 65536, err, sizeof err), -1);
    assert_int_equal(ds_writer_add(wr, img, -1, err, sizeof err), -1);
    ds_writer_abort(wr);
    assert_int_equal(access(f->path, F_OK), -1);
    assert_int_equal(du_count_suffix(f->dir, ".tmp"), 0);
    assert_null(ds_writer_open(f->path, 0, 2, 2, err, sizeof err));
    assert_null(ds_writer_open(f->path, 5, 2, 2, err, sizeof err));
    assert_null(ds_writer_open(f->path, 1, 0, 2, err, sizeof err));
    char nodir[PATH_MAX + 64];
    snprintf(nodir, sizeof nodir, "%s/no/such/x.kds", f->dir);
    assert_null(ds_writer_open(nodir, 1, 2, 2, err, sizeof err));
}

static void test_info_round_trip(void **state) {
    fixture *f = *state;
    char err[256] = "";
    char *names[3] = { "cat", "dog", "\"quoted\" \xc3\xa9" };
    ds_info in;
    memset(&in, 0, sizeof in);
    in.c = 3;
    in.h = 32;
    in.w = 48;
    in.nclasses = 3;
    in.classes = names;
    in.train_count = 1234;
    in.val_count = 56;
    in.mean[0] = 125.3125f;
    in.mean[1] = 0.5f;
    in.mean[2] = 254.0f;
    snprintf(in.resize, sizeof in.resize, "squash");
    assert_int_equal(ds_info_save(f->dir, &in, "archive x.tar.gz", err, sizeof err), 0);
    ds_info out;
    assert_int_equal(ds_info_load(f->dir, &out, err, sizeof err), 0);
    assert_int_equal(out.c, 3);
    assert_int_equal(out.h, 32);
    assert_int_equal(out.w, 48);
    assert_int_equal(out.nclasses, 3);
    for (int i = 0; i < 3; i++) assert_string_equal(out.classes[i], names[i]);
    assert_int_equal(out.train_count, 1234);
    assert_int_equal(out.val_count, 56);
    for (int i = 0; i < 3; i++) assert_float_equal(out.mean[i], in.mean[i], 1e-4);
    assert_string_equal(out.resize, "squash");
    ds_info_free(&out);
    assert_int_equal(du_count_suffix(f->dir, ".tmp"), 0);

    /* bad headers are refused with a reason */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/header.json", f->dir);
    static const char *bad[] = {
        "not json",
        "{\"format\": 2, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1, 2]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":-1,\"val\":0}, \"mean\": [1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(du_write_file(path, bad[i], strlen(bad[i])), 0);
        err[0] = '\0';
        assert_int_equal(ds_info_load(f->dir, &out, err, sizeof err), -1);
        assert_true(err[0] != '\0');
        assert_null(out.classes);
    }
}

/* ---- the loader ------------------------------------------------------------- */

enum { NIMG = 37, C = 2, H = 3, W = 2, BATCH = 8 };
static const float MEAN[C] = { 10.0f, 100.5f };
static const float SCALE = 0.5f;

/* Runs one epoch; order[k] gets the index of the k-th image, recovered from
 * its first value and checked against every other value and the label. */
static void run_epoch(loader *l, const ds_split *s, size_t *order, bool check_values) {
    float x[BATCH * C * H * W];
    int32_t labels[BATCH];
    size_t k = 0;
    size_t nb = loader_batches(l);
    for (size_t b = 0; b < nb; b++) {
        int n = loader_next(l, x, labels);
        assert_int_equal(n, b + 1 < nb ? BATCH : NIMG - BATCH * (nb - 1));
        for (int i = 0; i < n; i++) {
            /* the image index: pixel(i, 0) = 7 i mod 251, unique for i < 251 */
            float v0 = x[i * C * H * W] / SCALE + MEAN[0];
            int p0 = (int)(v0 + 0.5f);
            size_t idx = SIZE_MAX;
            for (size_t j = 0; j < NIMG; j++)
                if (pixel(j, 0) == p0) idx = j;
            assert_true(idx != SIZE_MAX);
            order[k++] = idx;
            if (!check_values) continue;
            assert_int_equal(labels[i], ds_split_label(s, idx));
            const uint8_t *img = ds_split_image(s, idx);
            for (int ch = 0; ch < C; ch++)
                for (int p = 0; p < H * W; p++) {
                    float want = ((float)img[ch * H * W + p] - MEAN[ch]) * SCALE;
                    assert_true(x[(i * C + ch) * H * W + p] == want);
                }
        }
    }
    assert_int_equal(k, NIMG);
    assert_int_equal(loader_next(l, x, labels), 0);     /* end of the epoch, and stays there */
    assert_int_equal(loader_next(l, x, labels), 0);
}

static void assert_permutation(const size_t *order) {
    int seen[NIMG] = { 0 };
    for (size_t i = 0; i < NIMG; i++) {
        assert_true(order[i] < NIMG);
        seen[order[i]]++;
    }
    for (size_t i = 0; i < NIMG; i++) assert_int_equal(seen[i], 1);
}

static void test_loader(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, C, H, W, NIMG, 5);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);

    loader *a = loader_open(s, BATCH, true, 42, MEAN, SCALE, err, sizeof err);
    loader *b = loader_open(s, BATCH, true, 42, MEAN, SCALE, err, sizeof err);
    loader *other = loader_open(s, BATCH, true, 43, MEAN, SCALE, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(other);
    assert_int_equal(loader_batches(a), 5);

    size_t a0[NIMG], b0[NIMG], a1[NIMG], b1[NIMG], o0[NIMG], again[NIMG];
    loader_start_epoch(a, 0);
    run_epoch(a, s, a0, true);
    assert_permutation(a0);
    run_epoch(b, s, b0, true);                 /* without start_epoch: epoch 0 */
    assert_memory_equal(a0, b0, sizeof a0);    /* same seed, same order */
    run_epoch(other, s, o0, false);
    assert_permutation(o0);
    assert_memory_not_equal(a0, o0, sizeof a0);

    loader_start_epoch(a, 1);
    run_epoch(a, s, a1, true);
    assert_permutation(a1);
    assert_memory_not_equal(a0, a1, sizeof a0); /* a new epoch, a new order */

    /* b restarts epoch 1 after reading part of it (batches prefetched) */
    loader_start_epoch(b, 1);
    float x[BATCH * C * H * W];
    int32_t labels[BATCH];
    assert_int_equal(loader_next(b, x, labels), BATCH);
    assert_int_equal(loader_next(b, x, labels), BATCH);
    loader_start_epoch(b, 1);
    run_epoch(b, s, b1, true);
    assert_memory_equal(a1, b1, sizeof a1);

    /* going back to epoch 0 repeats it */
    loader_start_epoch(a, 0);
    run_epoch(a, s, again, false);
    assert_memory_equal(a0, again, sizeof a0);

    loader_close(a);
    loader_close(b);
    loader_close(other);

    /* no shuffle: the file's order, every epoch */
    loader *seq = loader_open(s, BATCH, false, 42, MEAN, SCALE, err, sizeof err);
    assert_non_null(seq);
    for (int e = 0; e < 3; e++) {
        loader_start_epoch(seq, e);
        run_epoch(seq, s, again, true);
        for (size_t i = 0; i < NIMG; i++) assert_int_equal(again[i], i);
    }
    loader_close(seq);

    /* no mean: plain scaling */
    loader *nm = loader_open(s, NIMG + 5, false, 1, NULL, 1.0f, err, sizeof err);
    assert_non_null(nm);
    assert_int_equal(loader_batches(nm), 1);
    float *xa = malloc(sizeof(float) * (NIMG + 5) * C * H * W);
    int32_t la[NIMG + 5];
    assert_non_null(xa);
    assert_int_equal(loader_next(nm, xa, la), NIMG);
    for (size_t i = 0; i < NIMG; i++)
        for (size_t p = 0; p < C * H * W; p++) assert_true(xa[i * C * H * W + p] == (float)pixel(i, p));
    assert_int_equal(loader_next(nm, xa, la), 0);
    free(xa);
    loader_close(nm);

    assert_null(loader_open(s, 0, true, 1, MEAN, SCALE, err, sizeof err));
    loader_close(NULL);
    ds_split_close(s);
}

/* Many epochs, restarts at every point, and closing with batches in flight:
 * the thread hand-over must neither lose, repeat nor deadlock. */
static void test_loader_stress(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, C, H, W, NIMG, 5);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader *ref = loader_open(s, 3, true, 7, MEAN, SCALE, err, sizeof err);
    loader *l = loader_open(s, 3, true, 7, MEAN, SCALE, err, sizeof err);
    assert_non_null(ref);
    assert_non_null(l);
    float x[3 * C * H * W], y[3 * C * H * W];
    int32_t lx[3], ly[3];
    for (int e = 0; e < 40; e++) {
        int stop_after = e % 15;           /* read a few batches, then restart */
        loader_start_epoch(l, e);
        for (int k = 0; k < stop_after; k++) loader_next(l, x, lx);
        loader_start_epoch(l, e);
        loader_start_epoch(ref, e);
        int n;
        while ((n = loader_next(ref, x, lx)) > 0) {
            assert_int_equal(loader_next(l, y, ly), n);
            assert_memory_equal(x, y, sizeof(float) * (size_t)n * C * H * W);
            assert_memory_equal(lx, ly, sizeof(int32_t) * (size_t)n);
        }
        assert_int_equal(loader_next(l, y, ly), 0);
    }
    loader_close(ref);
    loader_close(l);
    for (int i = 0; i < 50; i++) {         /* open and close at once, or after one batch */
        loader *q = loader_open(s, 2, true, (uint64_t)i, MEAN, SCALE, err, sizeof err);
        assert_non_null(q);
        if (i % 2) assert_int_equal(loader_next(q, x, lx), 2);
        loader_close(q);
    }
    ds_split_close(s);
}

static void test_loader_empty(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, 1, 2, 2, 0, 1);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader *l = loader_open(s, 4, true, 1, NULL, 1.0f, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(loader_batches(l), 0);
    float x[16];
    int32_t lb[4];
    assert_int_equal(loader_next(l, x, lb), 0);
    loader_start_epoch(l, 3);
    assert_int_equal(loader_next(l, x, lb), 0);
    loader_close(l);
    ds_split_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_abort_and_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loader_stress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loader_empty, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
