/* tests/unit/test_dataset.c: the .kds split format, header.json and the loader.
 *
 * Round trips with odd shapes, damaged files refused, and the loader's
 * contract: every image once per epoch, order a function of (seed, epoch),
 * values (pixel - mean[c]) * scale in NCHW, a short last batch (or none with
 * drop_last), restarts in the middle of an epoch with batches already
 * prefetched, the same batches from 1 and 3 threads; augmentation (crops in
 * bounds, zero padding, exact mirrors, repeatable, the centre at
 * validation); encoded splits (format version 2: PNG exact, JPEG close, a
 * damaged file refused) beside version 1 files written by hand; the batches
 * of loader_next_view (no copy) equal to loader_next's and left alone while
 * held; a JPEG split's batches equal to those of its decoded pixels stored
 * raw; img_decode_into against img_decode_chw. */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <limits.h>

#include "data_util.h"
#include "engine/dataset.h"
#include "engine/image.h"

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
    good[7] = 3;                                                  /* a future version */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "version");
    good[7] = 2;                                                  /* encoded, but encoding 0 */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "encoding");
    good[7] = 1;
    good[18] = 1;                                                 /* raw, but encoding PNG */
    assert_int_equal(du_write_file(bad, good, len), 0);
    expect_refused(bad, "encoding");
    good[18] = 0;
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
    in.encoding = DS_ENC_JPEG;
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
    assert_int_equal(out.encoding, DS_ENC_JPEG);
    ds_info_free(&out);
    assert_int_equal(du_count_suffix(f->dir, ".tmp"), 0);
    cJSON *j = ds_info_to_json(&in);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "encoding")->valuestring, "jpeg");
    cJSON_Delete(j);

    /* a header from before encoded datasets has no "encoding": raw */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/header.json", f->dir);
    const char *old_header = "{\"format\": 1, \"classes\": [\"a\", \"b\"], \"shape\": [1,2,2], "
                             "\"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}";
    assert_int_equal(du_write_file(path, old_header, strlen(old_header)), 0);
    assert_int_equal(ds_info_load(f->dir, &out, err, sizeof err), 0);
    assert_int_equal(out.encoding, DS_ENC_RAW);
    ds_info_free(&out);
    int enc = -1;
    assert_int_equal(ds_encoding_parse("png", &enc), 0);
    assert_int_equal(enc, DS_ENC_PNG);
    assert_int_equal(ds_encoding_parse("gif", &enc), -1);
    assert_string_equal(ds_encoding_name(DS_ENC_RAW), "raw");
    assert_null(ds_encoding_name(DS_ENC_COUNT));

    /* bad headers are refused with a reason */
    static const char *bad[] = {
        "not json",
        "{\"format\": 2, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1, 2]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":-1,\"val\":0}, \"mean\": [1]}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1], "
        "\"encoding\": \"gif\"}",
        "{\"format\": 1, \"classes\": [\"a\"], \"shape\": [1,2,2], \"counts\": {\"train\":1,\"val\":0}, \"mean\": [1], "
        "\"encoding\": 1}",
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

/* A loader as the tests before augmentation opened one: training (shuffled)
 * or not, every image kept (no drop_last), no augmentation, the default
 * number of threads. */
static loader *open_ld(const ds_split *s, int batch, bool train, uint64_t seed, const float *mean,
                       float scale, char *err, size_t errlen) {
    loader_opts o = { .batch = batch, .train = train, .seed = seed, .mean = mean, .scale = scale };
    return loader_open(s, &o, err, errlen);
}

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

    loader *a = open_ld(s, BATCH, true, 42, MEAN, SCALE, err, sizeof err);
    loader *b = open_ld(s, BATCH, true, 42, MEAN, SCALE, err, sizeof err);
    loader *other = open_ld(s, BATCH, true, 43, MEAN, SCALE, err, sizeof err);
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
    loader *seq = open_ld(s, BATCH, false, 42, MEAN, SCALE, err, sizeof err);
    assert_non_null(seq);
    for (int e = 0; e < 3; e++) {
        loader_start_epoch(seq, e);
        run_epoch(seq, s, again, true);
        for (size_t i = 0; i < NIMG; i++) assert_int_equal(again[i], i);
    }
    loader_close(seq);

    /* no mean: plain scaling */
    loader *nm = open_ld(s, NIMG + 5, false, 1, NULL, 1.0f, err, sizeof err);
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

    assert_null(open_ld(s, 0, true, 1, MEAN, SCALE, err, sizeof err));
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
    loader *ref = open_ld(s, 3, true, 7, MEAN, SCALE, err, sizeof err);
    loader *l = open_ld(s, 3, true, 7, MEAN, SCALE, err, sizeof err);
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
        loader *q = open_ld(s, 2, true, (uint64_t)i, MEAN, SCALE, err, sizeof err);
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
    loader *l = open_ld(s, 4, true, 1, NULL, 1.0f, err, sizeof err);
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

/* ---- the last short batch ------------------------------------------------------ */

static void test_batch_counts(void **state) {
    (void)state;
    static const struct { size_t count; int batch; bool drop; size_t want; } cases[] = {
        { 37, 8, false, 5 }, { 37, 8, true, 4 },    /* 4 full batches, 5 images left out */
        { 32, 8, false, 4 }, { 32, 8, true, 4 },    /* a whole number of batches: the same */
        { 9, 8, true, 1 },   { 8, 8, true, 1 },
        { 5, 8, true, 1 },   { 5, 8, false, 1 },    /* smaller than a batch: one short batch */
        { 1, 64, true, 1 },  { 1, 1, true, 1 },
        { 0, 8, true, 0 },   { 0, 8, false, 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (loader_batch_count(cases[k].count, cases[k].batch, cases[k].drop) != cases[k].want)
            fail_msg("loader_batch_count(%zu, %d, %d) = %zu, want %zu", cases[k].count, cases[k].batch,
                     cases[k].drop, loader_batch_count(cases[k].count, cases[k].batch, cases[k].drop),
                     cases[k].want);
}

/* The index of the image whose first value (after the mean and scale) is v0. */
static size_t image_of(float v0) {
    int p0 = (int)(v0 / SCALE + MEAN[0] + 0.5f);
    for (size_t j = 0; j < 251; j++)
        if (pixel(j, 0) == p0) return j;
    fail_msg("no image starts with %d", p0);
    return SIZE_MAX;
}

static void test_drop_last(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, C, H, W, NIMG, 5);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader_opts o = { .batch = BATCH, .train = true, .drop_last = true, .seed = 42, .mean = MEAN,
                      .scale = SCALE };
    loader *l = loader_open(s, &o, err, sizeof err);
    loader *keep = open_ld(s, BATCH, true, 42, MEAN, SCALE, err, sizeof err);
    assert_non_null(l);
    assert_non_null(keep);
    assert_int_equal(loader_batches(l), NIMG / BATCH);
    assert_int_equal(loader_batches(keep), NIMG / BATCH + 1);
    float x[BATCH * C * H * W], y[BATCH * C * H * W];
    int32_t lx[BATCH], ly[BATCH];
    int left_out[3][NIMG];
    for (int e = 0; e < 3; e++) {
        loader_start_epoch(l, e);
        loader_start_epoch(keep, e);
        for (size_t i = 0; i < NIMG; i++) left_out[e][i] = 1;
        for (int b = 0; b < NIMG / BATCH; b++) {
            /* every batch full, and the same as the first batches of the epoch that keeps all */
            assert_int_equal(loader_next(l, x, lx), BATCH);
            assert_int_equal(loader_next(keep, y, ly), BATCH);
            assert_memory_equal(x, y, sizeof x);
            assert_memory_equal(lx, ly, sizeof lx);
            for (int i = 0; i < BATCH; i++) {
                size_t idx = image_of(x[i * C * H * W]);
                assert_int_equal(left_out[e][idx], 1);      /* no image twice */
                left_out[e][idx] = 0;
            }
        }
        assert_int_equal(loader_next(l, x, lx), 0);          /* no short batch */
        assert_int_equal(loader_next(keep, y, ly), NIMG % BATCH);
        int n = 0;
        for (size_t i = 0; i < NIMG; i++) n += left_out[e][i];
        assert_int_equal(n, NIMG % BATCH);
    }
    /* the images left out change from epoch to epoch */
    assert_memory_not_equal(left_out[0], left_out[1], sizeof left_out[0]);
    assert_memory_not_equal(left_out[1], left_out[2], sizeof left_out[0]);
    loader_close(l);
    loader_close(keep);

    /* a split smaller than a batch still trains: its one short batch */
    o.batch = 64;
    l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    assert_int_equal(loader_batches(l), 1);
    float *big = malloc(sizeof(float) * 64 * C * H * W);
    int32_t lb[64];
    assert_non_null(big);
    assert_int_equal(loader_next(l, big, lb), NIMG);
    assert_int_equal(loader_next(l, big, lb), 0);
    free(big);
    loader_close(l);
    ds_split_close(s);
}

/* ---- threads ---------------------------------------------------------------- */

static const float MEAN3[3] = { 20.0f, 120.0f, 250.0f };

/* Every batch of a few epochs of a and b agree byte for byte; b restarts
 * epoch 2 after 3 batches. */
static void same_batches(loader *a, loader *b, size_t floats_per_image, int batch) {
    float *x = malloc(sizeof(float) * floats_per_image * (size_t)batch);
    float *y = malloc(sizeof(float) * floats_per_image * (size_t)batch);
    int32_t *lx = malloc(sizeof(int32_t) * (size_t)batch), *ly = malloc(sizeof(int32_t) * (size_t)batch);
    assert_true(x && y && lx && ly);
    for (int e = 0; e < 4; e++) {
        loader_start_epoch(a, e);
        loader_start_epoch(b, e);
        if (e == 2) {
            for (int k = 0; k < 3; k++) assert_int_equal(loader_next(b, y, ly), batch);
            loader_start_epoch(b, e);
        }
        int n, batches = 0;
        while ((n = loader_next(a, x, lx)) > 0) {
            assert_int_equal(loader_next(b, y, ly), n);
            assert_memory_equal(x, y, sizeof(float) * floats_per_image * (size_t)n);
            assert_memory_equal(lx, ly, sizeof(int32_t) * (size_t)n);
            batches++;
        }
        assert_int_equal(n, 0);
        assert_int_equal(loader_next(b, y, ly), 0);
        assert_int_equal((size_t)batches, loader_batches(a));
    }
    free(x);
    free(y);
    free(lx);
    free(ly);
}

static void test_threads_same_batches(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, 3, 9, 7, 101, 7);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader_opts o = { .batch = 6, .train = true, .drop_last = true, .seed = 5, .mean = MEAN3, .scale = 0.25f,
                      .aug = { .crop_h = 6, .crop_w = 5, .pad = 2, .mirror = true }, .threads = 1 };
    loader *one = loader_open(s, &o, err, sizeof err);
    o.threads = 3;
    loader *three = loader_open(s, &o, err, sizeof err);
    assert_non_null(one);
    assert_non_null(three);
    assert_int_equal(loader_threads(one), 1);
    assert_int_equal(loader_threads(three), 3);
    same_batches(one, three, 3 * 6 * 5, 6);
    loader_close(one);
    loader_close(three);

    /* validation (file order, centre crops) and a batch of one image at a time */
    o.train = o.drop_last = false;
    o.batch = 1;
    o.threads = 1;
    one = loader_open(s, &o, err, sizeof err);
    o.threads = 3;
    three = loader_open(s, &o, err, sizeof err);
    same_batches(one, three, 3 * 6 * 5, 1);
    loader_close(one);
    loader_close(three);

    /* the default: what fits the machine, at most 4 */
    o.threads = 0;
    one = loader_open(s, &o, err, sizeof err);
    assert_non_null(one);
    assert_int_equal(loader_threads(one), loader_default_threads());
    assert_true(loader_default_threads() >= 1 && loader_default_threads() <= 4);
    loader_close(one);
    o.threads = LOADER_THREADS_MAX + 1;
    assert_null(loader_open(s, &o, err, sizeof err));
    ds_split_close(s);
}

/* ---- augmentation --------------------------------------------------------- */

enum { AC = 2, AH = 8, AW = 8, ANIMG = 240 };
static const float AMEAN[AC] = { 10.0f, 100.5f };
static const float ASCALE = 0.5f;

/* Image i of the augmentation tests: every byte of an image differs (1..250,
 * never 0, the padding), and its label is i. */
static uint8_t apixel(int i, int ch, int y, int x) {
    return (uint8_t)(1 + (ch * AH * AW + y * AW + x + 5 * i) % 250);
}

static void write_aug_split(const char *path) {
    char err[256] = "";
    ds_writer *wr = ds_writer_open(path, AC, AH, AW, err, sizeof err);
    assert_non_null(wr);
    uint8_t img[AC * AH * AW];
    for (int i = 0; i < ANIMG; i++) {
        for (int ch = 0; ch < AC; ch++)
            for (int y = 0; y < AH; y++)
                for (int x = 0; x < AW; x++) img[(ch * AH + y) * AW + x] = apixel(i, ch, y, x);
        assert_int_equal(ds_writer_add(wr, img, i, err, sizeof err), 0);
    }
    assert_int_equal(ds_writer_commit(wr, err, sizeof err), 0);
}

/* Whether out (AC x oh x ow) is image i's window at (y0, x0) of the image
 * padded with zeros, mirrored when flip, after the mean and scale. */
static bool is_window(const float *out, int i, int oh, int ow, int y0, int x0, bool flip) {
    for (int ch = 0; ch < AC; ch++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int sy = y0 + y, sx = x0 + (flip ? ow - 1 - x : x);
                int p = sy < 0 || sy >= AH || sx < 0 || sx >= AW ? 0 : apixel(i, ch, sy, sx);
                if (out[(ch * oh + y) * ow + x] != ((float)p - AMEAN[ch]) * ASCALE) return false;
            }
    return true;
}

/* Finds where out came from: the one (y0, x0, flip) with the window inside
 * the padded image that gives it exactly. Fails when none does. */
static void locate(const float *out, int i, int oh, int ow, int pad, int *y0, int *x0, bool *flip) {
    int found = 0;
    for (int fl = 0; fl < 2; fl++)
        for (int y = -pad; y <= AH + pad - oh; y++)
            for (int x = -pad; x <= AW + pad - ow; x++)
                if (is_window(out, i, oh, ow, y, x, fl)) {
                    *y0 = y;
                    *x0 = x;
                    *flip = fl;
                    found++;
                }
    if (found != 1) fail_msg("image %d: %d windows of the padded image match the output", i, found);
}

typedef struct aug_seen {
    int y_hist[AH + 2 * 8], x_hist[AW + 2 * 8];   /* by offset + pad */
    int flips, images;
} aug_seen;

/* Two epochs of a loader over the augmentation split: every image is a
 * window of its padded source, mirrored or not; where they were is counted. */
static void run_aug(loader *l, int oh, int ow, int pad, aug_seen *seen) {
    enum { B = 16 };
    float *x = malloc(sizeof(float) * B * AC * (size_t)oh * (size_t)ow);
    int32_t lb[B];
    assert_non_null(x);
    memset(seen, 0, sizeof *seen);
    for (int e = 0; e < 2; e++) {
        loader_start_epoch(l, e);
        int n;
        while ((n = loader_next(l, x, lb)) > 0)
            for (int k = 0; k < n; k++) {
                int y0 = 0, x0 = 0;
                bool flip = false;
                locate(x + (size_t)k * AC * oh * ow, lb[k], oh, ow, pad, &y0, &x0, &flip);
                seen->y_hist[y0 + pad]++;
                seen->x_hist[x0 + pad]++;
                seen->flips += flip;
                seen->images++;
            }
    }
    free(x);
}

static void test_augment_crops_and_mirrors(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_aug_split(f->path);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    aug_seen seen;

    /* CIFAR's: pad 4, a random crop back to the stored size, mirrored at random */
    loader_opts o = { .batch = 16, .train = true, .seed = 3, .mean = AMEAN, .scale = ASCALE,
                      .aug = { .pad = 3, .mirror = true }, .threads = 2 };
    loader *l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    int c, h, w;
    loader_shape(l, &c, &h, &w);
    assert_int_equal(c, AC);
    assert_int_equal(h, AH);
    assert_int_equal(w, AW);
    run_aug(l, AH, AW, 3, &seen);
    assert_int_equal(seen.images, 2 * ANIMG);
    for (int k = 0; k <= 6; k++) {               /* every offset from -3 to 3 comes up */
        assert_true(seen.y_hist[k] > 0);
        assert_true(seen.x_hist[k] > 0);
    }
    /* mirrored with probability 1/2: 480 draws, 4 standard deviations either side */
    assert_in_range(seen.flips, 240 - 44, 240 + 44);
    loader_close(l);

    /* a smaller random crop, no padding, no mirror */
    o.aug = (ds_augment){ .crop_h = 5, .crop_w = 6 };
    l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    loader_shape(l, &c, &h, &w);
    assert_int_equal(h, 5);
    assert_int_equal(w, 6);
    run_aug(l, 5, 6, 0, &seen);
    assert_int_equal(seen.flips, 0);
    for (int k = 0; k <= 3; k++) assert_true(seen.y_hist[k] > 0);
    for (int k = 0; k <= 2; k++) assert_true(seen.x_hist[k] > 0);
    loader_close(l);

    /* validation: the centre window, never mirrored, whatever the pad */
    o.train = false;
    o.aug = (ds_augment){ .crop_h = 5, .crop_w = 5, .pad = 2, .mirror = true };
    l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    run_aug(l, 5, 5, 2, &seen);
    assert_int_equal(seen.flips, 0);
    assert_int_equal(seen.y_hist[1 + 2], 2 * ANIMG);   /* (8 - 5) / 2 = 1: rows 1..5 */
    assert_int_equal(seen.x_hist[1 + 2], 2 * ANIMG);
    loader_close(l);
    o.aug = (ds_augment){ .pad = 4, .mirror = true };  /* CIFAR's at validation: the image itself */
    l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    run_aug(l, AH, AW, 4, &seen);
    assert_int_equal(seen.y_hist[0 + 4], 2 * ANIMG);
    assert_int_equal(seen.x_hist[0 + 4], 2 * ANIMG);
    assert_int_equal(seen.flips, 0);
    loader_close(l);
    ds_split_close(s);
}

/* Reads one epoch of l into a new buffer (batches of 16). */
static float *epoch_floats(loader *l, int epoch, size_t floats_per_image, size_t *n) {
    float *all = malloc(sizeof(float) * floats_per_image * ANIMG);
    int32_t lb[16];
    assert_non_null(all);
    loader_start_epoch(l, epoch);
    size_t k = 0;
    int got;
    while ((got = loader_next(l, all + k * floats_per_image, lb)) > 0) k += (size_t)got;
    *n = k * floats_per_image;
    return all;
}

static void test_augment_repeats(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_aug_split(f->path);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader_opts o = { .batch = 16, .train = true, .seed = 11, .mean = AMEAN, .scale = ASCALE,
                      .aug = { .crop_h = 6, .crop_w = 6, .pad = 1, .mirror = true } };
    loader *a = loader_open(s, &o, err, sizeof err);
    loader *b = loader_open(s, &o, err, sizeof err);
    o.seed = 12;
    loader *other = loader_open(s, &o, err, sizeof err);
    assert_true(a && b && other);
    size_t fpi = AC * 6 * 6, na, nb, no;
    float *xa = epoch_floats(a, 1, fpi, &na), *xb = epoch_floats(b, 1, fpi, &nb);
    float *xo = epoch_floats(other, 1, fpi, &no);
    assert_int_equal(na, nb);
    assert_memory_equal(xa, xb, na * sizeof(float));      /* same seed, same output */
    assert_int_equal(na, no);
    assert_memory_not_equal(xa, xo, na * sizeof(float));  /* another seed, another */
    float *again = epoch_floats(a, 0, fpi, &nb);
    assert_memory_not_equal(xa, again, na * sizeof(float)); /* another epoch, another */
    free(again);
    again = epoch_floats(a, 1, fpi, &nb);                   /* back to epoch 1: the same */
    assert_memory_equal(xa, again, na * sizeof(float));
    free(again);
    free(xa);
    free(xb);
    free(xo);
    loader_close(a);
    loader_close(b);
    loader_close(other);

    /* bad augmentation is refused, naming the field */
    o.aug = (ds_augment){ .crop_h = AH + 1, .crop_w = AH + 1 };
    assert_null(loader_open(s, &o, err, sizeof err));
    assert_non_null(strstr(err, "augmentation.crop 9 is larger than the dataset's 8x8 images"));
    o.aug = (ds_augment){ .pad = DS_AUGMENT_PAD_MAX + 1 };
    assert_null(loader_open(s, &o, err, sizeof err));
    assert_non_null(strstr(err, "augmentation.pad"));
    ds_augment ok = { .crop_h = AH, .crop_w = AW, .pad = DS_AUGMENT_PAD_MAX };
    assert_int_equal(ds_augment_check(&ok, AH, AW, err, sizeof err), 0);
    ds_split_close(s);
}

/* ---- encoded splits ----------------------------------------------------------- */

/* A photo-like image: smooth gradients with a little structure, different
 * per image and channel. */
static void smooth_image(uint8_t *chw, int c, int h, int w, int i) {
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int v = 40 + (x * 120) / w + (y * 60) / h + 13 * ch + 7 * (i % 5) + ((x / 4 + y / 4) % 2) * 6;
                chw[((size_t)ch * (size_t)h + (size_t)y) * (size_t)w + (size_t)x] = (uint8_t)(v > 255 ? 255 : v);
            }
}

