/* tests/unit/test_infer.c: classifying (jobs/infer.c).
 *
 * The preprocessing: a folder of PNG and JPEG images (grey and colour, of
 * sizes other than the dataset's) is imported with jobs/import.h and read
 * back through engine/dataset.h's loader in validation mode; infer_prepare's
 * tensor for each source image must equal, bit for bit, the loader's for
 * that image, in squash and crop modes, grey and colour, raw and PNG
 * storage, and with the centre crop of a crop-trained job (its model_prep
 * from model_prep_from_job on a job resolved by jobspec, as the worker's).
 * Each class holds one image, so a record's label names its source.
 *
 * Classifying: a small network saved and opened as a bundle classifies good
 * and bad items: the probabilities are net_predict's on infer_prepare's
 * tensor, top-k sorted, bad items failed one by one, the answer 200 or,
 * with no good item, 422 no_valid_images.
 */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "data_util.h"
#include "engine/dataset.h"
#include "engine/image.h"
#include "engine/net.h"
#include "engine/rng.h"
#include "jobs/import.h"
#include "jobs/infer.h"
#include "jobs/jobspec.h"
#include "jobs/model_bundle.h"

#define NSRC 6

typedef struct src_image {
    int w, h, c;             /* the file's size and channels */
    bool jpeg;
} src_image;

/* Sizes around and well above the targets: upscaled, downscaled (a JPEG at
 * 1/2 or 1/4 of its size by libjpeg's scaling), other aspect ratios. */
static const src_image SOURCES[NSRC] = {
    { 40, 30, 3, false }, { 17, 23, 1, false }, { 24, 20, 3, false },
    { 96, 80, 3, true }, { 50, 20, 1, true }, { 33, 61, 3, false },
};

typedef struct fixture {
    char root[256];
    char tree[300];
    uint8_t *file[NSRC];     /* each source's encoded bytes */
    size_t len[NSRC];
} fixture;

