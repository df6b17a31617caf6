/* tests/unit/test_image.c: engine/image.c against references.
 *
 * Resizing: equal sizes copy exactly; a 2x shrink is the triangle filter of
 * radius 2 source pixels (weights 1,3,3,1 / 8, renormalised at the edges,
 * written out by hand here in double) and, on a ramp, the 2x2 box average;
 * growing is bilinear with pixel centres at +0.5 and clamped edges; colour to
 * grey is (299 R + 587 G + 114 B + 500) / 1000 exactly; grey to colour
 * replicates; crop, fill and half_crop put the scaled image where DIGITS'
 * resize_image (digits/utils/image.py) does, with Python 2's round (half away
 * from zero), and their noise repeats for a seed.
 *
 * Codecs: PNG round trips exactly, JPEG at quality 95 within 2 levels of mean
 * absolute error on a smooth image; scaled JPEG decoding picks the smallest
 * n/8 that keeps the minimum; img_probe reads headers only; one decoder
 * survives truncated, garbage and warned-about JPEGs (issue 13's sequence);
 * forged headers beyond the limits are refused before their size is
 * allocated; random mutations of a PNG and a JPEG never crash.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <spng.h>
#include <turbojpeg.h>

#include "engine/image.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* ---- helpers ------------------------------------------------------------------- */

/* A deterministic stream for patterns and mutations (splitmix64). */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint32_t below(uint64_t *s, uint32_t n) { return (uint32_t)(next_u64(s) % n); }

/* A random HWC image. */
static uint8_t *random_hwc(int w, int h, int c, uint64_t seed) {
    size_t n = (size_t)w * (size_t)h * (size_t)c;
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(next_u64(&seed) >> 56);
    return p;
}

/* A smooth CHW image of c channels: slow waves (under 2 levels from one pixel
 * to the next, whatever the size), no edges. */
static uint8_t *smooth_chw(int w, int h, int c) {
    size_t hw = (size_t)w * (size_t)h;
    uint8_t *p = malloc(hw * (size_t)c);
    assert_non_null(p);
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double val = 128 + 60 * sin(x / 40.0 + 2 * ch) + 50 * cos(y / 33.0 - ch) + 10 * sin((x + y) / 25.0);
                p[(size_t)ch * hw + (size_t)y * (size_t)w + (size_t)x] = (uint8_t)lround(val);
            }
    return p;
}

static uint8_t *chw_to_hwc(const uint8_t *chw, int w, int h, int c) {
    size_t hw = (size_t)w * (size_t)h;
    uint8_t *p = malloc(hw * (size_t)c);
    assert_non_null(p);
    for (int ch = 0; ch < c; ch++)
        for (size_t i = 0; i < hw; i++) p[i * (size_t)c + (size_t)ch] = chw[(size_t)ch * hw + i];
    return p;
}

static uint8_t grey_of(const uint8_t *rgb) {
    return (uint8_t)((299u * rgb[0] + 587u * rgb[1] + 114u * rgb[2] + 500u) / 1000u);
}

/* Resizes with a scratch buffer freed here. */
static void resize(const uint8_t *hwc, int sw, int sh, int sc, img_resize mode, uint64_t seed, uint8_t *chw,
                   int dw, int dh, int dc) {
    uint8_t *scratch = NULL;
    size_t cap = 0;
    assert_int_equal(img_resize_chw(hwc, sw, sh, sc, mode, seed, chw, dw, dh, dc, &scratch, &cap), 0);
    free(scratch);
}

/* The triangle filter in double: output i (of the image scaled to scaled_len)
 * takes source pixels j with weight 1 - |j + 0.5 - centre| / support, centre
 * = (i + 0.5) * scale, support = max(scale, 1), renormalised over the pixels
 * that exist (PIL's antialiased bilinear). */
static void ref_weights(int i, int len, int scaled_len, double *w) {
    double scale = (double)len / scaled_len, support = scale > 1 ? scale : 1;
    double centre = (i + 0.5) * scale, sum = 0;
    for (int j = 0; j < len; j++) {
        double v = 1 - fabs(j + 0.5 - centre) / support;
        w[j] = v > 0 ? v : 0;
        sum += w[j];
    }
    for (int j = 0; j < len; j++) w[j] /= sum;
}

/* Channel ch of the source (HWC, sc channels) scaled to rw x rh, at scaled
 * pixel (x, y), in double. */
static double ref_scaled(const uint8_t *hwc, int sw, int sh, int sc, int ch, int rw, int rh, int x, int y) {
    double *wx = malloc((size_t)sw * sizeof *wx), *wy = malloc((size_t)sh * sizeof *wy);
    assert_non_null(wx);
    assert_non_null(wy);
    ref_weights(x, sw, rw, wx);
    ref_weights(y, sh, rh, wy);
    double v = 0;
    for (int j = 0; j < sh; j++) {
        if (wy[j] == 0) continue;
        for (int i = 0; i < sw; i++)
            v += wy[j] * wx[i] * hwc[((size_t)j * (size_t)sw + (size_t)i) * (size_t)sc + (size_t)ch];
    }
    free(wx);
    free(wy);
    return v;
}

static void assert_near(double got, double want, double tol, const char *what, int x, int y) {
    if (fabs(got - want) > tol) fail_msg("%s at (%d, %d): got %.3f, want %.3f (tolerance %.2f)", what, x, y, got, want, tol);
}

/* ---- resizing ------------------------------------------------------------------ */

static void test_resize_names(void **state) {
    (void)state;
    img_resize r;
    for (int i = 0; i < IMG_RESIZE_COUNT; i++) {
        const char *n = img_resize_name((img_resize)i);
        assert_non_null(n);
        assert_int_equal(img_resize_parse(n, &r), 0);
        assert_int_equal(r, i);
    }
    assert_string_equal(img_resize_name(IMG_HALF_CROP), "half_crop");
    assert_null(img_resize_name(IMG_RESIZE_COUNT));
    assert_int_equal(img_resize_parse("stretch", &r), -1);
    assert_int_equal(img_resize_parse(NULL, &r), -1);
}

/* Equal sizes copy exactly, HWC to CHW, in every mode (nothing to scale, no noise). */
static void test_resize_equal_size_copies(void **state) {
    (void)state;
    const int w = 13, h = 9;
    for (int c = 1; c <= 3; c += 2) {
        uint8_t *src = random_hwc(w, h, c, 42 + (uint64_t)c);
        uint8_t *dst = malloc((size_t)w * h * c);
        assert_non_null(dst);
        for (int m = 0; m < IMG_RESIZE_COUNT; m++) {
            memset(dst, 0xA5, (size_t)w * h * c);
            resize(src, w, h, c, (img_resize)m, 7, dst, w, h, c);
            for (int ch = 0; ch < c; ch++)
                for (int i = 0; i < w * h; i++)
                    if (dst[ch * w * h + i] != src[i * c + ch])
                        fail_msg("mode %s, c %d: channel %d pixel %d is %d, want %d", img_resize_name((img_resize)m), c,
                                 ch, i, dst[ch * w * h + i], src[i * c + ch]);
        }
        free(src);
        free(dst);
    }
}

/* Colour to grey at equal size is the integer formula exactly; grey to colour
 * is the grey plane three times. */
