/* bench/loader_bench.c: the C side of bench/loader_compare and
 * bench/import_compare. A benchmark harness, not a test: it prints figures
 * as one JSON object and asserts nothing.
 *
 *   loader_bench loader KDS [--threads N] [--batch B] [--crop C] [--no-mirror]
 *                           [--epochs E] [--warmup W] [--copy]
 *       kiln's loader (engine/dataset.h) on one split, as training uses it:
 *       shuffled, a random C x C crop and (unless --no-mirror) a random
 *       mirror of each image, (pixel - mean) * scale to floats, N threads.
 *       The consumer (the calling thread) does what a trainer does with a
 *       batch: it takes it (loader_next_view: the loader's own buffer, no
 *       copy), reads from it and hands it back (loader_release), so that it
 *       takes next to no CPU from the loader's threads; --copy has it use
 *       loader_next instead, which copies each batch into the consumer's
 *       buffer (on the consumer's thread, which then competes for the cores).
 *       W warm-up batches (threads started, decoders and caches warm), then
 *       E epochs timed, each from loader_start_epoch to its last batch;
 *       per_cpu_second is the images over the CPU time of the whole process
 *       (the loader's threads and the consumer) in that span.
 *
 *   loader_bench decode [--min S] [--size S] PATH...
 *       Where an import's time goes: every image file under PATH (files, or
 *       folders searched for .jpg, .jpeg and .png) read into memory first,
 *       then on one thread, timed apart: img_decode to 3 channels at the
 *       smallest libjpeg scale that keeps S x S (--min, as the importer asks;
 *       0: full size), and img_resize_chw (squash) of that to S x S (--size).
 */
#define _GNU_SOURCE   /* nftw */
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "engine/dataset.h"   /* ds_split_open, loader_open, loader_next */
#include "engine/image.h"     /* img_decode, img_resize_chw */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) of the whole process, every thread. */
static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           (double)u.ru_stime.tv_usec * 1e-6;
}

static int usage(void) {
    fputs("usage: loader_bench loader KDS [--threads N] [--batch B] [--crop C] [--no-mirror] [--epochs E]"
          " [--warmup W] [--copy]\n"
          "       loader_bench decode [--min S] [--size S] PATH...\n",
          stderr);
    return 2;
}

/* The integer value of option argv[*i] when it is `name`, advancing *i;
 * false when argv[*i] is another option. */
static bool int_opt(int argc, char **argv, int *i, const char *name, int *v) {
    if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return false;
    *v = atoi(argv[++*i]);
    return true;
}

/* ---- loader -------------------------------------------------------------------- */

/* The consumer's part of one step: the next batch, its first and last values
 * read into *sum (what uploading it would touch first and last), and the
 * batch handed back. With x (--copy) through loader_next into x, else
 * through loader_next_view and loader_release. Returns loader_next's value. */
static int take(loader *l, float *x, int32_t *labels, double *sum) {
    int c, h, w;
    loader_shape(l, &c, &h, &w);
    size_t per = (size_t)c * (size_t)h * (size_t)w;
    if (x) {
        int n = loader_next(l, x, labels);
        if (n > 0) *sum += x[0] + x[(size_t)n * per - 1] + labels[n - 1];
        return n;
    }
    const float *vx;
    const int32_t *vl;
    int n = loader_next_view(l, &vx, &vl);
    if (n > 0) {
        *sum += vx[0] + vx[(size_t)n * per - 1] + vl[n - 1];
        loader_release(l);
    }
    return n;
}