static void make_sources(fixture *f)
{
    rng r;
    rng_seed(&r, 11);
    for (int i = 0; i < NSRC; i++) {
        const src_image *s = &SOURCES[i];
        size_t n = (size_t)s->c * (size_t)s->w * (size_t)s->h;
        uint8_t *chw = malloc(n);
        assert_non_null(chw);
        /* smooth gradients plus noise: resizing has something to average */
        for (int ch = 0; ch < s->c; ch++)
            for (int y = 0; y < s->h; y++)
                for (int x = 0; x < s->w; x++) {
                    double v = 40 + 150.0 * (x + y * (ch + 1)) / (s->w + s->h * (ch + 1)) + 25 * rng_normal(&r);
                    chw[((size_t)ch * s->h + y) * s->w + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
        char why[256];
        int rc = s->jpeg ? img_encode_jpeg(chw, s->c, s->h, s->w, 90, &f->file[i], &f->len[i], why, sizeof why)
                         : img_encode_png(chw, s->c, s->h, s->w, &f->file[i], &f->len[i], why, sizeof why);
        assert_int_equal(rc, 0);
        free(chw);
        char dir[PATH_MAX + 32], path[PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/class%d", f->tree, i);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof path, "%s/img.%s", dir, s->jpeg ? "jpg" : "png");
        assert_int_equal(du_write_file(path, f->file[i], f->len[i]), 0);
    }
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || !du_mkdtemp(f->root, sizeof f->root))
        return -1;
    snprintf(f->tree, sizeof f->tree, "%s/src", f->root);
    if (mkdir(f->tree, 0755) != 0)
        return -1;
    make_sources(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    du_rm_rf(f->root);
    for (int i = 0; i < NSRC; i++)
        free(f->file[i]);
    free(f);
    return 0;
}

/* Imports the tree into root/<name> as a folder source; the folder's path into dir. */
static void import_tree(fixture *f, const char *name, int channels, img_resize mode, int encoding, char *dir,
                        size_t dirlen)
{
    snprintf(dir, dirlen, "%s/%s", f->root, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    import_source src = { .kind = IMPORT_FOLDER, .path = f->tree, .opts = IMPORT_OPTS_DEFAULT };
    src.opts.width = 24;
    src.opts.height = 20;
    src.opts.channels = channels;
    src.opts.resize = mode;
    src.opts.encoding = encoding;
    src.opts.val_percent = 0;        /* one image a class: every record in train.kds */
    char err[512];
    if (import_run(&src, dir, NULL, NULL, NULL, NULL, err, sizeof err) != 0)
        fail_msg("import: %s", err);
}

/* The loader's validation batch of the whole training split: x (count rows
 * of the prep's input) and labels. */
static int load_all(const char *dir, const model_prep *p, float **x, int32_t **labels)
{
    char err[512], path[PATH_MAX + 16];
    ds_info info;
    assert_int_equal(ds_info_load(dir, &info, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/train.kds", dir);
    ds_split *s = ds_split_open(path, err, sizeof err);
    assert_non_null(s);
    int n = (int)ds_split_count(s);
    assert_int_equal(n, NSRC);
    loader_opts o = { .batch = n, .train = false, .seed = 3, .mean = info.mean, .scale = 1.0f / 255.0f,
                      .aug = { p->crop_h, p->crop_w, 0, false }, .threads = 2 };
    loader *l = loader_open(s, &o, err, sizeof err);
    assert_non_null(l);
    size_t in = (size_t)p->c * (size_t)p->crop_h * (size_t)p->crop_w;
    *x = malloc((size_t)n * in * sizeof **x);
    *labels = malloc((size_t)n * sizeof **labels);
    loader_start_epoch(l, 0);
    assert_int_equal(loader_next(l, *x, *labels), n);
    loader_close(l);
    ds_split_close(s);
    ds_info_free(&info);
    return n;
}

/* A prep as the dataset's header gives it (what model_prep_from_job reads). */
static model_prep prep_of(const char *dir, int crop)
{
    char err[512];
    ds_info info;
    assert_int_equal(ds_info_load(dir, &info, err, sizeof err), 0);
    model_prep p = { .c = info.c, .h = info.h, .w = info.w, .scale = 1.0f / 255.0f };
    assert_int_equal(img_resize_parse(info.resize, &p.resize), 0);
    memcpy(p.mean, info.mean, sizeof p.mean);
    p.crop_h = crop ? crop : info.h;
    p.crop_w = crop ? crop : info.w;
    ds_info_free(&info);
    return p;
}

/* infer_prepare's tensor of every source against the loader's record of it. */
static void expect_same(fixture *f, const char *dir, const model_prep *p)
{
    float *x;
    int32_t *labels;
    int n = load_all(dir, p, &x, &labels);
    size_t in = (size_t)p->c * (size_t)p->crop_h * (size_t)p->crop_w;
    float *mine = malloc(in * sizeof *mine);
    infer_worker w;
    infer_worker_init(&w);
    bool seen[NSRC] = { false };
    for (int i = 0; i < n; i++) {
        int src = labels[i];            /* class<k> holds source k; the classes sort in that order */
        assert_in_range(src, 0, NSRC - 1);
        seen[src] = true;
        char why[256];
        assert_int_equal(infer_prepare(&w, p, f->file[src], f->len[src], mine, why, sizeof why), 0);
        if (memcmp(mine, x + (size_t)i * in, in * sizeof *mine) != 0) {
            size_t k = 0;
            while (mine[k] == x[(size_t)i * in + k]) k++;
            fail_msg("%s: source %d differs at float %zu: %.9g against the loader's %.9g", dir, src, k,
                     (double)mine[k], (double)x[(size_t)i * in + k]);
        }
    }
    for (int k = 0; k < NSRC; k++)
        assert_true(seen[k]);
    infer_worker_free(&w);
    free(mine);
    free(x);
    free(labels);
}

static void test_squash_grey(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "squash-grey", 1, IMG_SQUASH, DS_ENC_RAW, dir, sizeof dir);
    model_prep p = prep_of(dir, 0);
    assert_int_equal(p.c, 1);
    expect_same(f, dir, &p);
}

static void test_squash_colour_png(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "squash-colour", 3, IMG_SQUASH, DS_ENC_PNG, dir, sizeof dir);
    model_prep p = prep_of(dir, 0);
    assert_int_equal(p.c, 3);
    expect_same(f, dir, &p);
}

static void test_crop_colour(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "crop-colour", 3, IMG_CROP, DS_ENC_RAW, dir, sizeof dir);
    model_prep p = prep_of(dir, 0);
    assert_int_equal(p.resize, IMG_CROP);
    expect_same(f, dir, &p);
}

static void test_crop_grey(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "crop-grey", 1, IMG_CROP, DS_ENC_RAW, dir, sizeof dir);
    model_prep p = prep_of(dir, 0);
    expect_same(f, dir, &p);
}

/* A job trained on 15x15 crops of 24x20 images: the prep the job's own
 * reading gives, and the loader's centre window. */
static void test_crop_trained_job(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "job-data", 3, IMG_SQUASH, DS_ENC_RAW, dir, sizeof dir);
    cJSON *req = cJSON_Parse("{\"network\": {\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]}, \"epochs\": 1, \"augmentation\": {\"crop\": 15, \"mirror\": true}}");
    jobcfg c;
    api_error e;
    if (jobspec_resolve_local(req, dir, &c, &e) != 0)
        fail_msg("jobspec: %s", e.message);
    cJSON_Delete(req);
    model_prep p;
    char err[512];
    assert_int_equal(model_prep_from_job(&c, &p, err, sizeof err), 0);
    jobcfg_free(&c);
    assert_int_equal(p.crop_h, 15);
    assert_int_equal(p.crop_w, 15);
    assert_int_equal(p.h, 20);
    assert_int_equal(p.w, 24);
    expect_same(f, dir, &p);
}

/* fill: the same as the dataset inside the picture, the bands aside; the
 * noise repeats (a fixed seed). */
static void test_fill_repeats(void **state)
{
    fixture *f = *state;
    char dir[PATH_MAX];
    import_tree(f, "fill", 1, IMG_FILL, DS_ENC_RAW, dir, sizeof dir);
    model_prep p = prep_of(dir, 0);
    size_t in = (size_t)p.c * (size_t)p.h * (size_t)p.w;
    float *a = malloc(in * sizeof *a), *b = malloc(in * sizeof *b);
    infer_worker w;
    infer_worker_init(&w);
    char why[256];
    assert_int_equal(infer_prepare(&w, &p, f->file[0], f->len[0], a, why, sizeof why), 0);
    assert_int_equal(infer_prepare(&w, &p, f->file[0], f->len[0], b, why, sizeof why), 0);
    assert_memory_equal(a, b, in * sizeof *a);
    infer_worker_free(&w);
    free(a);
    free(b);
}

/* ---- classifying -------------------------------------------------------------------- */

static const char *TINY = "{\"name\": \"tiny\", \"layers\": [{\"type\": \"flatten\"}, "
                          "{\"type\": \"dense\", \"units\": 8}, {\"type\": \"relu\"}, "
                          "{\"type\": \"dense\", \"units\": \"classes\"}]}";

/* A bundle of a freshly initialised tiny network over the squash-grey prep. */
static void make_bundle(fixture *f, model_bundle *b)
{
    char dir[PATH_MAX], err[512];
    import_tree(f, "bundle-data", 1, IMG_SQUASH, DS_ENC_RAW, dir, sizeof dir);
    memset(b, 0, sizeof *b);
    b->prep = prep_of(dir, 0);
    b->spec = cJSON_Parse(TINY);
    b->input = (net_shape){ 1, b->prep.h, b->prep.w };
    b->nclasses = 6;
    b->labels = calloc(6, sizeof *b->labels);
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof name, "class%d", i);
        b->labels[i] = strdup(name);
    }
    b->epoch = 3;
    assert_true(snprintf(b->weights, sizeof b->weights, "%s/tiny.safetensors", f->root) < (int)sizeof b->weights);
    net *n = net_create(b->spec, b->input, 6, 4, NULL, NULL, 42, err, sizeof err);
    assert_non_null(n);
    assert_int_equal(net_save(n, b->weights, err, sizeof err), 0);
    net_free(n);
}

