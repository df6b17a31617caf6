/* engine/image.c: PNG (libspng) and JPEG (libjpeg-turbo) in and out, and the
 * resize modes (contract in engine/image.h).
 *
 * Resizing is one separable triangle filter whose radius is the scale when
 * shrinking (an average over each output pixel's footprint) and one source
 * pixel when growing (plain bilinear). It runs a destination row at a time:
 * the source rows under the row are summed into one float row, which is then
 * filtered along x into each channel's plane, so the memory is one source row
 * whatever the image's size. The four modes differ only in geometry: which
 * part of a virtually scaled image lands where in the destination, and what
 * is noise.
 */
#include "engine/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>
#include <turbojpeg.h>

#include "base/err.h"         /* set_err */
#include "engine/rng.h"       /* rng_splitmix64 */

img_format img_signature(const uint8_t *buf, size_t len) {
    static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0) return IMG_PNG;
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return IMG_JPEG;
    return IMG_NONE;
}

/* ---- decoding ------------------------------------------------------------------ */

struct img_decoder {
    tjhandle tj;             /* NULL until a JPEG is met, and after a failure */
};

img_decoder *img_decoder_new(void) { return calloc(1, sizeof(img_decoder)); }

void img_decoder_free(img_decoder *d) {
    if (!d) return;
    if (d->tj) tjDestroy(d->tj);
    free(d);
}

static bool too_large(uint64_t w, uint64_t h) {
    return w < 1 || h < 1 || w > IMG_MAX_SIDE || h > IMG_MAX_SIDE || w * h > IMG_MAX_PIXELS;
}