static void test_resize_channel_conversion(void **state) {
    (void)state;
    const int w = 17, h = 11;
    uint8_t *rgb = random_hwc(w, h, 3, 5);
    /* the corners of the formula: pure primaries and white */
    const uint8_t corners[4][3] = { { 255, 0, 0 }, { 0, 255, 0 }, { 0, 0, 255 }, { 255, 255, 255 } };
    memcpy(rgb, corners, sizeof corners);
    uint8_t *g = malloc((size_t)w * h);
    assert_non_null(g);
    resize(rgb, w, h, 3, IMG_SQUASH, 0, g, w, h, 1);
    for (int i = 0; i < w * h; i++)
        if (g[i] != grey_of(rgb + 3 * i)) fail_msg("grey pixel %d is %d, want %d", i, g[i], grey_of(rgb + 3 * i));
    assert_int_equal(g[0], 76);    /* (299 * 255 + 500) / 1000 */
    assert_int_equal(g[1], 150);   /* (587 * 255 + 500) / 1000 */
    assert_int_equal(g[2], 29);    /* (114 * 255 + 500) / 1000 */
    assert_int_equal(g[3], 255);

    uint8_t *grey = random_hwc(w, h, 1, 6);
    uint8_t *col = malloc((size_t)w * h * 3);
    assert_non_null(col);
    resize(grey, w, h, 1, IMG_SQUASH, 0, col, w, h, 3);
    for (int ch = 0; ch < 3; ch++) assert_memory_equal(col + ch * w * h, grey, (size_t)w * h);

    /* and through a scaling: the grey of a shrunk colour image is the shrink
     * of its grey (conversion first), the colour of a shrunk grey replicated */
    uint8_t *g2 = malloc((size_t)8 * 5), *g2ref = malloc((size_t)8 * 5), *c2 = malloc((size_t)8 * 5 * 3);
    assert_non_null(g2);
    assert_non_null(g2ref);
    assert_non_null(c2);
    resize(rgb, w, h, 3, IMG_SQUASH, 0, g2, 8, 5, 1);
    resize(g, w, h, 1, IMG_SQUASH, 0, g2ref, 8, 5, 1);
    assert_memory_equal(g2, g2ref, 40);
    resize(grey, w, h, 1, IMG_SQUASH, 0, c2, 8, 5, 3);
    assert_memory_equal(c2, c2 + 40, 40);
    assert_memory_equal(c2, c2 + 80, 40);
    free(g2);
    free(g2ref);
    free(c2);
    free(rgb);
    free(g);
    free(grey);
    free(col);
}

/* 2x shrink: with scale 2 the triangle's support is 2 source pixels, so output
 * i takes source 2i-1, 2i, 2i+1, 2i+2 with weights 0.25, 0.75, 0.75, 0.25
 * (1 - |distance| / 2 from the centre at 2i+1), i.e. (1,3,3,1)/8, and at the
 * edges the three that exist, (3,3,1)/7 and (1,3,3)/7. */
static double tap2(const uint8_t *p, int stride, int n, int i) {
    const double wt[4] = { 1, 3, 3, 1 };
    double v = 0, sum = 0;
    for (int k = 0; k < 4; k++) {
        int j = 2 * i - 1 + k;
        if (j < 0 || j >= 2 * n) continue;
        v += wt[k] * p[(size_t)j * (size_t)stride];
        sum += wt[k];
    }
    return v / sum;
}

static void test_resize_downscale_2x(void **state) {
    (void)state;
    const int sw = 32, sh = 24, dw = 16, dh = 12;
    for (int c = 1; c <= 3; c += 2) {
        uint8_t *src = random_hwc(sw, sh, c, 100 + (uint64_t)c);
        uint8_t *dst = malloc((size_t)dw * dh * c);
        assert_non_null(dst);
        resize(src, sw, sh, c, IMG_SQUASH, 0, dst, dw, dh, c);
        /* the separable filter written out: first along x for every source row */
        double *tmp = malloc((size_t)sh * dw * sizeof *tmp);
        assert_non_null(tmp);
        for (int ch = 0; ch < c; ch++) {
            for (int y = 0; y < sh; y++)
                for (int x = 0; x < dw; x++) tmp[y * dw + x] = tap2(src + ((size_t)y * sw) * c + ch, c, dw, x);
            for (int y = 0; y < dh; y++)
                for (int x = 0; x < dw; x++) {
                    const double wt[4] = { 1, 3, 3, 1 };
                    double v = 0, sum = 0;
                    for (int k = 0; k < 4; k++) {
                        int j = 2 * y - 1 + k;
                        if (j < 0 || j >= sh) continue;
                        v += wt[k] * tmp[j * dw + x];
                        sum += wt[k];
                    }
                    assert_near(dst[ch * dw * dh + y * dw + x], v / sum, 1, "2x shrink (1,3,3,1)/8", x, y);
                    /* and the general reference agrees with the hand-written weights */
                    assert_near(ref_scaled(src, sw, sh, c, ch, dw, dh, x, y), v / sum, 1e-9, "reference", x, y);
                }
        }
        free(tmp);
        free(src);
        free(dst);
    }

    /* On a ramp the triangle and the 2x2 box average agree (within 1 level
     * away from the edges, where the triangle renormalises). */
    uint8_t *ramp = malloc((size_t)sw * sh);
    uint8_t *dst = malloc((size_t)dw * dh);
    assert_non_null(ramp);
    assert_non_null(dst);
    for (int y = 0; y < sh; y++)
        for (int x = 0; x < sw; x++) ramp[y * sw + x] = (uint8_t)(3 * x + 5 * y);
    resize(ramp, sw, sh, 1, IMG_SQUASH, 0, dst, dw, dh, 1);
    for (int y = 1; y < dh - 1; y++)
        for (int x = 1; x < dw - 1; x++) {
            double box = (ramp[2 * y * sw + 2 * x] + ramp[2 * y * sw + 2 * x + 1] + ramp[(2 * y + 1) * sw + 2 * x] +
                          ramp[(2 * y + 1) * sw + 2 * x + 1]) / 4.0;
            assert_near(dst[y * dw + x], box, 1, "2x2 box average of a ramp", x, y);
        }
    free(ramp);
    free(dst);
}

/* Other factors, up and down, against the double reference; growing also
 * against bilinear written the usual way (sample at (i + 0.5) * scale - 0.5,
 * clamped to the edge). */
static double bilinear(const uint8_t *p, int sw, int sh, int c, int ch, double fx, double fy) {
    int x0 = (int)floor(fx), y0 = (int)floor(fy);
    double ax = fx - x0, ay = fy - y0;
    int xs[2] = { x0, x0 + 1 }, ys[2] = { y0, y0 + 1 };
    for (int k = 0; k < 2; k++) {
        xs[k] = xs[k] < 0 ? 0 : xs[k] >= sw ? sw - 1 : xs[k];
        ys[k] = ys[k] < 0 ? 0 : ys[k] >= sh ? sh - 1 : ys[k];
    }
#define PX(xx, yy) ((double)p[((size_t)(yy) * (size_t)sw + (size_t)(xx)) * (size_t)c + (size_t)ch])
    return (1 - ay) * ((1 - ax) * PX(xs[0], ys[0]) + ax * PX(xs[1], ys[0])) +
           ay * ((1 - ax) * PX(xs[0], ys[1]) + ax * PX(xs[1], ys[1]));
#undef PX
}

static void test_resize_upscale_bilinear(void **state) {
    (void)state;
    const struct { int sw, sh, dw, dh; } cases[] = { { 8, 6, 16, 12 }, { 5, 7, 13, 10 }, { 10, 10, 11, 23 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int sw = cases[k].sw, sh = cases[k].sh, dw = cases[k].dw, dh = cases[k].dh;
        uint8_t *src = random_hwc(sw, sh, 3, 200 + k);
        uint8_t *dst = malloc((size_t)dw * dh * 3);
        assert_non_null(dst);
        resize(src, sw, sh, 3, IMG_SQUASH, 0, dst, dw, dh, 3);
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < dh; y++)
                for (int x = 0; x < dw; x++) {
                    double fx = (x + 0.5) * sw / dw - 0.5, fy = (y + 0.5) * sh / dh - 0.5;
                    assert_near(dst[ch * dw * dh + y * dw + x], bilinear(src, sw, sh, 3, ch, fx, fy), 1, "bilinear", x, y);
                }
        free(src);
        free(dst);
    }
}