static void test_classify_items(void **state)
{
    fixture *f = *state;
    model_bundle b;
    make_bundle(f, &b);
    char err[512];
    infer_model m;
    assert_int_equal(infer_model_open(&m, &b, 1, err, sizeof err), 0);
    net *n = m.nets[0];

    infer_set s;
    infer_set_init(&s);
    api_error e;
    for (int i = 0; i < NSRC; i++) {
        uint8_t *copy = malloc(f->len[i]);
        memcpy(copy, f->file[i], f->len[i]);
        assert_int_equal(infer_set_add(&s, i == 2 ? "" : "good", copy, f->len[i], &e), 0);
    }
    uint8_t *junk = (uint8_t *)strdup("this is no image");
    assert_int_equal(infer_set_add(&s, "notes.txt", junk, strlen((char *)junk), &e), 0);
    uint8_t *cut = malloc(f->len[0] / 2);
    memcpy(cut, f->file[0], f->len[0] / 2);
    assert_int_equal(infer_set_add(&s, "cut.png", cut, f->len[0] / 2, &e), 0);
    assert_int_equal(infer_set_add_failed(&s, "big.png", "image_too_large", "too big", &e), 0);
    assert_int_equal(infer_set_add_failed(&s, "caf\xe9-\xc3\xa9\xff.png", "invalid_image", "latin-1 name", &e), 0);
    assert_string_equal(s.items[s.n - 1].name, "caf?-\xc3\xa9?.png");
    s.n--;
    free(s.items[s.n].name);
    assert_int_equal(infer_run(&m, &b, &s, 3, err, sizeof err), 0);

    /* every good item: top 3 of net_predict on infer_prepare's tensors, in
     * one batch as infer_run packed them (the good ones first) */
    size_t in = (size_t)b.prep.h * (size_t)b.prep.w;
    float *x = malloc(NSRC * in * sizeof *x), all[NSRC * 6];
    infer_worker w;
    infer_worker_init(&w);
    for (int i = 0; i < NSRC; i++) {
        char why[256];
        assert_int_equal(infer_prepare(&w, &b.prep, f->file[i], f->len[i], x + (size_t)i * in, why, sizeof why), 0);
    }
    assert_int_equal(net_predict(n, x, NSRC, all, err, sizeof err), 0);
    for (int i = 0; i < NSRC; i++) {
        const infer_item *it = &s.items[i];
        const float *probs = all + 6 * i;
        assert_string_equal(it->err_code, "");
        assert_int_equal(it->npred, 3);
        for (int k = 0; k < 3; k++) {
            int idx = it->pred[k].index;
            assert_true(it->pred[k].probability == probs[idx]);
            for (int j = 0; j < 6; j++) {
                bool listed = false;
                for (int q = 0; q < 3; q++) listed |= it->pred[q].index == j;
                if (!listed) assert_true(probs[j] <= it->pred[k].probability);
            }
            if (k) assert_true(it->pred[k - 1].probability >= it->pred[k].probability);
        }
    }
    infer_worker_free(&w);
    free(x);
    assert_string_equal(s.items[2].name, "image-3");
    assert_string_equal(s.items[NSRC].err_code, "invalid_image");
    assert_non_null(strstr(s.items[NSRC].err, "not a PNG or JPEG"));
    assert_string_equal(s.items[NSRC + 1].err_code, "invalid_image");
    assert_string_equal(s.items[NSRC + 2].err_code, "image_too_large");

    int status = 0;
    char *text = infer_answer(&b, &s, &status, NULL);
    cJSON *ans = cJSON_Parse(text);
    free(text);
    assert_non_null(ans);
    assert_int_equal(status, 200);
    assert_int_equal(cJSON_GetObjectItem(ans, "epoch")->valueint, 3);
    assert_null(cJSON_GetObjectItem(ans, "error"));
    cJSON *items = cJSON_GetObjectItem(ans, "items");
    assert_int_equal(cJSON_GetArraySize(items), NSRC + 3);
    cJSON *first = cJSON_GetArrayItem(items, 0);
    cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(first, "predictions"), 0);
    assert_string_equal(cJSON_GetObjectItem(p0, "label")->valuestring,
                        b.labels[cJSON_GetObjectItem(p0, "index")->valueint]);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(items, NSRC), "error"),
                                            "code")->valuestring, "invalid_image");
    cJSON_Delete(ans);
    infer_set_free(&s);

    /* nothing usable: 422 naming each item */
    infer_set_init(&s);
    junk = (uint8_t *)strdup("GIF89a");
    assert_int_equal(infer_set_add(&s, "a.gif", junk, 6, &e), 0);
    assert_int_equal(infer_set_add_failed(&s, "b.png", "image_too_large", "over the limit", &e), 0);
    assert_int_equal(infer_run(&m, &b, &s, 1, err, sizeof err), 0);
    text = infer_answer(&b, &s, &status, NULL);
    ans = cJSON_Parse(text);
    free(text);
    assert_int_equal(status, 422);
    cJSON *er = cJSON_GetObjectItem(ans, "error");
    assert_string_equal(cJSON_GetObjectItem(er, "code")->valuestring, "no_valid_images");
    const char *msg = cJSON_GetObjectItem(er, "message")->valuestring;
    assert_non_null(strstr(msg, "a.gif"));
    assert_non_null(strstr(msg, "b.png: over the limit"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(ans, "items")), 2);
    cJSON_Delete(ans);
    infer_set_free(&s);

    assert_int_equal(infer_check_top_k(6, 6, &e), 0);
    assert_int_equal(infer_check_top_k(7, 6, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(infer_check_top_k(0, 6, &e), -1);
    infer_model_free(&m);
    model_bundle_free(&b);
}

/* Fills s with count items: the sources in turn, every 37th one no image. */
static void many_items(fixture *f, infer_set *s, int count)
{
    api_error e;
    infer_set_init(s);
    for (int i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "item-%d", i);
        if (i % 37 == 5) {
            uint8_t *junk = (uint8_t *)strdup("not an image");
            assert_int_equal(infer_set_add(s, name, junk, strlen((char *)junk), &e), 0);
            continue;
        }
        int src = i % NSRC;
        uint8_t *copy = malloc(f->len[src]);
        memcpy(copy, f->file[src], f->len[src]);
        assert_int_equal(infer_set_add(s, name, copy, f->len[src], &e), 0);
    }
}