/* Reads a PNG's header; with pix, decodes it as c channels. */
static int png_read(const uint8_t *buf, size_t len, int c, uint8_t **pix, int *w, int *h, bool *gray,
                    char *why, size_t whylen) {
    int rc = -1, r;
    uint8_t *out = NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return set_err(why, whylen, "out of memory");
    if (pix) {
        spng_set_image_limits(ctx, IMG_MAX_SIDE, IMG_MAX_SIDE);
        spng_set_chunk_limits(ctx, 16u << 20, 64u << 20);
    }
    struct spng_ihdr ihdr;
    if ((r = spng_set_png_buffer(ctx, buf, len)) != 0 || (r = spng_get_ihdr(ctx, &ihdr)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    *w = (int)ihdr.width;
    *h = (int)ihdr.height;
    if (gray)
        *gray = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
                ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
    if (!pix) {
        rc = 0;
        goto out;
    }
    if (too_large(ihdr.width, ihdr.height)) {
        set_err(why, whylen, "PNG of %ux%u pixels is too large", ihdr.width, ihdr.height);
        goto out;
    }
    /* spng gives grey (G8) only for grey images; anything else decodes as RGB8. */
    bool is_g8 = c == 1 && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 8;
    int fmt = is_g8 ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    size_t size;
    if ((r = spng_decoded_image_size(ctx, fmt, &size)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    if (!(out = malloc(size))) {
        set_err(why, whylen, "out of memory");
        goto out;
    }
    if ((r = spng_decode_image(ctx, out, size, fmt, 0)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    if (c == 1 && !is_g8) {                       /* RGB to grey, in place */
        size_t n = (size_t)*w * (size_t)*h;
        for (size_t i = 0; i < n; i++)
            out[i] = (uint8_t)((299u * out[3 * i] + 587u * out[3 * i + 1] + 114u * out[3 * i + 2] + 500u) / 1000u);
    }
    *pix = out;
    out = NULL;
    rc = 0;
out:
    free(out);
    spng_ctx_free(ctx);
    return rc;
}

/* libjpeg-turbo 2.1 keeps state in its handle after a failed or warned-about
 * decode (a truncated file left the next file's header read as 165246019x32696
 * pixels), so a failure throws the handle away: each file is decoded on its own. */
static int jpeg_fail(img_decoder *d, char *why, size_t whylen) {
    set_err(why, whylen, "bad JPEG: %s", d->tj ? tjGetErrorStr2(d->tj) : "no decoder");
    if (d->tj) tjDestroy(d->tj);
    d->tj = NULL;
    return -1;
}

static int jpeg_header(img_decoder *d, const uint8_t *buf, size_t len, int *w, int *h, bool *gray,
                       char *why, size_t whylen) {
    if (!d->tj && !(d->tj = tjInitDecompress())) return set_err(why, whylen, "cannot start the JPEG decoder");
    int subsamp = -1, cs = -1;
    *w = *h = 0;
    if (tjDecompressHeader3(d->tj, buf, (unsigned long)len, w, h, &subsamp, &cs) != 0)
        return jpeg_fail(d, why, whylen);
    /* libjpeg-turbo 2.1 answers 0 for a stream of tables without an image,
     * leaving the size unset */
    if (*w <= 0 || *h <= 0 || *w > 65535 || *h > 65535 || cs < 0) {
        *w = *h = 0;
        return set_err(why, whylen, "bad JPEG: no image in the file (tables only, or a damaged header)");
    }
    if (gray) *gray = cs == TJCS_GRAY;
    return 0;
}

/* The smallest of libjpeg's scaling factors that keeps w x h at least
 * min_w x min_h (1/1 when none does, or no minimum is given). */
static tjscalingfactor jpeg_scale(int w, int h, int min_w, int min_h) {
    tjscalingfactor best = { 1, 1 };
    if (min_w <= 0 || min_h <= 0) return best;
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        if (sf[i].num > sf[i].denom) continue;               /* never enlarge */
        int sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
        if (sw >= min_w && sh >= min_h && sw < TJSCALED(w, best)) best = sf[i];
    }
    return best;
}

static int jpeg_decode(img_decoder *d, const uint8_t *buf, size_t len, int c, int min_w, int min_h,
                       uint8_t **pix, int *w, int *h, char *why, size_t whylen) {
    int jw, jh;
    if (jpeg_header(d, buf, len, &jw, &jh, NULL, why, whylen) != 0) return -1;
    if (too_large((uint64_t)(jw > 0 ? jw : 0), (uint64_t)(jh > 0 ? jh : 0)))
        return set_err(why, whylen, "JPEG of %dx%d pixels is too large", jw, jh);
    tjscalingfactor sf = jpeg_scale(jw, jh, min_w, min_h);
    int ow = TJSCALED(jw, sf), oh = TJSCALED(jh, sf);
    uint8_t *out = malloc((size_t)ow * (size_t)oh * (size_t)c);
    if (!out) return set_err(why, whylen, "out of memory");
    /* A warning means libjpeg made up part of the image (a premature end fills
     * the rest with grey; corrupt data is skipped): not an image to train on. */
    if (tjDecompress2(d->tj, buf, (unsigned long)len, out, ow, 0, oh, c == 1 ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_STOPONWARNING) != 0) {
        free(out);
        return jpeg_fail(d, why, whylen);
    }
    *pix = out;
    *w = ow;
    *h = oh;
    return 0;
}

int img_probe(img_decoder *d, const uint8_t *buf, size_t len, int *w, int *h, bool *gray,
              char *why, size_t whylen) {
    switch (img_signature(buf, len)) {
    case IMG_PNG: return png_read(buf, len, 1, NULL, w, h, gray, why, whylen);
    case IMG_JPEG: return jpeg_header(d, buf, len, w, h, gray, why, whylen);
    case IMG_NONE: break;
    }
    return set_err(why, whylen, "not a PNG or JPEG image");
}

int img_decode(img_decoder *d, const uint8_t *buf, size_t len, int c, int min_w, int min_h,
               uint8_t **pix, int *w, int *h, char *why, size_t whylen) {
    *pix = NULL;
    if (c != 1 && c != 3) return set_err(why, whylen, "cannot decode to %d channels", c);
    switch (img_signature(buf, len)) {
    case IMG_PNG: return png_read(buf, len, c, pix, w, h, NULL, why, whylen);
    case IMG_JPEG: return jpeg_decode(d, buf, len, c, min_w, min_h, pix, w, h, why, whylen);
    case IMG_NONE: break;
    }
    return set_err(why, whylen, "not a PNG or JPEG image");
}

/* ---- resizing ------------------------------------------------------------------ */

static const char *const resize_names[IMG_RESIZE_COUNT] = {
    [IMG_SQUASH] = "squash", [IMG_CROP] = "crop", [IMG_FILL] = "fill", [IMG_HALF_CROP] = "half_crop",
};

const char *img_resize_name(img_resize r) {
    return (unsigned)r < IMG_RESIZE_COUNT ? resize_names[r] : NULL;
}

int img_resize_parse(const char *name, img_resize *r) {
    for (int i = 0; name && i < IMG_RESIZE_COUNT; i++)
        if (!strcmp(name, resize_names[i])) {
            *r = (img_resize)i;
            return 0;
        }
    return -1;
}

/* Where the scaled image lands: the source is scaled to rw x rh (virtually),
 * and its part starting at (cx, cy) fills the destination's rectangle of
 * vw x vh at (ox, oy); the rest of the destination is noise. */
typedef struct geometry {
    int rw, rh;
    int cx, cy;
    int ox, oy, vw, vh;
} geometry;

static int iround(double v) { return (int)lround(v); }

/* DIGITS' arithmetic (digits/utils/image.py, resize_image), so that a
 * dataset made in either tool has the same geometry. */
static geometry plan(int sw, int sh, int dw, int dh, img_resize mode) {
    geometry g = { dw, dh, 0, 0, 0, 0, dw, dh };
    double wr = (double)sw / dw, hr = (double)sh / dh;
    switch (mode) {
    case IMG_SQUASH:
    case IMG_RESIZE_COUNT:
        return g;
    case IMG_CROP:
        if (wr > hr) {
            g.rh = dh;
            g.rw = iround(sw / hr);
        } else {
            g.rw = dw;
            g.rh = iround(sh / wr);
        }
        break;
    case IMG_FILL:
        if (wr > hr) {
            g.rw = dw;
            g.rh = iround(sh / wr);
            if ((dh - g.rh) % 2) g.rh++;
        } else {
            g.rh = dh;
            g.rw = iround(sw / hr);
            if ((dw - g.rw) % 2) g.rw++;
        }
        break;
    case IMG_HALF_CROP: {
        double nr = (wr + hr) / 2;
        g.rw = iround(sw / nr);
        g.rh = iround(sh / nr);
        if (wr > hr && (dh - g.rh) % 2) g.rh++;
        else if (wr < hr && (dw - g.rw) % 2) g.rw++;
        break;
    }
    }
    if (g.rw < 1) g.rw = 1;
    if (g.rh < 1) g.rh = 1;
    /* the longer side is cut in the middle, the shorter one centred in noise */
    if (g.rw >= dw) g.cx = iround((g.rw - dw) / 2.0), g.vw = dw;
    else g.ox = (dw - g.rw) / 2, g.vw = g.rw;
    if (g.rh >= dh) g.cy = iround((g.rh - dh) / 2.0), g.vh = dh;
    else g.oy = (dh - g.rh) / 2, g.vh = g.rh;
    if (g.cx + g.vw > g.rw) g.cx = g.rw - g.vw;
    if (g.cy + g.vh > g.rh) g.cy = g.rh - g.vh;
    return g;
}

/* One axis' filter: for output i (of n), taps first[i] .. first[i]+ntaps[i]-1
 * of the source with weights w[i*maxtaps ..]. */
typedef struct taps {
    int *first, *count;
    float *w;
    int max;
} taps;

static void taps_free(taps *t) {
    free(t->first);
    free(t->count);
    free(t->w);
}

/* Output i samples the scaled image at position start + i, the scaled image
 * being the source (len pixels) scaled by len / scaled_len. */
static int taps_make(taps *t, int n, int len, int scaled_len, int start) {
    double scale = (double)len / scaled_len;
    double support = scale > 1 ? scale : 1;
    t->max = (int)ceil(support) * 2 + 1;
    t->first = malloc((size_t)n * sizeof *t->first);
    t->count = malloc((size_t)n * sizeof *t->count);
    t->w = malloc((size_t)n * (size_t)t->max * sizeof *t->w);
    if (!t->first || !t->count || !t->w) return -1;
    for (int i = 0; i < n; i++) {
        double centre = (start + i + 0.5) * scale;
        int lo = (int)floor(centre - support), hi = (int)ceil(centre + support);
        if (lo < 0) lo = 0;
        if (hi > len) hi = len;
        float *w = t->w + (size_t)i * (size_t)t->max;
        double sum = 0;
        int k = 0, first = -1;
        for (int j = lo; j < hi && k < t->max; j++) {
            double v = 1 - fabs((j + 0.5 - centre) / support);
            if (v <= 0) continue;
            if (first < 0) first = j;
            w[j - first] = (float)v;     /* the window is contiguous: weights fall off from the centre */
            k = j - first + 1;
            sum += v;
        }
        if (first < 0) {                 /* centre beyond the edge: the nearest pixel */
            first = centre < 0 ? 0 : len - 1;
            w[0] = 1;
            k = 1;
            sum = 1;
        }
        for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sum);
        t->first[i] = first;
        t->count[i] = k;
    }
    return 0;
}

static uint8_t clamp_u8(float v) {
    v += 0.5f;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    uint8_t *nb = realloc(*buf, need);
    if (!nb) return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

int img_resize_chw(const uint8_t *hwc, int sw, int sh, int sc, img_resize mode, uint64_t noise_seed,
                   uint8_t *chw, int dw, int dh, int dc, uint8_t **scratch, size_t *scratch_cap) {
    size_t dplane = (size_t)dw * (size_t)dh;
    /* colour to grey first, with the integer weights every path uses */
    size_t spx = (size_t)sw * (size_t)sh;
    const uint8_t *src = hwc;
    int c = sc;
    size_t row_floats = (size_t)sw * (size_t)(sc == 3 && dc == 1 ? 1 : sc);
    size_t grey_bytes = sc == 3 && dc == 1 ? (spx + 63) / 64 * 64 : 0;   /* the float row stays aligned */
    if (grow(scratch, scratch_cap, grey_bytes + row_floats * sizeof(float)) != 0) return -1;
    if (sc == 3 && dc == 1) {
        uint8_t *g = *scratch;
        for (size_t i = 0; i < spx; i++)
            g[i] = (uint8_t)((299u * hwc[3 * i] + 587u * hwc[3 * i + 1] + 114u * hwc[3 * i + 2] + 500u) / 1000u);
        src = g;
        c = 1;
    }
    float *row = (float *)(void *)(*scratch + grey_bytes);
    geometry g = plan(sw, sh, dw, dh, mode);
    if (g.vw < dw || g.vh < dh) {                  /* the noise bands of fill and half_crop */
        uint64_t st = noise_seed;
        for (size_t i = 0; i < dplane * (size_t)dc; i++) chw[i] = (uint8_t)(rng_splitmix64(&st) >> 56);
    }
    taps tx = { 0 }, ty = { 0 };
    int rc = -1;
    if (taps_make(&tx, g.vw, sw, g.rw, g.cx) != 0 || taps_make(&ty, g.vh, sh, g.rh, g.cy) != 0) goto out;
    for (int y = 0; y < g.vh; y++) {
        const float *wy = ty.w + (size_t)y * (size_t)ty.max;
        size_t rn = (size_t)sw * (size_t)c;
        /* the source rows under this row, summed (a loop the compiler vectorises) */
        const uint8_t *s0 = src + (size_t)ty.first[y] * rn;
        float w0 = wy[0];
        for (size_t i = 0; i < rn; i++) row[i] = w0 * (float)s0[i];
        for (int k = 1; k < ty.count[y]; k++) {
            const uint8_t *sr = src + (size_t)(ty.first[y] + k) * rn;
            float wk = wy[k];
            for (size_t i = 0; i < rn; i++) row[i] += wk * (float)sr[i];
        }
        /* then along x, each channel to its plane */
        size_t drow = (size_t)(g.oy + y) * (size_t)dw + (size_t)g.ox;
        uint8_t *d0 = chw + drow, *d1 = d0 + dplane, *d2 = d1 + dplane;
        for (int x = 0; x < g.vw; x++) {
            const float *wx = tx.w + (size_t)x * (size_t)tx.max;
            const float *sp = row + (size_t)tx.first[x] * (size_t)c;
            int nk = tx.count[x];
            if (c == 3) {
                float r = 0, gg = 0, b = 0;
                for (int k = 0; k < nk; k++, sp += 3) {
                    r += wx[k] * sp[0];
                    gg += wx[k] * sp[1];
                    b += wx[k] * sp[2];
                }
                d0[x] = clamp_u8(r);
                d1[x] = clamp_u8(gg);
                d2[x] = clamp_u8(b);
            } else {
                float v = 0;
                for (int k = 0; k < nk; k++) v += wx[k] * sp[k];
                d0[x] = clamp_u8(v);
            }
        }
    }
    if (c == 1 && dc == 3) {                       /* grey to colour: the same plane three times */
        for (int y = 0; y < g.vh; y++) {
            size_t at = (size_t)(g.oy + y) * (size_t)dw + (size_t)g.ox;
            memcpy(chw + dplane + at, chw + at, (size_t)g.vw);
            memcpy(chw + 2 * dplane + at, chw + at, (size_t)g.vw);
        }
    }
    rc = 0;
out:
    taps_free(&tx);
    taps_free(&ty);
    return rc;
}

/* ---- encoding ------------------------------------------------------------------ */

/* CHW to HWC in a new buffer. */
static uint8_t *to_hwc(const uint8_t *chw, int c, int h, int w) {
    size_t hw = (size_t)h * (size_t)w;
    uint8_t *out = malloc(hw * (size_t)c);
    if (!out) return NULL;
    for (int ch = 0; ch < c; ch++)
        for (size_t i = 0; i < hw; i++) out[i * (size_t)c + (size_t)ch] = chw[(size_t)ch * hw + i];
    return out;
}

int img_encode_png(const uint8_t *chw, int c, int h, int w, uint8_t **out, size_t *outlen,
                   char *why, size_t whylen) {
    *out = NULL;
    *outlen = 0;
    if ((c != 1 && c != 3) || h < 1 || w < 1) return set_err(why, whylen, "cannot encode a %dx%dx%d image", c, h, w);
    uint8_t *hwc = c == 1 ? NULL : to_hwc(chw, c, h, w);
    if (c == 3 && !hwc) return set_err(why, whylen, "out of memory");
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    int rc = -1, r;
    if (!ctx) {
        set_err(why, whylen, "out of memory");
        goto out;
    }
    spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ihdr = { .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8,
                              .color_type = c == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR };
    size_t n = (size_t)c * (size_t)h * (size_t)w;
    if ((r = spng_set_ihdr(ctx, &ihdr)) != 0 ||
        (r = spng_encode_image(ctx, c == 1 ? chw : hwc, n, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE)) != 0) {
        set_err(why, whylen, "encoding PNG: %s", spng_strerror(r));
        goto out;
    }
    size_t len = 0;
    void *png = spng_get_png_buffer(ctx, &len, &r);
    if (!png) {
        set_err(why, whylen, "encoding PNG: %s", spng_strerror(r));
        goto out;
    }
    *out = png;
    *outlen = len;
    rc = 0;
out:
    spng_ctx_free(ctx);
    free(hwc);
    return rc;
}

int img_encode_jpeg(const uint8_t *chw, int c, int h, int w, int quality, uint8_t **out, size_t *outlen,
                    char *why, size_t whylen) {
    *out = NULL;
    *outlen = 0;
    if ((c != 1 && c != 3) || h < 1 || w < 1 || quality < 1 || quality > 100)
        return set_err(why, whylen, "cannot encode a %dx%dx%d image at quality %d", c, h, w, quality);
    uint8_t *hwc = c == 1 ? NULL : to_hwc(chw, c, h, w);
    if (c == 3 && !hwc) return set_err(why, whylen, "out of memory");
    tjhandle tj = tjInitCompress();
    int rc = -1;
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    if (!tj) {
        set_err(why, whylen, "cannot start the JPEG encoder");
        goto out;
    }
    if (tjCompress2(tj, c == 1 ? chw : hwc, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg, &len,
                    c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0) != 0) {
        set_err(why, whylen, "encoding JPEG: %s", tjGetErrorStr2(tj));
        goto out;
    }
    /* tjAlloc'ed, which is malloc: the caller frees it with free() */
    *out = jpeg;
    *outlen = len;
    jpeg = NULL;
    rc = 0;
out:
    if (jpeg) tjFree(jpeg);
    if (tj) tjDestroy(tj);
    free(hwc);
    return rc;
}

/* A stored image, decoded exactly as stored: c channels (no conversion of a
 * colour record to grey or back), h x w. *pix is malloc'ed HWC. */
static int decode_stored(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, uint8_t **pix,
                         char *why, size_t whylen) {
    int iw = 0, ih = 0;
    bool gray = false;
    *pix = NULL;
    if (img_probe(d, buf, len, &iw, &ih, &gray, why, whylen) != 0) return -1;
    if ((gray ? 1 : 3) != c)
        return set_err(why, whylen, "stored image has %d channels, expected %d", gray ? 1 : 3, c);
    if (img_decode(d, buf, len, c, 0, 0, pix, &iw, &ih, why, whylen) != 0) return -1;
    if (iw != w || ih != h) {
        free(*pix);
        *pix = NULL;
        return set_err(why, whylen, "stored image is %dx%d, expected %dx%d", iw, ih, w, h);
    }
    return 0;
}

int img_decode_chw(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, uint8_t *chw,
                   char *why, size_t whylen) {
    uint8_t *pix;
    if (decode_stored(d, buf, len, c, h, w, &pix, why, whylen) != 0) return -1;
    size_t hw = (size_t)h * (size_t)w;
    if (c == 1) {
        memcpy(chw, pix, hw);
    } else {
        for (size_t i = 0; i < hw; i++)
            for (int ch = 0; ch < 3; ch++) chw[(size_t)ch * hw + i] = pix[3 * i + (size_t)ch];
    }
    free(pix);
    return 0;
}

/* A stored JPEG straight into pix: one header read, the checks of
 * img_decode_chw (channels as stored, the exact size, the limits), and
 * tjDecompress2 with img_decode's flags. */
static int jpeg_decode_into(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, int stride,
                            uint8_t *pix, char *why, size_t whylen) {
    int jw, jh;
    bool gray = false;
    if (jpeg_header(d, buf, len, &jw, &jh, &gray, why, whylen) != 0) return -1;
    if ((gray ? 1 : 3) != c)
        return set_err(why, whylen, "stored image has %d channels, expected %d", gray ? 1 : 3, c);
    if (too_large((uint64_t)(jw > 0 ? jw : 0), (uint64_t)(jh > 0 ? jh : 0)))
        return set_err(why, whylen, "JPEG of %dx%d pixels is too large", jw, jh);
    if (jw != w || jh != h) return set_err(why, whylen, "stored image is %dx%d, expected %dx%d", jw, jh, w, h);
    int fmt = c == 1 ? TJPF_GRAY : stride == 4 ? TJPF_RGBX : TJPF_RGB;
    if (tjDecompress2(d->tj, buf, (unsigned long)len, pix, w, w * stride, h, fmt, TJFLAG_STOPONWARNING) != 0)
        return jpeg_fail(d, why, whylen);
    return 0;
}

int img_decode_into(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, int stride,
                    uint8_t *pix, char *why, size_t whylen) {
    if ((c != 1 && c != 3) || (stride != c && !(c == 3 && stride == 4)))
        return set_err(why, whylen, "cannot decode to %d channels %d bytes apart", c, stride);
    if (img_signature(buf, len) == IMG_JPEG)
        return jpeg_decode_into(d, buf, len, c, h, w, stride, pix, why, whylen);
    /* a PNG (or not an image): img_decode_chw's checks */
    uint8_t *dec;
    if (decode_stored(d, buf, len, c, h, w, &dec, why, whylen) != 0) return -1;
    size_t hw = (size_t)h * (size_t)w;
    if (stride == c) {
        memcpy(pix, dec, hw * (size_t)c);
    } else {
        for (size_t i = 0; i < hw; i++) {
            memcpy(pix + 4 * i, dec + 3 * i, 3);
            pix[4 * i + 3] = 0;
        }
    }
    free(dec);
    return 0;
}