/* Writes the same n images to a raw split and an encoded one. */
static void write_pair(const char *raw, const char *enc, int encoding, int quality, int c, int h, int w,
                       int n, bool smooth) {
    char err[256] = "";
    size_t sz = (size_t)c * (size_t)h * (size_t)w;
    uint8_t *img = malloc(sz);
    assert_non_null(img);
    ds_writer *a = ds_writer_open(raw, c, h, w, err, sizeof err);
    ds_writer *b = ds_writer_open_encoded(enc, c, h, w, encoding, quality, err, sizeof err);
    if (!a || !b) fail_msg("%s", err);
    for (int i = 0; i < n; i++) {
        if (smooth) smooth_image(img, c, h, w, i);
        else for (size_t p = 0; p < sz; p++) img[p] = pixel((size_t)i, p);
        assert_int_equal(ds_writer_add(a, img, i % 3, err, sizeof err), 0);
        if (ds_writer_add(b, img, i % 3, err, sizeof err) != 0) fail_msg("%s", err);
    }
    assert_int_equal(ds_writer_commit(a, err, sizeof err), 0);
    if (ds_writer_commit(b, err, sizeof err) != 0) fail_msg("%s", err);
    free(img);
}

static void test_encoded_png_exact(void **state) {
    fixture *f = *state;
    char err[256] = "", raw[PATH_MAX + 32], enc[PATH_MAX + 32];
    snprintf(raw, sizeof raw, "%s/raw.kds", f->dir);
    snprintf(enc, sizeof enc, "%s/png.kds", f->dir);
    static const struct { int c, h, w, n; } cases[] = {
        { 3, 13, 11, 40 }, { 1, 28, 28, 25 }, { 1, 4, 4, 0 } /* empty */, { 3, 1, 1, 3 } /* last: the header below */,
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int c = cases[k].c, h = cases[k].h, w = cases[k].w, n = cases[k].n;
        write_pair(raw, enc, DS_ENC_PNG, 0, c, h, w, n, false);   /* noisy bytes: PNG must be exact */
        ds_split *r = ds_split_open(raw, err, sizeof err);
        ds_split *e = ds_split_open(enc, err, sizeof err);
        if (!r || !e) fail_msg("%s", err);
        assert_false(ds_split_encoded(r));
        assert_true(ds_split_encoded(e));
        assert_int_equal(ds_split_encoding(e), DS_ENC_PNG);
        assert_null(ds_split_image(e, 0));
        assert_int_equal(ds_split_count(e), (size_t)n);
        size_t sz = (size_t)c * (size_t)h * (size_t)w;
        uint8_t *got = malloc(sz);
        img_decoder *d = img_decoder_new();
        assert_true(got && d);
        for (int i = 0; i < n; i++) {
            assert_int_equal(ds_split_label(e, (size_t)i), i % 3);
            memset(got, 0xAB, sz);
            if (ds_split_read(e, (size_t)i, d, got, err, sizeof err) != 0) fail_msg("%s", err);
            assert_memory_equal(got, ds_split_image(r, (size_t)i), sz);
            memset(got, 0xAB, sz);
            assert_int_equal(ds_split_read(e, (size_t)i, NULL, got, err, sizeof err), 0);   /* its own decoder */
            assert_memory_equal(got, ds_split_image(r, (size_t)i), sz);
            assert_int_equal(ds_split_read(r, (size_t)i, NULL, got, err, sizeof err), 0);   /* raw: a copy */
            assert_memory_equal(got, ds_split_image(r, (size_t)i), sz);
        }
        assert_int_equal(ds_split_read(e, (size_t)n, d, got, err, sizeof err), -1);
        img_decoder_free(d);
        free(got);
        /* the loader decodes in its threads: the same batches as from the raw split */
        if (c == 3 && h > 1) {
            loader_opts o = { .batch = 7, .train = true, .drop_last = true, .seed = 9, .mean = MEAN3,
                              .scale = 0.5f, .aug = { .crop_h = 9, .crop_w = 9, .pad = 2, .mirror = true },
                              .threads = 1 };
            loader *lr = loader_open(r, &o, err, sizeof err);
            o.threads = 3;
            loader *le = loader_open(e, &o, err, sizeof err);
            assert_true(lr && le);
            same_batches(lr, le, 3 * 9 * 9, 7);
            loader_close(lr);
            loader_close(le);
        }
        ds_split_close(r);
        ds_split_close(e);
    }
    /* the header as documented: version 2, encoding 1, offsets from 0 */
    size_t len = 0;
    uint8_t *b = (uint8_t *)du_read_file(enc, &len);
    assert_non_null(b);
    assert_memory_equal(b, "KILNDS\0\2", 8);
    assert_int_equal(b[8], 3);
    assert_int_equal(b[18] | b[19] << 8, DS_ENC_PNG);
    size_t offsets_at = 64;            /* 24 + 2 * 3 bytes of labels, padded to 64 */
    for (int k = 0; k < 8; k++) assert_int_equal(b[offsets_at + (size_t)k], 0);
    size_t records_at = 128;           /* 64 + 8 * 4 bytes of offsets, padded to 64 */
    assert_int_equal(img_signature(b + records_at, len - records_at), IMG_PNG);
    free(b);
    assert_int_equal(du_count_suffix(f->dir, ".tmp"), 0);

    /* what the codecs cannot hold is refused when the writer opens */
    assert_null(ds_writer_open_encoded(enc, 2, 4, 4, DS_ENC_PNG, 0, err, sizeof err));
    assert_null(ds_writer_open_encoded(enc, 3, 4, 4, DS_ENC_JPEG, 0, err, sizeof err));
    assert_null(ds_writer_open_encoded(enc, 3, 4, 4, DS_ENC_JPEG, 101, err, sizeof err));
    assert_null(ds_writer_open_encoded(enc, 3, 4, 4, 7, 90, err, sizeof err));
}