static void test_resize_other_factors(void **state) {
    (void)state;
    /* non-integer shrinks on one or both axes, and one axis up, one down */
    const struct { int sw, sh, dw, dh; } cases[] = {
        { 40, 30, 16, 12 }, { 37, 23, 10, 9 }, { 64, 9, 7, 18 }, { 100, 75, 25, 25 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int sw = cases[k].sw, sh = cases[k].sh, dw = cases[k].dw, dh = cases[k].dh;
        uint8_t *src = random_hwc(sw, sh, 3, 300 + k);
        uint8_t *dst = malloc((size_t)dw * dh * 3);
        assert_non_null(dst);
        resize(src, sw, sh, 3, IMG_SQUASH, 0, dst, dw, dh, 3);
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < dh; y++)
                for (int x = 0; x < dw; x++)
                    assert_near(dst[ch * dw * dh + y * dw + x], ref_scaled(src, sw, sh, 3, ch, dw, dh, x, y), 1,
                                "triangle filter", x, y);
        free(src);
        free(dst);
    }
}

/* One scratch buffer through calls of growing and shrinking needs gives the
 * same pixels as a fresh one each time. */
static void test_resize_scratch_reuse(void **state) {
    (void)state;
    uint8_t *scratch = NULL;
    size_t cap = 0;
    const int sizes[][2] = { { 9, 7 }, { 64, 48 }, { 5, 3 }, { 33, 40 } };
    for (size_t k = 0; k < 4; k++) {
        int sw = sizes[k][0], sh = sizes[k][1];
        uint8_t *src = random_hwc(sw, sh, 3, 400 + k);
        uint8_t a[12 * 10], b[12 * 10];
        assert_int_equal(img_resize_chw(src, sw, sh, 3, IMG_SQUASH, 0, a, 12, 10, 1, &scratch, &cap), 0);
        resize(src, sw, sh, 3, IMG_SQUASH, 0, b, 12, 10, 1);
        assert_memory_equal(a, b, sizeof a);
        free(src);
    }
    assert_non_null(scratch);
    assert_true(cap > 0);
    free(scratch);
}

/* The geometry of crop, fill and half_crop, DIGITS' way. */
static void test_resize_crop(void **state) {
    (void)state;
    /* 40x20 to 20x20: the height ratio (1) is the smaller, so the image is
     * "scaled" to 40x20 (not at all) and the centre 20 columns, 10..29, kept */
    uint8_t *src = random_hwc(40, 20, 3, 500);
    uint8_t dst[3 * 20 * 20];
    resize(src, 40, 20, 3, IMG_CROP, 1, dst, 20, 20, 3);
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < 20; y++)
            for (int x = 0; x < 20; x++)
                if (dst[ch * 400 + y * 20 + x] != src[(y * 40 + x + 10) * 3 + ch])
                    fail_msg("crop 40x20->20x20: (%d, %d, %d) is %d, want source column %d", ch, x, y,
                             dst[ch * 400 + y * 20 + x], x + 10);
    free(src);

    /* tall, 20x40 to 20x20: rows 10..29 */
    src = random_hwc(20, 40, 1, 501);
    uint8_t g[20 * 20];
    resize(src, 20, 40, 1, IMG_CROP, 1, g, 20, 20, 1);
    for (int y = 0; y < 20; y++) assert_memory_equal(g + y * 20, src + (y + 10) * 20, 20);
    free(src);

    /* 33x20 to 20x20: start = round((33 - 20) / 2.0) = round(6.5), which is
     * 7 in DIGITS (Python 2 rounds half away from zero) */
    src = random_hwc(33, 20, 1, 502);
    resize(src, 33, 20, 1, IMG_CROP, 1, g, 20, 20, 1);
    for (int y = 0; y < 20; y++) assert_memory_equal(g + y * 20, src + y * 33 + 7, 20);
    free(src);

    /* 80x40 to 20x16: width ratio 4 > height ratio 2.5, so scaled to
     * round(80 / 2.5) = 32 x 16 and columns 6..25 of that kept */
    src = random_hwc(80, 40, 3, 503);
    uint8_t d2[3 * 20 * 16];
    resize(src, 80, 40, 3, IMG_CROP, 1, d2, 20, 16, 3);
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 20; x++)
                assert_near(d2[ch * 320 + y * 20 + x], ref_scaled(src, 80, 40, 3, ch, 32, 16, x + 6, y), 1,
                            "crop 80x40->20x16", x, y);
    free(src);
}

/* Rows [y0, y1) of every plane: whether they hold the expected scaled image. */
static void check_band(const uint8_t *dst, int dw, int dh, int c, const uint8_t *src, int sw, int sh, int rw, int rh,
                       int cx, int cy, int ox, int oy, int vw, int vh, const char *what) {
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < vh; y++)
            for (int x = 0; x < vw; x++)
                assert_near(dst[ch * dw * dh + (oy + y) * dw + ox + x],
                            ref_scaled(src, sw, sh, c, ch, rw, rh, cx + x, cy + y), 1, what, x, y);
}

/* Noise: the pixels outside the image rectangle differ between seeds, are
 * the same for a seed, and the image inside does not depend on the seed. */
static void check_noise(const uint8_t *src, int sw, int sh, int c, img_resize mode, int dw, int dh, int ox, int oy,
                        int vw, int vh) {
    size_t n = (size_t)dw * dh * c;
    uint8_t *a = malloc(n), *b = malloc(n), *d = malloc(n);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(d);
    resize(src, sw, sh, c, mode, 11, a, dw, dh, c);
    resize(src, sw, sh, c, mode, 11, b, dw, dh, c);
    resize(src, sw, sh, c, mode, 12, d, dw, dh, c);
    assert_memory_equal(a, b, n);
    int outside = 0, differ = 0, distinct[256] = { 0 }, values = 0;
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++) {
                size_t i = (size_t)ch * dw * dh + (size_t)y * dw + x;
                bool in = x >= ox && x < ox + vw && y >= oy && y < oy + vh;
                if (in) {
                    if (a[i] != d[i]) fail_msg("%s: image pixel (%d, %d) depends on the seed", img_resize_name(mode), x, y);
                } else {
                    outside++;
                    differ += a[i] != d[i];
                    if (!distinct[a[i]]++) values++;
                }
            }
    assert_true(outside > 0);
    /* two seeds' noise agree by chance on about 1 pixel in 256 */
    if (differ < outside * 9 / 10) fail_msg("%s: only %d of %d noise pixels differ between seeds", img_resize_name(mode), differ, outside);
    /* noise, not a constant fill */
    if (values < (outside < 256 ? outside / 3 : 64)) fail_msg("%s: noise has only %d values", img_resize_name(mode), values);
    free(a);
    free(b);
    free(d);
}

static void test_resize_fill(void **state) {
    (void)state;
    /* 40x20 to 20x20: width ratio 2 > height ratio 1, so scaled to 20 x
     * round(20 / 2) = 10 (20 - 10 is even, kept), centred: noise rows 0..4
     * and 15..19 */
    for (int c = 1; c <= 3; c += 2) {
        uint8_t *src = random_hwc(40, 20, c, 600 + (uint64_t)c);
        uint8_t *dst = malloc((size_t)400 * c);
        assert_non_null(dst);
        resize(src, 40, 20, c, IMG_FILL, 3, dst, 20, 20, c);
        check_band(dst, 20, 20, c, src, 40, 20, 20, 10, 0, 0, 0, 5, 20, 10, "fill 40x20->20x20");
        check_noise(src, 40, 20, c, IMG_FILL, 20, 20, 0, 5, 20, 10);
        free(src);
        free(dst);
    }
    /* tall, 21x40 to 20x20: height ratio 2 > width ratio 1.05, scaled to
     * round(21 / 2) = 11 (rounded half away from zero: 10.5 -> 11) x 20; 20 - 11
     * is odd, so 12 wide, at column (20 - 12) / 2 = 4 */
    uint8_t *src = random_hwc(21, 40, 3, 610);
    uint8_t dst[3 * 400];
    resize(src, 21, 40, 3, IMG_FILL, 3, dst, 20, 20, 3);
    check_band(dst, 20, 20, 3, src, 21, 40, 12, 20, 0, 0, 4, 0, 12, 20, "fill 21x40->20x20");
    check_noise(src, 21, 40, 3, IMG_FILL, 20, 20, 4, 0, 12, 20);
    free(src);
}