static int run_loader(int argc, char **argv) {
    const char *path = NULL;
    int threads = 1, batch = 64, crop = 224, epochs = 2, warmup = 4;
    bool mirror = true, copy = false;
    for (int i = 0; i < argc; i++) {
        if (int_opt(argc, argv, &i, "--threads", &threads) || int_opt(argc, argv, &i, "--batch", &batch) ||
            int_opt(argc, argv, &i, "--crop", &crop) || int_opt(argc, argv, &i, "--epochs", &epochs) ||
            int_opt(argc, argv, &i, "--warmup", &warmup))
            continue;
        if (strcmp(argv[i], "--no-mirror") == 0) mirror = false;
        else if (strcmp(argv[i], "--copy") == 0) copy = true;
        else if (argv[i][0] == '-' || path) return usage();
        else path = argv[i];
    }
    if (!path || threads < 1 || batch < 1 || epochs < 1 || warmup < 0) return usage();
    char err[512];
    ds_split *s = ds_split_open(path, err, sizeof err);
    if (!s) {
        fprintf(stderr, "loader_bench: %s\n", err);
        return 1;
    }
    int c, h, w;
    ds_split_shape(s, &c, &h, &w);
    const float mean[3] = { 120, 115, 100 };
    loader_opts o = { .batch = batch, .train = true, .drop_last = true, .seed = 1, .mean = mean,
                      .scale = 1.0f / 64, .aug = { crop, crop, 0, mirror }, .threads = threads };
    loader *l = loader_open(s, &o, err, sizeof err);
    if (!l) {
        fprintf(stderr, "loader_bench: %s\n", err);
        ds_split_close(s);
        return 1;
    }
    int rc = 1;
    int oc, oh, ow;
    loader_shape(l, &oc, &oh, &ow);
    /* --copy: loader_next's destination */
    float *x = copy ? malloc((size_t)batch * (size_t)oc * (size_t)oh * (size_t)ow * sizeof *x) : NULL;
    int32_t *labels = copy ? malloc((size_t)batch * sizeof *labels) : NULL;
    if (copy && (!x || !labels)) {
        fprintf(stderr, "loader_bench: out of memory\n");
        goto out;
    }
    /* warm-up: the first batches of epoch 0, not timed */
    loader_start_epoch(l, 0);
    double sum = 0;
    for (int b = 0; b < warmup; b++)
        if (take(l, x, labels, &sum) < 0) {
            fprintf(stderr, "loader_bench: %s\n", loader_error(l));
            goto out;
        }
    size_t images = 0;
    sum = 0;
    double t0 = now_s(), c0 = cpu_s();
    for (int e = 1; e <= epochs; e++) {
        loader_start_epoch(l, e);
        int n;
        while ((n = take(l, x, labels, &sum)) > 0) images += (size_t)n;
        if (n < 0) {
            fprintf(stderr, "loader_bench: %s\n", loader_error(l));
            goto out;
        }
    }
    double t = now_s() - t0, cpu = cpu_s() - c0;
    printf("{\"images\": %zu, \"seconds\": %.4f, \"images_per_sec\": %.2f, \"threads\": %d, "
           "\"per_thread\": %.2f, \"cpu_seconds\": %.4f, \"per_cpu_second\": %.2f, \"shape\": [%d, %d, %d], "
           "\"stored\": [%d, %d, %d], \"encoding\": \"%s\", \"consumer\": \"%s\", \"checksum\": %.3f}\n",
           images, t, (double)images / t, threads, (double)images / t / threads, cpu, (double)images / cpu, oc, oh,
           ow, c, h, w, ds_encoding_name(ds_split_encoding(s)), copy ? "copy" : "view", sum);
    rc = 0;
out:
    free(x);
    free(labels);
    loader_close(l);
    ds_split_close(s);
    return rc;
}

/* ---- decode -------------------------------------------------------------------- */

typedef struct file_list {
    char **paths;
    size_t n, cap;
} file_list;

static file_list *walk_into;   /* nftw has no user argument */