/* JPEG is lossy: the records read back close to the pixels written, not
 * equal. The bound: JPEG at quality 90 on smooth, photo-like images (these
 * gradients) errs by about a level on average, a few at worst (measured
 * here with libjpeg-turbo: mean 1.02, worst 3 for grey 32x32; mean 1.16,
 * worst 6 for colour 64x48, where 4:2:0 halves the colour resolution); the
 * test allows about twice that, mean 2 and worst 12 levels. What it is
 * there to catch is far larger: channels swapped (13 levels apart here), a
 * plane layout or shape mixed up, or another image's record (tens of levels).
 * The file must also be smaller than the raw one. */
static void test_encoded_jpeg_close(void **state) {
    fixture *f = *state;
    char err[256] = "", raw[PATH_MAX + 32], enc[PATH_MAX + 32];
    snprintf(raw, sizeof raw, "%s/raw.kds", f->dir);
    snprintf(enc, sizeof enc, "%s/jpeg.kds", f->dir);
    static const struct { int c, h, w, n; } cases[] = { { 3, 64, 48, 12 }, { 1, 32, 32, 12 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int c = cases[k].c, h = cases[k].h, w = cases[k].w, n = cases[k].n;
        write_pair(raw, enc, DS_ENC_JPEG, 90, c, h, w, n, true);
        ds_split *r = ds_split_open(raw, err, sizeof err);
        ds_split *e = ds_split_open(enc, err, sizeof err);
        if (!r || !e) fail_msg("%s", err);
        assert_int_equal(ds_split_encoding(e), DS_ENC_JPEG);
        size_t sz = (size_t)c * (size_t)h * (size_t)w;
        uint8_t *got = malloc(sz);
        assert_non_null(got);
        double sum = 0;
        int worst = 0;
        for (int i = 0; i < n; i++) {
            if (ds_split_read(e, (size_t)i, NULL, got, err, sizeof err) != 0) fail_msg("%s", err);
            const uint8_t *want = ds_split_image(r, (size_t)i);
            for (size_t p = 0; p < sz; p++) {
                int d = abs((int)got[p] - (int)want[p]);
                sum += d;
                if (d > worst) worst = d;
            }
        }
        double mae = sum / ((double)sz * n);
        if (mae > 2.0 || worst > 12)
            fail_msg("JPEG q90 of %dx%dx%d: mean error %.2f, worst %d levels", c, h, w, mae, worst);
        free(got);
        ds_split_close(r);
        ds_split_close(e);
        size_t lr = 0, le = 0;
        free(du_read_file(raw, &lr));
        free(du_read_file(enc, &le));
        assert_true(le < lr);
    }
}

/* A version 1 file as an older kiln wrote it, byte by byte from the format. */
static void test_version_1_file_opens(void **state) {
    fixture *f = *state;
    uint8_t b[64 + 3 * 6] = { 'K', 'I', 'L', 'N', 'D', 'S', 0, 1, 3, 0, 0, 0, 1, 0, 2, 0, 3, 0 };
    b[24] = 2;                     /* labels 2, 0, 1 */
    b[26] = 0;
    b[28] = 1;
    for (int i = 0; i < 18; i++) b[64 + i] = (uint8_t)(200 + i);
    assert_int_equal(du_write_file(f->path, b, sizeof b), 0);
    char err[256] = "";
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    if (!s) fail_msg("%s", err);
    assert_false(ds_split_encoded(s));
    assert_int_equal(ds_split_count(s), 3);
    int c, h, w;
    ds_split_shape(s, &c, &h, &w);
    assert_int_equal(c * 10 + h * 100 + w, 1 * 10 + 2 * 100 + 3);
    assert_int_equal(ds_split_label(s, 0), 2);
    assert_int_equal(ds_split_label(s, 2), 1);
    uint8_t img[6];
    assert_int_equal(ds_split_read(s, 1, NULL, img, err, sizeof err), 0);
    for (int i = 0; i < 6; i++) assert_int_equal(img[i], 206 + i);
    loader_opts o = { .batch = 2, .scale = 1.0f };
    loader *l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    float x[12];
    int32_t lb[2];
    assert_int_equal(loader_next(l, x, lb), 2);
    assert_true(x[6] == 206.0f);
    assert_int_equal(lb[1], 0);
    loader_close(l);
    ds_split_close(s);
}

/* A damaged version 2 file is refused when it opens; a record that does not
 * decode is an error of loader_next, naming the image, never a batch. */
static void test_encoded_damaged(void **state) {
    fixture *f = *state;
    char err[256] = "", raw[PATH_MAX + 32], bad[PATH_MAX + 32];
    snprintf(raw, sizeof raw, "%s/raw.kds", f->dir);
    snprintf(bad, sizeof bad, "%s/bad.kds", f->dir);
    write_pair(raw, f->path, DS_ENC_PNG, 0, 3, 8, 8, 5, true);
    size_t len = 0;
    uint8_t *good = (uint8_t *)du_read_file(f->path, &len);
    assert_non_null(good);
    const size_t offsets_at = 64, records_at = 128;   /* 24 + 10 -> 64; 64 + 48 -> 128 */

    assert_int_equal(du_write_file(bad, good, len - 1), 0);           /* the last record cut short */
    expect_refused(bad, "truncated");
    assert_int_equal(du_write_file(bad, good, records_at - 8), 0);    /* cut inside the offsets */
    expect_refused(bad, "truncated");
    assert_int_equal(du_write_file(bad, good, 40), 0);                /* cut inside the labels */
    expect_refused(bad, "truncated");
    uint8_t *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, good, len);
    longer[len] = 0;
    assert_int_equal(du_write_file(bad, longer, len + 1), 0);         /* a byte too many */
    expect_refused(bad, "truncated");
    free(longer);

    uint8_t *copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, good, len);
    memcpy(copy + offsets_at + 16, copy + offsets_at + 8, 8);          /* record 1 empty */
    assert_int_equal(du_write_file(bad, copy, len), 0);
    expect_refused(bad, "damaged");
    memcpy(copy, good, len);
    copy[offsets_at] = 1;                                              /* record 0 not at 0 */
    assert_int_equal(du_write_file(bad, copy, len), 0);
    expect_refused(bad, "damaged");
    memcpy(copy, good, len);
    copy[8] = 6;                                                       /* count 6: offsets past */
    assert_int_equal(du_write_file(bad, copy, len), 0);
    ds_split *s = ds_split_open(bad, err, sizeof err);
    assert_null(s);

    /* offsets fine, record 3's bytes garbage: opens, but does not decode */
    memcpy(copy, good, len);
    uint64_t at = 0;
    for (int k = 0; k < 8; k++) at |= (uint64_t)good[offsets_at + 3 * 8 + (size_t)k] << (8 * k);
    memset(copy + records_at + at, 0x5A, 16);
    assert_int_equal(du_write_file(bad, copy, len), 0);
    s = ds_split_open(bad, err, sizeof err);
    if (!s) fail_msg("%s", err);
    uint8_t img[3 * 8 * 8];
    err[0] = '\0';
    assert_int_equal(ds_split_read(s, 3, NULL, img, err, sizeof err), -1);
    assert_true(err[0] != '\0');
    assert_int_equal(ds_split_read(s, 2, NULL, img, err, sizeof err), 0);
    loader_opts o = { .batch = 5, .scale = 1.0f, .threads = 2 };
    loader *l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    float x[5 * 3 * 8 * 8];
    int32_t lb[5];
    assert_int_equal(loader_next(l, x, lb), -1);
    if (!strstr(loader_error(l), "image 3")) fail_msg("loader_error \"%s\" does not name image 3", loader_error(l));
    assert_int_equal(loader_next(l, x, lb), -1);                       /* and stays failed */
    loader_close(l);
    ds_split_close(s);
    free(copy);
    free(good);
}