static void test_resize_half_crop(void **state) {
    (void)state;
    /* 40x20 to 20x20: ratios 2 and 1, halfway 1.5: scaled to round(26.67) = 27
     * x round(13.33) = 13, and 20 - 13 odd makes it 14; columns
     * round((27 - 20) / 2.0) = round(3.5) = 4 .. 23 kept, rows centred at
     * (20 - 14) / 2 = 3 with noise rows 0..2 and 17..19 */
    uint8_t *src = random_hwc(40, 20, 3, 700);
    uint8_t dst[3 * 400];
    resize(src, 40, 20, 3, IMG_HALF_CROP, 9, dst, 20, 20, 3);
    check_band(dst, 20, 20, 3, src, 40, 20, 27, 14, 4, 0, 0, 3, 20, 14, "half_crop 40x20->20x20");
    check_noise(src, 40, 20, 3, IMG_HALF_CROP, 20, 20, 0, 3, 20, 14);
    free(src);
    /* tall, 30x60 to 24x24: ratios 1.25 and 2.5, halfway 1.875: 16 x 32,
     * 24 - 16 even; rows round((32 - 24) / 2.0) = 4 .. 27 kept, columns
     * centred at 4 */
    src = random_hwc(30, 60, 1, 701);
    uint8_t g[24 * 24];
    resize(src, 30, 60, 1, IMG_HALF_CROP, 9, g, 24, 24, 1);
    check_band(g, 24, 24, 1, src, 30, 60, 16, 32, 0, 4, 4, 0, 16, 24, "half_crop 30x60->24x24");
    check_noise(src, 30, 60, 1, IMG_HALF_CROP, 24, 24, 4, 0, 16, 24);
    free(src);
}

/* Same aspect ratio: every mode is squash (no noise, nothing cut). */
static void test_resize_same_aspect(void **state) {
    (void)state;
    uint8_t *src = random_hwc(40, 30, 3, 800);
    uint8_t ref[3 * 20 * 15], got[3 * 20 * 15];
    resize(src, 40, 30, 3, IMG_SQUASH, 1, ref, 20, 15, 3);
    for (int m = 1; m < IMG_RESIZE_COUNT; m++) {
        resize(src, 40, 30, 3, (img_resize)m, 1, got, 20, 15, 3);
        assert_memory_equal(got, ref, sizeof ref);
    }
    free(src);
}

/* ---- codecs -------------------------------------------------------------------- */

static void encode_png(const uint8_t *chw, int c, int h, int w, uint8_t **out, size_t *len) {
    char why[256] = "";
    if (img_encode_png(chw, c, h, w, out, len, why, sizeof why) != 0) fail_msg("img_encode_png: %s", why);
}

static void encode_jpeg(const uint8_t *chw, int c, int h, int w, int q, uint8_t **out, size_t *len) {
    char why[256] = "";
    if (img_encode_jpeg(chw, c, h, w, q, out, len, why, sizeof why) != 0) fail_msg("img_encode_jpeg: %s", why);
}

static void test_signature(void **state) {
    (void)state;
    uint8_t *img = smooth_chw(4, 4, 1), *png, *jpg;
    size_t pl, jl;
    encode_png(img, 1, 4, 4, &png, &pl);
    encode_jpeg(img, 1, 4, 4, 90, &jpg, &jl);
    assert_int_equal(img_signature(png, pl), IMG_PNG);
    assert_int_equal(img_signature(jpg, jl), IMG_JPEG);
    assert_int_equal(img_signature(png, 7), IMG_NONE);   /* a PNG signature needs all 8 bytes */
    assert_int_equal(img_signature(jpg, 2), IMG_NONE);
    assert_int_equal(img_signature((const uint8_t *)"GIF89a..", 8), IMG_NONE);
    assert_int_equal(img_signature(png, 0), IMG_NONE);
    free(img);
    free(png);
    free(jpg);
}

/* PNG round trips exactly through img_decode (HWC) and img_decode_chw, grey
 * and colour, at odd sizes; colour decoded as grey is the integer formula. */
static void test_png_round_trip(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    const int sizes[][2] = { { 7, 5 }, { 1, 1 }, { 3, 17 }, { 64, 33 } };
    for (size_t k = 0; k < 4; k++) {
        int w = sizes[k][0], h = sizes[k][1];
        for (int c = 1; c <= 3; c += 2) {
            uint8_t *hwc0 = random_hwc(w, h, c, 900 + k * 4 + (uint64_t)c);
            /* the CHW the encoder takes */
            uint8_t *chw = malloc((size_t)w * h * c), *back = malloc((size_t)w * h * c), *pix = NULL, *png;
            assert_non_null(chw);
            assert_non_null(back);
            for (int ch = 0; ch < c; ch++)
                for (int i = 0; i < w * h; i++) chw[ch * w * h + i] = hwc0[i * c + ch];
            size_t len;
            encode_png(chw, c, h, w, &png, &len);
            char why[256] = "";
            int dw = 0, dh = 0;
            bool gray = !(c == 1);
            assert_int_equal(img_probe(d, png, len, &dw, &dh, &gray, why, sizeof why), 0);
            assert_int_equal(dw, w);
            assert_int_equal(dh, h);
            assert_int_equal(gray, c == 1);
            if (img_decode(d, png, len, c, 0, 0, &pix, &dw, &dh, why, sizeof why) != 0) fail_msg("decode: %s", why);
            assert_int_equal(dw, w);
            assert_int_equal(dh, h);
            assert_memory_equal(pix, hwc0, (size_t)w * h * c);
            free(pix);
            if (img_decode_chw(d, png, len, c, h, w, back, why, sizeof why) != 0) fail_msg("decode_chw: %s", why);
            assert_memory_equal(back, chw, (size_t)w * h * c);
            /* the other channel count through img_decode: grey from colour by
             * the formula, colour from grey replicated */
            int oc = 4 - c;
            assert_int_equal(img_decode(d, png, len, oc, 0, 0, &pix, &dw, &dh, why, sizeof why), 0);
            for (int i = 0; i < w * h; i++) {
                if (c == 3) assert_int_equal(pix[i], grey_of(hwc0 + 3 * i));
                else for (int ch = 0; ch < 3; ch++) assert_int_equal(pix[3 * i + ch], hwc0[i]);
            }
            free(pix);
            free(png);
            free(chw);
            free(back);
            free(hwc0);
        }
    }
    img_decoder_free(d);
    img_decoder_free(NULL);
}

/* img_decode_chw wants exactly c x h x w: another size or channel count is an
 * error (the header's contract), not a silent conversion. */
static void test_decode_chw_mismatch(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    uint8_t *col = smooth_chw(7, 5, 3), *png, *jpg;
    size_t pl, jl;
    encode_png(col, 3, 5, 7, &png, &pl);
    encode_jpeg(col, 3, 5, 7, 90, &jpg, &jl);
    uint8_t out[3 * 8 * 8];
    char why[256] = "";
    assert_int_equal(img_decode_chw(d, png, pl, 3, 5, 6, out, why, sizeof why), -1);
    assert_non_null(strstr(why, "7x5"));
    assert_int_equal(img_decode_chw(d, jpg, jl, 3, 8, 7, out, why, sizeof why), -1);
    assert_int_equal(img_decode_chw(d, (const uint8_t *)"not an image", 12, 3, 5, 7, out, why, sizeof why), -1);
    /* the channel count: a colour record read as grey, a grey one as colour */
    why[0] = '\0';
    int rc = img_decode_chw(d, png, pl, 1, 5, 7, out, why, sizeof why);
    if (rc != -1) fail_msg("a 3-channel PNG read by img_decode_chw as 1 channel was accepted (the contract: an error)");
    uint8_t *grey = smooth_chw(7, 5, 1), *gpng;
    size_t gl;
    encode_png(grey, 1, 5, 7, &gpng, &gl);
    rc = img_decode_chw(d, gpng, gl, 3, 5, 7, out, why, sizeof why);
    if (rc != -1) fail_msg("a 1-channel PNG read by img_decode_chw as 3 channels was accepted (the contract: an error)");
    free(grey);
    free(gpng);
    free(col);
    free(png);
    free(jpg);
    img_decoder_free(d);
}