static bool is_image_name(const char *p) {
    const char *dot = strrchr(p, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int add_path(file_list *fl, const char *p) {
    if (fl->n == fl->cap) {
        size_t cap = fl->cap ? 2 * fl->cap : 1024;
        char **np = realloc(fl->paths, cap * sizeof *np);
        if (!np) return -1;
        fl->paths = np;
        fl->cap = cap;
    }
    if (!(fl->paths[fl->n] = strdup(p))) return -1;
    fl->n++;
    return 0;
}

static int walk_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (flag == FTW_F && is_image_name(p)) return add_path(walk_into, p);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n)) && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
        *len = n > 0 ? (size_t)n : 0;
    }
    fclose(f);
    return b;
}

static int run_decode(int argc, char **argv) {
    int min = 256, size = 256;
    file_list fl = { 0 };
    walk_into = &fl;
    for (int i = 0; i < argc; i++) {
        if (int_opt(argc, argv, &i, "--min", &min) || int_opt(argc, argv, &i, "--size", &size)) continue;
        if (argv[i][0] == '-') return usage();
        if (nftw(argv[i], walk_entry, 16, FTW_PHYS) != 0) {
            fprintf(stderr, "loader_bench: cannot read %s\n", argv[i]);
            return 1;
        }
    }
    if (fl.n == 0 || size < 1) return usage();
    qsort(fl.paths, fl.n, sizeof *fl.paths, by_name);
    uint8_t **bufs = calloc(fl.n, sizeof *bufs);
    size_t *lens = calloc(fl.n, sizeof *lens);
    uint8_t *chw = malloc((size_t)3 * (size_t)size * (size_t)size), *scratch = NULL;
    size_t scratch_cap = 0, bytes = 0, failed = 0, pixels = 0;
    img_decoder *d = img_decoder_new();
    int rc = 1;
    if (!bufs || !lens || !chw || !d) goto out;
    for (size_t i = 0; i < fl.n; i++) {
        if (!(bufs[i] = read_all(fl.paths[i], &lens[i]))) {
            fprintf(stderr, "loader_bench: cannot read %s\n", fl.paths[i]);
            goto out;
        }
        bytes += lens[i];
    }
    double t_dec = 0, t_res = 0, sum = 0;
    for (size_t i = 0; i < fl.n; i++) {
        uint8_t *pix = NULL;
        int w, h;
        char why[256];
        double t0 = now_s();
        int r = img_decode(d, bufs[i], lens[i], 3, min, min, &pix, &w, &h, why, sizeof why);
        double t1 = now_s();
        t_dec += t1 - t0;
        if (r != 0) {
            failed++;
            continue;
        }
        pixels += (size_t)w * (size_t)h;
        if (img_resize_chw(pix, w, h, 3, IMG_SQUASH, 0, chw, size, size, 3, &scratch, &scratch_cap) != 0) {
            fprintf(stderr, "loader_bench: out of memory\n");
            free(pix);
            goto out;
        }
        t_res += now_s() - t1;
        sum += chw[i % ((size_t)3 * (size_t)size * (size_t)size)];
        free(pix);
    }
    printf("{\"files\": %zu, \"failed\": %zu, \"mbytes\": %.1f, \"decoded_mpixels\": %.1f, "
           "\"decode_seconds\": %.4f, \"resize_seconds\": %.4f, \"decode_ms\": %.4f, \"resize_ms\": %.4f, "
           "\"min\": %d, \"size\": %d, \"checksum\": %.0f}\n",
           fl.n, failed, (double)bytes / 1e6, (double)pixels / 1e6, t_dec, t_res, 1e3 * t_dec / (double)fl.n,
           1e3 * t_res / (double)fl.n, min, size, sum);
    rc = 0;
out:
    for (size_t i = 0; bufs && i < fl.n; i++) free(bufs[i]);
    for (size_t i = 0; i < fl.n; i++) free(fl.paths[i]);
    free(fl.paths);
    free(bufs);
    free(lens);
    free(chw);
    free(scratch);
    img_decoder_free(d);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    if (strcmp(argv[1], "loader") == 0) return run_loader(argc - 2, argv + 2);
    if (strcmp(argv[1], "decode") == 0) return run_decode(argc - 2, argv + 2);
    return usage();
}