/* ---- the loader without copies, and decoding into a worker's buffer -------- */

/* loader_next_view gives what loader_next copies, batch for batch, and a
 * held batch is left alone until it is handed back. */
static void test_loader_view(void **state) {
    fixture *f = *state;
    char err[256] = "";
    write_split(f->path, 3, 9, 7, 101, 7);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    assert_non_null(s);
    loader_opts o = { .batch = 6, .train = true, .drop_last = false, .seed = 5, .mean = MEAN3, .scale = 0.25f,
                      .aug = { .crop_h = 6, .crop_w = 5, .pad = 2, .mirror = true }, .threads = 1 };
    loader *ref = loader_open(s, &o, err, sizeof err);
    o.threads = 3;
    loader *v = loader_open(s, &o, err, sizeof err);
    assert_true(ref && v);
    const size_t fpi = 3 * 6 * 5;
    float x[6 * 3 * 6 * 5], held[6 * 3 * 6 * 5];
    int32_t lx[6], heldl[6];
    const float *vx;
    const int32_t *vl;
    for (int e = 0; e < 3; e++) {
        loader_start_epoch(ref, e);
        loader_start_epoch(v, e);
        int n, b = 0;
        while ((n = loader_next(ref, x, lx)) > 0) {
            if (b % 3 == 2) {                  /* now and then the copying call on the same loader */
                float y[6 * 3 * 6 * 5];
                int32_t ly[6];
                assert_int_equal(loader_next(v, y, ly), n);
                assert_memory_equal(x, y, sizeof(float) * fpi * (size_t)n);
                assert_memory_equal(lx, ly, sizeof(int32_t) * (size_t)n);
            } else {
                assert_int_equal(loader_next_view(v, &vx, &vl), n);
                assert_true(vx && vl);
                assert_memory_equal(x, vx, sizeof(float) * fpi * (size_t)n);
                assert_memory_equal(lx, vl, sizeof(int32_t) * (size_t)n);
                if (b % 3 == 0) {
                    /* held while the threads have time to run ahead: untouched */
                    memcpy(held, vx, sizeof(float) * fpi * (size_t)n);
                    memcpy(heldl, vl, sizeof(int32_t) * (size_t)n);
                    struct timespec ts = { 0, 20 * 1000 * 1000 };
                    nanosleep(&ts, NULL);
                    assert_memory_equal(held, vx, sizeof(float) * fpi * (size_t)n);
                    assert_memory_equal(heldl, vl, sizeof(int32_t) * (size_t)n);
                    loader_release(v);
                    loader_release(v);         /* nothing held: nothing happens */
                }                              /* else handed back by the next call */
            }
            b++;
        }
        assert_int_equal(n, 0);
        assert_int_equal(b, 17);               /* 101 images, 6 a batch, the short one kept */
        vx = (const float *)x;
        vl = lx;
        assert_int_equal(loader_next_view(v, &vx, &vl), 0);
        assert_null(vx);
        assert_null(vl);
    }
    /* a restart with a batch held hands it back and repeats the epoch */
    loader_start_epoch(v, 1);
    assert_int_equal(loader_next_view(v, &vx, &vl), 6);
    loader_start_epoch(v, 1);
    loader_start_epoch(ref, 1);
    assert_int_equal(loader_next(ref, x, lx), 6);
    assert_int_equal(loader_next_view(v, &vx, &vl), 6);
    assert_memory_equal(x, vx, sizeof(float) * fpi * 6);
    loader_close(v);                           /* closed with a batch held */
    loader_close(ref);
    ds_split_close(s);
}