/* PNG of other kinds than the encoder writes: 16-bit colour, grey with alpha,
 * 16-bit grey, written with spng directly. */
static void spng_write(const void *img, size_t n, uint32_t w, uint32_t h, int depth, int type, uint8_t **out,
                       size_t *len) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    assert_non_null(ctx);
    spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ihdr = { .width = w, .height = h, .bit_depth = (uint8_t)depth, .color_type = (uint8_t)type };
    assert_int_equal(spng_set_ihdr(ctx, &ihdr), 0);
    assert_int_equal(spng_encode_image(ctx, img, n, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
    int r = 0;
    *out = spng_get_png_buffer(ctx, len, &r);
    assert_non_null(*out);
    spng_ctx_free(ctx);
}

static void test_png_other_kinds(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    const int w = 5, h = 3;
    char why[256];
    uint8_t *pix, *png;
    size_t len;
    int dw, dh;
    /* 16-bit RGB (spng takes host-endian samples): 8 bits are v / 257, within 1 */
    uint16_t rgb16[5 * 3 * 3];
    uint64_t s = 1;
    for (size_t i = 0; i < 5 * 3 * 3; i++) rgb16[i] = (uint16_t)(next_u64(&s) >> 48);
    spng_write(rgb16, sizeof rgb16, w, h, 16, SPNG_COLOR_TYPE_TRUECOLOR, &png, &len);
    assert_int_equal(img_decode(d, png, len, 3, 0, 0, &pix, &dw, &dh, why, sizeof why), 0);
    for (int i = 0; i < w * h * 3; i++) assert_near(pix[i], rgb16[i] / 257.0, 1, "16-bit PNG", i % (w * 3), i / (w * 3));
    free(pix);
    free(png);
    /* grey with alpha, asked as grey: the grey, alpha dropped */
    uint8_t ga[5 * 3 * 2];
    for (int i = 0; i < w * h; i++) ga[2 * i] = (uint8_t)(i * 17), ga[2 * i + 1] = (uint8_t)(255 - i);
    spng_write(ga, sizeof ga, w, h, 8, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, &png, &len);
    bool gray = false;
    assert_int_equal(img_probe(d, png, len, &dw, &dh, &gray, why, sizeof why), 0);
    assert_true(gray);
    assert_int_equal(img_decode(d, png, len, 1, 0, 0, &pix, &dw, &dh, why, sizeof why), 0);
    for (int i = 0; i < w * h; i++) assert_int_equal(pix[i], i * 17);
    free(pix);
    free(png);
    /* 16-bit grey, asked as grey */
    uint16_t g16[5 * 3];
    for (int i = 0; i < w * h; i++) g16[i] = (uint16_t)(i * 4000 + 77);
    spng_write(g16, sizeof g16, w, h, 16, SPNG_COLOR_TYPE_GRAYSCALE, &png, &len);
    assert_int_equal(img_decode(d, png, len, 1, 0, 0, &pix, &dw, &dh, why, sizeof why), 0);
    for (int i = 0; i < w * h; i++) assert_near(pix[i], g16[i] / 257.0, 1, "16-bit grey PNG", i, 0);
    free(pix);
    free(png);
    img_decoder_free(d);
}

/* JPEG at quality 95 of a smooth image: the error is the quantisation of
 * q95's tables (steps of 1 to 3 levels for the low frequencies that carry a
 * smooth image) plus 4:2:0 chroma subsampling of colours that change by under
 * 2 levels between neighbours: measured 0.3 (grey) and 0.7 (colour) mean
 * absolute error at these sizes, at most 5 levels on one pixel. Under 2
 * leaves room for another libjpeg-turbo's rounding and still fails for any
 * real mistake (swapped channels or planes, a wrong stride, a shifted row:
 * tens of levels). */
static double mean_abs(const uint8_t *a, const uint8_t *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += abs((int)a[i] - (int)b[i]);
    return s / (double)n;
}

static void test_jpeg_round_trip(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    const int sizes[][2] = { { 7, 5 }, { 64, 48 }, { 131, 67 } };
    for (size_t k = 0; k < 3; k++) {
        int w = sizes[k][0], h = sizes[k][1];
        for (int c = 1; c <= 3; c += 2) {
            uint8_t *chw = smooth_chw(w, h, c), *jpg, *pix = NULL;
            uint8_t *back = malloc((size_t)w * h * c);
            assert_non_null(back);
            size_t len;
            encode_jpeg(chw, c, h, w, 95, &jpg, &len);
            char why[256] = "";
            int dw, dh;
            bool gray = c == 3;
            assert_int_equal(img_probe(d, jpg, len, &dw, &dh, &gray, why, sizeof why), 0);
            assert_int_equal(gray, c == 1);
            assert_int_equal(img_decode(d, jpg, len, c, 0, 0, &pix, &dw, &dh, why, sizeof why), 0);
            assert_int_equal(dw, w);
            assert_int_equal(dh, h);
            uint8_t *hwc = chw_to_hwc(chw, w, h, c);
            double e = mean_abs(pix, hwc, (size_t)w * h * c);
            if (e >= 2) fail_msg("JPEG q95 %dx%dx%d: mean abs error %.3f", w, h, c, e);
            free(pix);
            if (img_decode_chw(d, jpg, len, c, h, w, back, why, sizeof why) != 0) fail_msg("decode_chw: %s", why);
            e = mean_abs(back, chw, (size_t)w * h * c);
            if (e >= 2) fail_msg("JPEG q95 %dx%dx%d CHW: mean abs error %.3f", w, h, c, e);
            free(hwc);
            free(back);
            free(jpg);
            free(chw);
        }
    }
    uint8_t *x = smooth_chw(4, 4, 3), *out = NULL;
    size_t ol = 0;
    char why[256];
    assert_int_equal(img_encode_jpeg(x, 3, 4, 4, 0, &out, &ol, why, sizeof why), -1);
    assert_int_equal(img_encode_jpeg(x, 3, 4, 4, 101, &out, &ol, why, sizeof why), -1);
    assert_int_equal(img_encode_png(x, 2, 4, 4, &out, &ol, why, sizeof why), -1);
    assert_null(out);
    free(x);
    img_decoder_free(d);
}

/* The smallest n/8 (n = 1..8) whose ceil(side * n / 8) keeps both minimums;
 * 8/8 when none smaller does. */
static void expected_scaled(int w, int h, int mw, int mh, int *ow, int *oh) {
    *ow = w, *oh = h;
    for (int n = 1; n <= 8; n++) {
        int sw = (w * n + 7) / 8, sh = (h * n + 7) / 8;
        if (sw >= mw && sh >= mh) {
            *ow = sw, *oh = sh;
            return;
        }
    }
}

static void test_jpeg_scaled_decode(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    const int w = 1024, h = 768;
    uint8_t *chw = smooth_chw(w, h, 3), *jpg, *pix = NULL, *full = NULL;
    size_t len;
    encode_jpeg(chw, 3, h, w, 90, &jpg, &len);
    char why[256] = "";
    int dw, dh, fw, fh;
    /* at least 256x256: 3/8 gives 384x288 (1/4 would be 256x192, too short) */
    assert_int_equal(img_decode(d, jpg, len, 3, 256, 256, &pix, &dw, &dh, why, sizeof why), 0);
    assert_int_equal(dw, 384);
    assert_int_equal(dh, 288);
    assert_true(dw >= 256 && dh >= 256);
    /* the pixels are the image's: close to the full decode shrunk to that size */
    assert_int_equal(img_decode(d, jpg, len, 3, 0, 0, &full, &fw, &fh, why, sizeof why), 0);
    assert_int_equal(fw, w);
    assert_int_equal(fh, h);
    uint8_t *a = malloc((size_t)dw * dh * 3), *b = malloc((size_t)dw * dh * 3);
    assert_non_null(a);
    assert_non_null(b);
    resize(pix, dw, dh, 3, IMG_SQUASH, 0, a, dw, dh, 3);
    resize(full, fw, fh, 3, IMG_SQUASH, 0, b, dw, dh, 3);
    double e = mean_abs(a, b, (size_t)dw * dh * 3);
    if (e >= 2) fail_msg("scaled decode differs from the full one shrunk: mean abs %.3f", e);
    free(a);
    free(b);
    free(pix);
    free(full);
    /* other minimums, each against the n/8 rule */
    const int mins[][2] = { { 128, 96 }, { 129, 96 }, { 512, 385 }, { 1, 1 }, { 2000, 10 }, { 1024, 768 }, { 300, 100 } };
    for (size_t k = 0; k < sizeof mins / sizeof mins[0]; k++) {
        int ew, eh;
        expected_scaled(w, h, mins[k][0], mins[k][1], &ew, &eh);
        assert_int_equal(img_decode(d, jpg, len, 1, mins[k][0], mins[k][1], &pix, &dw, &dh, why, sizeof why), 0);
        if (dw != ew || dh != eh)
            fail_msg("min %dx%d: decoded %dx%d, want %dx%d", mins[k][0], mins[k][1], dw, dh, ew, eh);
        if (ew < w) assert_true(dw >= mins[k][0] && dh >= mins[k][1]);
        free(pix);
    }
    /* a minimum in one axis only (0 in the other) decodes at full size */
    assert_int_equal(img_decode(d, jpg, len, 3, 256, 0, &pix, &dw, &dh, why, sizeof why), 0);
    assert_int_equal(dw, w);
    free(pix);
    /* PNG ignores the minimum */
    uint8_t *small = smooth_chw(40, 30, 3), *png;
    encode_png(small, 3, 30, 40, &png, &len);
    assert_int_equal(img_decode(d, png, len, 3, 10, 10, &pix, &dw, &dh, why, sizeof why), 0);
    assert_int_equal(dw, 40);
    assert_int_equal(dh, 30);
    free(pix);
    free(png);
    free(small);
    free(jpg);
    free(chw);
    img_decoder_free(d);
}

/* img_probe reads the header only: a file cut after its header probes with
 * the true size and greyness, and does not decode. */
static void test_probe_header_only(void **state) {
    (void)state;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    char why[256];
    int w, h;
    bool gray;
    uint8_t *pix;
    for (int c = 1; c <= 3; c += 2) {
        uint8_t *chw = smooth_chw(300, 200, c), *jpg, *png;
        size_t jl, pl;
        encode_jpeg(chw, c, 200, 300, 90, &jpg, &jl);
        encode_png(chw, c, 200, 300, &png, &pl);
        /* the JPEG cut in the middle of its scan */
        size_t cut = jl / 2;
        gray = c == 3;
        assert_int_equal(img_probe(d, jpg, cut, &w, &h, &gray, why, sizeof why), 0);
        assert_int_equal(w, 300);
        assert_int_equal(h, 200);
        assert_int_equal(gray, c == 1);
        assert_int_equal(img_decode(d, jpg, cut, c, 0, 0, &pix, &w, &h, why, sizeof why), -1);
        assert_null(pix);
        assert_non_null(strstr(why, "JPEG"));
        /* the PNG cut after IHDR (8 + 25 bytes) plus a little */
        gray = c == 3;
        assert_int_equal(img_probe(d, png, 40, &w, &h, &gray, why, sizeof why), 0);
        assert_int_equal(w, 300);
        assert_int_equal(h, 200);
        assert_int_equal(gray, c == 1);
        assert_int_equal(img_decode(d, png, 40, c, 0, 0, &pix, &w, &h, why, sizeof why), -1);
        assert_null(pix);
        free(jpg);
        free(png);
        free(chw);
    }
    assert_int_equal(img_probe(d, (const uint8_t *)"BM6\0\0\0\0\0", 8, &w, &h, &gray, why, sizeof why), -1);
    assert_string_equal(why, "not a PNG or JPEG image");
    img_decoder_free(d);
}

/* Issue 13's sequence, with ONE decoder: a JPEG cut to its first 600 bytes,
 * a good JPEG, then garbage; and the other orders. */
static void test_corrupt_sequence(void **state) {
    (void)state;
    const int w = 320, h = 240;
    uint8_t *chw = smooth_chw(w, h, 3), *good, *trunc;
    size_t gl;
    encode_jpeg(chw, 3, h, w, 92, &good, &gl);
    assert_true(gl > 2000);
    trunc = malloc(600);
    assert_non_null(trunc);
    memcpy(trunc, good, 600);
    /* garbage: random bytes, and random bytes behind a JPEG signature */
    uint8_t *garbage = random_hwc(1000, 1, 1, 77), *jgarbage = random_hwc(1000, 1, 1, 78);
    garbage[0] = 'x';
    jgarbage[0] = 0xFF, jgarbage[1] = 0xD8, jgarbage[2] = 0xFF;
    uint8_t *hwc = chw_to_hwc(chw, w, h, 3), *ref = NULL;
    char why[256];
    int dw, dh;
    img_decoder *d0 = img_decoder_new();
    assert_non_null(d0);
    assert_int_equal(img_decode(d0, good, gl, 3, 0, 0, &ref, &dw, &dh, why, sizeof why), 0);
    img_decoder_free(d0);

    struct { const uint8_t *p; size_t n; bool ok; const char *name; } files[] = {
        { trunc, 600, false, "truncated" }, { good, gl, true, "good" }, { garbage, 1000, false, "garbage" },
        { jgarbage, 1000, false, "JPEG-signed garbage" },
    };
    /* issue 13's order, then others: every permutation-ish order of these,
     * each with one decoder and each file decoded and probed */
    const int orders[][6] = {
        { 0, 1, 2, -1 }, { 1, 0, 1, 3, 1, -1 }, { 3, 1, 0, 0, 1, -1 }, { 2, 3, 0, 1, 1, -1 }, { 0, 3, 2, 1, -1 },
    };
    for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
        img_decoder *d = img_decoder_new();
        assert_non_null(d);
        for (int k = 0; orders[o][k] >= 0; k++) {
            int f = orders[o][k];
            uint8_t *pix = (uint8_t *)1;
            why[0] = '\0';
            int rc = img_decode(d, files[f].p, files[f].n, 3, 0, 0, &pix, &dw, &dh, why, sizeof why);
            if (files[f].ok) {
                if (rc != 0) fail_msg("order %zu, step %d: the good JPEG failed: %s", o, k, why);
                assert_int_equal(dw, w);
                assert_int_equal(dh, h);
                assert_memory_equal(pix, ref, (size_t)w * h * 3);
                /* and scaled, through the same decoder */
                free(pix);
                assert_int_equal(img_decode(d, files[f].p, files[f].n, 3, 100, 100, &pix, &dw, &dh, why, sizeof why), 0);
                assert_int_equal(dw, 160);    /* 1/2 of 320 x 240: 3/8 would be 120 x 90 */
                assert_int_equal(dh, 120);
                free(pix);
            } else {
                if (rc != -1) fail_msg("order %zu, step %d: the %s file decoded as %dx%d", o, k, files[f].name, dw, dh);
                assert_null(pix);
                assert_true(why[0] != '\0');
                assert_null(strstr(why, "too large"));
            }
            int pw, ph;
            bool gray;
            rc = img_probe(d, files[f].p, files[f].n, &pw, &ph, &gray, why, sizeof why);
            if (files[f].ok) {
                assert_int_equal(rc, 0);
                assert_int_equal(pw, w);
                assert_int_equal(ph, h);
                assert_false(gray);
            } else if (f != 0) {
                assert_int_equal(rc, -1);   /* the truncated one may still have its header */
            }
        }
        img_decoder_free(d);
    }
    free(ref);
    free(hwc);
    free(garbage);
    free(jgarbage);
    free(trunc);
    free(good);
    free(chw);
}