/* A net per thread (each thread takes whole batches) classifies every item
 * as one net on all threads does: the same batches go through the same
 * weights, each image once. */
static void test_lanes(void **state)
{
    fixture *f = *state;
    model_bundle b;
    make_bundle(f, &b);
    omp_set_num_threads(2);
    assert_int_equal(infer_replicas(&b, 2), 2);           /* a tiny net: a copy per thread fits */
    assert_int_equal(infer_replicas(&b, 1), 1);
    char err[512];
    infer_model one, two;
    assert_int_equal(infer_model_open(&one, &b, 1, err, sizeof err), 0);
    assert_int_equal(infer_model_open(&two, &b, 2, err, sizeof err), 0);
    assert_int_equal(two.count, 2);
    const int count = 5 * infer_batch_size(b.input) + 17;
    infer_set a, c;
    many_items(f, &a, count);
    many_items(f, &c, count);
    assert_int_equal(infer_run(&one, &b, &a, 4, err, sizeof err), 0);
    assert_int_equal(infer_run(&two, &b, &c, 4, err, sizeof err), 0);
    int bad = 0;
    for (int i = 0; i < count; i++) {
        const infer_item *x = &a.items[i], *y = &c.items[i];
        assert_string_equal(x->err_code, y->err_code);
        if (x->err_code[0]) {
            bad++;
            assert_string_equal(x->err_code, "invalid_image");
            continue;
        }
        assert_int_equal(x->npred, 4);
        assert_int_equal(y->npred, 4);
        assert_null(y->data);                               /* classified, its bytes freed */
        for (int k = 0; k < 4; k++) {
            assert_int_equal(x->pred[k].index, y->pred[k].index);
            assert_true(x->pred[k].probability == y->pred[k].probability);
        }
    }
    assert_int_equal(bad, (count - 5 + 36) / 37);
    infer_set_free(&a);
    infer_set_free(&c);
    infer_model_free(&one);
    infer_model_free(&two);
    model_bundle_free(&b);
}

static void test_limits(void **state)
{
    (void)state;
    assert_int_equal(infer_batch_size((net_shape){ 1, 28, 28 }), INFER_LIMITS.batch_max);
    int big = infer_batch_size((net_shape){ 3, 224, 224 });
    assert_true(big >= 1 && (uint64_t)big * 3 * 224 * 224 <= INFER_LIMITS.batch_floats);
    assert_int_equal(infer_batch_size((net_shape){ 3, 4096, 4096 }), 1);

    /* the item count is capped */
    infer_set s;
    infer_set_init(&s);
    api_error e;
    for (int i = 0; i < INFER_LIMITS.max_items; i++)
        assert_int_equal(infer_set_add_failed(&s, "x", "invalid_image", "x", &e), 0);
    assert_int_equal(infer_set_add_failed(&s, "x", "invalid_image", "x", &e), -1);
    assert_int_equal(e.status, 413);
    infer_set_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_squash_grey, setup, teardown),
        cmocka_unit_test_setup_teardown(test_squash_colour_png, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crop_colour, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crop_grey, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crop_trained_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fill_repeats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_classify_items, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lanes, setup, teardown),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