/* A JPEG split through the loader (colour records decoded as RGBX and split
 * into planes, mirrored as whole pixels; grey ones as planes) gives exactly
 * the batches of a raw split holding the pixels img_decode_chw decodes from
 * the same records: same crops, mirrors, padding and arithmetic. */
static void test_encoded_jpeg_loader_exact(void **state) {
    fixture *f = *state;
    char err[256] = "", raw[PATH_MAX + 32], enc[PATH_MAX + 32], dec[PATH_MAX + 32];
    snprintf(raw, sizeof raw, "%s/raw.kds", f->dir);
    snprintf(enc, sizeof enc, "%s/jpeg.kds", f->dir);
    snprintf(dec, sizeof dec, "%s/decoded.kds", f->dir);
    static const struct { int c, h, w; } cases[] = { { 3, 20, 17 }, { 1, 20, 17 }, { 3, 16, 16 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int c = cases[k].c, h = cases[k].h, w = cases[k].w, n = 29;
        write_pair(raw, enc, DS_ENC_JPEG, 85, c, h, w, n, true);
        ds_split *e = ds_split_open(enc, err, sizeof err);
        if (!e) fail_msg("%s", err);
        size_t sz = (size_t)c * (size_t)h * (size_t)w;
        uint8_t *img = malloc(sz);
        ds_writer *wr = ds_writer_open(dec, c, h, w, err, sizeof err);
        assert_true(img && wr);
        for (int i = 0; i < n; i++) {
            if (ds_split_read(e, (size_t)i, NULL, img, err, sizeof err) != 0) fail_msg("%s", err);
            assert_int_equal(ds_writer_add(wr, img, ds_split_label(e, (size_t)i), err, sizeof err), 0);
        }
        assert_int_equal(ds_writer_commit(wr, err, sizeof err), 0);
        free(img);
        ds_split *d = ds_split_open(dec, err, sizeof err);
        if (!d) fail_msg("%s", err);
        const ds_augment augs[] = { { 11, 9, 3, true }, { 0, 0, 4, true }, { h, w, 0, true }, { 7, 16, 0, false } };
        for (size_t a = 0; a < sizeof augs / sizeof augs[0]; a++)
            for (int train = 0; train < 2; train++) {
                loader_opts o = { .batch = 5, .train = train, .drop_last = true, .seed = 77 + a, .mean = MEAN3,
                                  .scale = 0.37f, .aug = augs[a], .threads = 1 };
                loader *ld = loader_open(d, &o, err, sizeof err);
                o.threads = 2;
                loader *le = loader_open(e, &o, err, sizeof err);
                if (!ld || !le) fail_msg("%s", err);
                int oc, oh, ow;
                loader_shape(le, &oc, &oh, &ow);
                same_batches(ld, le, (size_t)oc * (size_t)oh * (size_t)ow, 5);
                loader_close(ld);
                loader_close(le);
            }
        ds_split_close(d);
        ds_split_close(e);
    }
}

/* img_decode_into: the pixels of img_decode_chw, packed c or 4 bytes a
 * pixel, and its refusals; a failure leaves the decoder fit for the next. */
static void test_decode_into(void **state) {
    (void)state;
    enum { DH = 29, DW = 23 };
    char why[256];
    uint8_t chw[3 * DH * DW], want[3 * DH * DW], pix[4 * DH * DW];
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    for (int c = 1; c <= 3; c += 2)
        for (int fmt = 0; fmt < 2; fmt++) {
            /* colour that changes across the image (smooth_image's channels share
             * one gradient: its chroma is flat), so that how the chroma is
             * upsampled shows */
            for (int ch = 0; ch < c; ch++)
                for (int y = 0; y < DH; y++)
                    for (int x = 0; x < DW; x++)
                        chw[(ch * DH + y) * DW + x] =
                            (uint8_t)(ch == 0 ? 20 + 9 * x : ch == 1 ? 30 + 7 * y : 200 - 4 * x - 3 * y);
            uint8_t *buf = NULL;
            size_t len = 0;
            int rc = fmt ? img_encode_jpeg(chw, c, DH, DW, 90, &buf, &len, why, sizeof why)
                         : img_encode_png(chw, c, DH, DW, &buf, &len, why, sizeof why);
            if (rc != 0) fail_msg("%s", why);
            if (img_decode_chw(d, buf, len, c, DH, DW, want, why, sizeof why) != 0) fail_msg("%s", why);
            for (int stride = c; stride <= 4; stride += c == 3 ? 1 : 4) {
                memset(pix, 0xAB, sizeof pix);
                if (img_decode_into(d, buf, len, c, DH, DW, stride, pix, why, sizeof why) != 0)
                    fail_msg("%s, stride %d: %s", fmt ? "JPEG" : "PNG", stride, why);
                for (int ch = 0; ch < c; ch++)
                    for (int p = 0; p < DH * DW; p++)
                        if (pix[p * stride + ch] != want[ch * DH * DW + p])
                            fail_msg("%s c %d stride %d: pixel %d channel %d is %d, img_decode_chw %d",
                                     fmt ? "JPEG" : "PNG", c, stride, p, ch, pix[p * stride + ch],
                                     want[ch * DH * DW + p]);
            }
            /* refused: another size, another channel count, a stride that does not fit */
            why[0] = '\0';
            assert_int_equal(img_decode_into(d, buf, len, c, DH, DW + 1, c, pix, why, sizeof why), -1);
            assert_non_null(strstr(why, "expected"));
            assert_int_equal(img_decode_into(d, buf, len, 4 - c, DH, DW, 4 - c, pix, why, sizeof why), -1);
            assert_non_null(strstr(why, "channels"));
            assert_int_equal(img_decode_into(d, buf, len, c, DH, DW, c == 1 ? 4 : 2, pix, why, sizeof why), -1);
            if (fmt) {                         /* a truncated JPEG, then the whole one again */
                assert_int_equal(img_decode_into(d, buf, len / 2, c, DH, DW, c, pix, why, sizeof why), -1);
                assert_int_equal(img_decode_into(d, buf, len, c, DH, DW, c, pix, why, sizeof why), 0);
            }
            free(buf);
        }
    assert_int_equal(img_decode_into(d, (const uint8_t *)"not an image", 12, 3, DH, DW, 4, pix, why, sizeof why), -1);
    img_decoder_free(d);
}

/* A record that does not decode: loader_next_view fails as loader_next does. */
static void test_view_decode_error(void **state) {
    fixture *f = *state;
    char err[256] = "", raw[PATH_MAX + 32];
    snprintf(raw, sizeof raw, "%s/raw.kds", f->dir);
    write_pair(raw, f->path, DS_ENC_JPEG, 90, 3, 8, 8, 4, true);
    size_t len = 0;
    uint8_t *b = (uint8_t *)du_read_file(f->path, &len);
    assert_non_null(b);
    const size_t offsets_at = 64, records_at = 128;   /* 24 + 8 -> 64; 64 + 40 -> 128 */
    uint64_t at = 0;
    for (int k = 0; k < 8; k++) at |= (uint64_t)b[offsets_at + 2 * 8 + (size_t)k] << (8 * k);
    memset(b + records_at + at, 0x5A, 12);             /* record 2's header: garbage */
    assert_int_equal(du_write_file(f->path, b, len), 0);
    free(b);
    ds_split *s = ds_split_open(f->path, err, sizeof err);
    if (!s) fail_msg("%s", err);
    loader_opts o = { .batch = 2, .scale = 1.0f, .threads = 2 };
    loader *l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    const float *x;
    const int32_t *lb;
    assert_int_equal(loader_next_view(l, &x, &lb), 2);          /* images 0 and 1 */
    assert_int_equal(loader_next_view(l, &x, &lb), -1);
    assert_null(x);
    if (!strstr(loader_error(l), "image 2")) fail_msg("loader_error \"%s\" does not name image 2", loader_error(l));
    assert_int_equal(loader_next_view(l, &x, &lb), -1);
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
        cmocka_unit_test(test_batch_counts),
        cmocka_unit_test_setup_teardown(test_drop_last, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_same_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_augment_crops_and_mirrors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_augment_repeats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encoded_png_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encoded_jpeg_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_1_file_opens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encoded_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loader_view, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encoded_jpeg_loader_exact, setup, teardown),
        cmocka_unit_test(test_decode_into),
        cmocka_unit_test_setup_teardown(test_view_decode_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