/* A JPEG that libjpeg decodes to the end with only a warning (16 bytes of
 * its scan zeroed in the middle: "premature end of data segment", the rest
 * made up) is refused, and the decoder goes on to decode a good one. */
static void test_jpeg_warning_refused(void **state) {
    (void)state;
    const int w = 320, h = 240;
    uint8_t *chw = smooth_chw(w, h, 3), *good, *ref = NULL, *pix;
    size_t gl;
    encode_jpeg(chw, 3, h, w, 92, &good, &gl);
    size_t sos = 0;
    for (size_t i = 0; i + 1 < gl; i++)
        if (good[i] == 0xFF && good[i + 1] == 0xDA) {
            sos = i;
            break;
        }
    assert_true(sos > 0);
    char why[256];
    int dw, dh;
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    assert_int_equal(img_decode(d, good, gl, 3, 0, 0, &ref, &dw, &dh, why, sizeof why), 0);

    const char *kinds[] = { "16 zero bytes", "a stray RST marker" };
    for (int k = 0; k < 2; k++) {
        uint8_t *bad = malloc(gl);
        assert_non_null(bad);
        memcpy(bad, good, gl);
        size_t m = sos + (gl - sos) / 2;
        if (k == 0) memset(bad + m, 0, 16);
        else bad[m] = 0xFF, bad[m + 1] = 0xD3;
        /* the premise: libjpeg itself decodes it all and only warns */
        tjhandle tj = tjInitDecompress();
        assert_non_null(tj);
        uint8_t *out = malloc((size_t)w * h * 3);
        assert_non_null(out);
        assert_int_equal(tjDecompress2(tj, bad, (unsigned long)gl, out, w, 0, h, TJPF_RGB, 0), -1);
        if (tjGetErrorCode(tj) != TJERR_WARNING) fail_msg("%s: libjpeg did not merely warn: %s", kinds[k], tjGetErrorStr2(tj));
        tjDestroy(tj);
        free(out);
        /* kiln refuses it, full size and scaled, and recovers */
        for (int scaled = 0; scaled < 2; scaled++) {
            pix = (uint8_t *)1;
            why[0] = '\0';
            int s = scaled ? 100 : 0;
            if (img_decode(d, bad, gl, 3, s, s, &pix, &dw, &dh, why, sizeof why) != -1)
                fail_msg("%s (scaled %d): a JPEG libjpeg warned about was decoded", kinds[k], scaled);
            assert_null(pix);
            assert_non_null(strstr(why, "bad JPEG"));
            uint8_t *again = NULL;
            assert_int_equal(img_decode(d, good, gl, 3, 0, 0, &again, &dw, &dh, why, sizeof why), 0);
            assert_memory_equal(again, ref, (size_t)w * h * 3);
            free(again);
        }
        uint8_t *back = malloc((size_t)w * h * 3);
        assert_non_null(back);
        assert_int_equal(img_decode_chw(d, bad, gl, 3, h, w, back, why, sizeof why), -1);
        free(back);
        free(bad);
    }
    img_decoder_free(d);
    free(ref);
    free(good);
    free(chw);
}

/* ---- forged headers ------------------------------------------------------------ */

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Recomputes every whole chunk's CRC, so that a mutation reaches the decoder
 * behind spng's CRC check. */
static void png_fix_crcs(uint8_t *p, size_t n) {
    size_t at = 8;
    while (at + 12 <= n) {
        uint32_t len = get_be32(p + at);
        if (len > n || at + 12 + len > n) break;
        put_be32(p + at + 8 + len, crc32_png(p + at + 4, len + 4));
        at += 12 + len;
    }
}

/* The forged PNG: IHDR (at byte 8: length, "IHDR", width, height, ...) says w x h. */
static void png_forge(uint8_t *p, uint32_t w, uint32_t h) {
    assert_memory_equal(p + 12, "IHDR", 4);
    put_be32(p + 16, w);
    put_be32(p + 20, h);
    put_be32(p + 29, crc32_png(p + 12, 17));
}

/* The forged JPEG: its SOF0 (FF C0, length, precision, height, width) says w x h. */
static void jpeg_forge(uint8_t *p, size_t n, int w, int h) {
    for (size_t i = 2; i + 9 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == 0xC0) {
            p[i + 5] = (uint8_t)(h >> 8), p[i + 6] = (uint8_t)h;
            p[i + 7] = (uint8_t)(w >> 8), p[i + 8] = (uint8_t)w;
            return;
        }
    fail_msg("no SOF0 marker");
}

/* The address space this process has mapped now, in bytes. */
static size_t vm_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void test_forged_sizes_refused(void **state) {
    (void)state;
    uint8_t *chw = smooth_chw(16, 16, 3), *png, *jpg;
    size_t pl, jl;
    encode_png(chw, 3, 16, 16, &png, &pl);
    encode_jpeg(chw, 3, 16, 16, 90, &jpg, &jl);
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    /* beyond IMG_MAX_SIDE on one side; within each side but beyond
     * IMG_MAX_PIXELS; just beyond IMG_MAX_PIXELS */
    const struct { int w, h; } sizes[] = {
        { IMG_MAX_SIDE + 1, 16 }, { 16, 60000 }, { 16000, 16000 }, { IMG_MAX_SIDE, (int)(IMG_MAX_PIXELS / IMG_MAX_SIDE) + 1 },
    };
    /* A decode that allocated the forged size (3 bytes a pixel: at least
     * 190 MB for each) fails under this limit with "out of memory" instead of
     * "too large"; ASan reserves terabytes of shadow, so it runs without. */
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    if (!UNDER_ASAN) {
        struct rlimit lim = old;
        lim.rlim_cur = vm_bytes() + ((rlim_t)128 << 20);
        if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < lim.rlim_cur) lim.rlim_cur = old.rlim_cur;
        assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    }
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int fw = sizes[k].w, fh = sizes[k].h;
        uint8_t *p = malloc(pl), *j = malloc(jl), *pix;
        assert_non_null(p);
        assert_non_null(j);
        memcpy(p, png, pl);
        memcpy(j, jpg, jl);
        png_forge(p, (uint32_t)fw, (uint32_t)fh);
        jpeg_forge(j, jl, fw, fh);
        char why[256];
        int w, h;
        bool gray;
        /* the probe reports the size (the census counts every size) */
        assert_int_equal(img_probe(d, p, pl, &w, &h, &gray, why, sizeof why), 0);
        assert_int_equal(w, fw);
        assert_int_equal(h, fh);
        assert_int_equal(img_probe(d, j, jl, &w, &h, &gray, why, sizeof why), 0);
        assert_int_equal(w, fw);
        assert_int_equal(h, fh);
        for (int c = 1; c <= 3; c += 2) {
            pix = (uint8_t *)1;
            why[0] = '\0';
            assert_int_equal(img_decode(d, p, pl, c, 0, 0, &pix, &w, &h, why, sizeof why), -1);
            assert_null(pix);
            /* spng refuses a side past its limit itself; the area is image.c's check */
            if (!strstr(why, "too large") && !strstr(why, "exceeds user limit"))
                fail_msg("PNG %dx%d: refused for \"%s\", not for its size", fw, fh, why);
            pix = (uint8_t *)1;
            assert_int_equal(img_decode(d, j, jl, c, 0, 0, &pix, &w, &h, why, sizeof why), -1);
            assert_null(pix);
            if (!strstr(why, "too large")) fail_msg("JPEG %dx%d: refused for \"%s\", not for its size", fw, fh, why);
            /* a minimum does not let a scaled decode past the limit */
            pix = (uint8_t *)1;
            assert_int_equal(img_decode(d, j, jl, c, 16, 16, &pix, &w, &h, why, sizeof why), -1);
            assert_null(pix);
        }
        free(p);
        free(j);
    }
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    /* and the decoder still decodes the real ones */
    uint8_t *pix = NULL;
    char why[256];
    int w, h;
    assert_int_equal(img_decode(d, jpg, jl, 3, 0, 0, &pix, &w, &h, why, sizeof why), 0);
    assert_int_equal(w, 16);
    free(pix);
    img_decoder_free(d);
    free(png);
    free(jpg);
    free(chw);
}

/* ---- mutations ----------------------------------------------------------------- */

/* One mutation of src into *out (malloc'ed), from the stream s. The signature
 * is usually left alone, so that most mutants reach the decoder. */
static size_t mutate(const uint8_t *src, size_t n, uint64_t *s, bool png, uint8_t **out) {
    size_t cap = n + 64;
    uint8_t *b = malloc(cap);
    assert_non_null(b);
    memcpy(b, src, n);
    size_t len = n;
    size_t keep = below(s, 10) == 0 ? 0 : (png ? 8 : 3);
    int rounds = 1 + (int)below(s, 3);
    for (int r = 0; r < rounds && len > keep + 1; r++) {
        size_t span = len - keep;
        switch (below(s, 6)) {
        case 0: {                                   /* a few bytes set at random */
            int k = 1 + (int)below(s, 8);
            for (int i = 0; i < k; i++) b[keep + below(s, (uint32_t)span)] = (uint8_t)next_u64(s);
            break;
        }
        case 1:                                     /* cut short */
            len = keep + below(s, (uint32_t)span);
            break;
        case 2: {                                   /* a run of 0x00 or 0xFF */
            size_t at = keep + below(s, (uint32_t)span), k = 1 + below(s, 32);
            if (at + k > len) k = len - at;
            memset(b + at, below(s, 2) ? 0xFF : 0x00, k);
            break;
        }
        case 3: {                                   /* a span copied over another */
            size_t from = keep + below(s, (uint32_t)span), to = keep + below(s, (uint32_t)span), k = 1 + below(s, 64);
            if (from + k > len) k = len - from;
            if (to + k > len) k = len - to;
            memmove(b + to, b + from, k);
            break;
        }
        case 4: {                                   /* random bytes inserted */
            size_t k = 1 + below(s, 16), at = keep + below(s, (uint32_t)span);
            if (len + k > cap) break;
            memmove(b + at + k, b + at, len - at);
            for (size_t i = 0; i < k; i++) b[at + i] = (uint8_t)next_u64(s);
            len += k;
            break;
        }
        default: {                                  /* one bit flipped */
            b[keep + below(s, (uint32_t)span)] ^= (uint8_t)(1u << below(s, 8));
            break;
        }
        }
    }
    if (png && below(s, 2)) png_fix_crcs(b, len);
    *out = b;
    return len;
}

static void fuzz_one(const char *name, const uint8_t *src, size_t n, bool png, uint64_t seed) {
    img_decoder *d = img_decoder_new();
    assert_non_null(d);
    char why[256];
    uint8_t *ref = NULL;
    int rw, rh;
    assert_int_equal(img_decode(d, src, n, 3, 0, 0, &ref, &rw, &rh, why, sizeof why), 0);
    int decoded = 0, probed = 0;
    uint64_t s = seed;
    unsigned sum = 0;
    for (int it = 0; it < 2000; it++) {
        uint8_t *b;
        size_t len = mutate(src, n, &s, png, &b);
        int w = 0, h = 0;
        bool gray;
        if (img_probe(d, b, len, &w, &h, &gray, why, sizeof why) == 0) probed++;
        for (int c = 1; c <= 3; c += 2) {
            uint8_t *pix = (uint8_t *)1;
            int m = c == 1 ? 8 : 0;
            if (img_decode(d, b, len, c, m, m, &pix, &w, &h, why, sizeof why) == 0) {
                if (w < 1 || h < 1 || w > IMG_MAX_SIDE || h > IMG_MAX_SIDE || (uint64_t)w * (uint64_t)h > IMG_MAX_PIXELS)
                    fail_msg("%s mutant %d decoded as %dx%d", name, it, w, h);
                assert_non_null(pix);
                /* read all of it (under ASan, a short buffer shows here) */
                for (size_t i = 0; i < (size_t)w * h * c; i++) sum += pix[i];
                free(pix);
                decoded++;
            } else {
                assert_null(pix);
                assert_true(why[0] != '\0');
            }
        }
        free(b);
        /* the decoder is still sound */
        if (it % 97 == 0) {
            uint8_t *again = NULL;
            int w2, h2;
            assert_int_equal(img_decode(d, src, n, 3, 0, 0, &again, &w2, &h2, why, sizeof why), 0);
            assert_int_equal(w2, rw);
            assert_int_equal(h2, rh);
            assert_memory_equal(again, ref, (size_t)rw * rh * 3);
            free(again);
        }
    }
    print_message("%s: 2000 mutants, %d probed, %d of 4000 decodes succeeded (checksum %u)\n", name, probed, decoded, sum);
    free(ref);
    img_decoder_free(d);
}

static void test_fuzz_mutations(void **state) {
    (void)state;
    uint8_t *chw = smooth_chw(24, 16, 3), *png, *jpg;
    size_t pl, jl;
    /* noise on top, so that the PNG has real filtered rows to mangle */
    uint8_t *noise = random_hwc(24, 16, 3, 1234);
    for (int i = 0; i < 24 * 16 * 3; i++) chw[i] = (uint8_t)(chw[i] + (noise[i] & 7));
    encode_png(chw, 3, 16, 24, &png, &pl);
    encode_jpeg(chw, 3, 16, 24, 80, &jpg, &jl);
    fuzz_one("PNG", png, pl, true, 1);
    fuzz_one("JPEG", jpg, jl, false, 2);
    /* a grey PNG and a progressive JPEG take other paths in the decoders */
    uint8_t *g = smooth_chw(24, 16, 1), *gpng;
    size_t gl;
    encode_png(g, 1, 16, 24, &gpng, &gl);
    fuzz_one("grey PNG", gpng, gl, true, 3);
    uint8_t *hwc = chw_to_hwc(chw, 24, 16, 3);
    tjhandle tj = tjInitCompress();
    assert_non_null(tj);
    unsigned char *prog = NULL;
    unsigned long prl = 0;
    assert_int_equal(tjCompress2(tj, hwc, 24, 0, 16, TJPF_RGB, &prog, &prl, TJSAMP_444, 85, TJFLAG_PROGRESSIVE), 0);
    tjDestroy(tj);
    fuzz_one("progressive JPEG", prog, prl, false, 4);
    tjFree(prog);
    free(hwc);
    free(g);
    free(gpng);
    free(noise);
    free(chw);
    free(png);
    free(jpg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resize_names),
        cmocka_unit_test(test_resize_equal_size_copies),
        cmocka_unit_test(test_resize_channel_conversion),
        cmocka_unit_test(test_resize_downscale_2x),
        cmocka_unit_test(test_resize_upscale_bilinear),
        cmocka_unit_test(test_resize_other_factors),
        cmocka_unit_test(test_resize_scratch_reuse),
        cmocka_unit_test(test_resize_crop),
        cmocka_unit_test(test_resize_fill),
        cmocka_unit_test(test_resize_half_crop),
        cmocka_unit_test(test_resize_same_aspect),
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_png_round_trip),
        cmocka_unit_test(test_decode_chw_mismatch),
        cmocka_unit_test(test_png_other_kinds),
        cmocka_unit_test(test_jpeg_round_trip),
        cmocka_unit_test(test_jpeg_scaled_decode),
        cmocka_unit_test(test_probe_header_only),
        cmocka_unit_test(test_corrupt_sequence),
        cmocka_unit_test(test_jpeg_warning_refused),
        cmocka_unit_test(test_forged_sizes_refused),
        cmocka_unit_test(test_fuzz_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
