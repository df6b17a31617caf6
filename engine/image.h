/* engine/image.h: PNG and JPEG in and out, channel conversion and the resize
 * modes, one implementation for the importer (jobs/import.c), the loader of
 * an encoded dataset (engine/dataset.c) and the pictures the API serves
 * (samples, the mean image).
 *
 * Pixels cross this border as packed 8-bit arrays: "HWC" is row-major with
 * the channels of one pixel together (what the codecs give), "CHW" one plane
 * per channel (what a .kds record and the network hold). Channels are 1
 * (grey) or 3 (RGB). Grey from colour is (299 R + 587 G + 114 B + 500) / 1000.
 *
 * Every decode is independent of the one before it: a decoder keeps its
 * libjpeg-turbo handle between files for speed, but throws it away after a
 * failure (libjpeg-turbo keeps state in the handle after an error), and a
 * JPEG that libjpeg warns about (truncated, corrupt data) is refused, not
 * half-decoded. A decoder is used by one thread at a time.
 */
#ifndef KILN_ENGINE_IMAGE_H
#define KILN_ENGINE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMG_MAX_SIDE 16384                    /* decoded image side */
#define IMG_MAX_PIXELS ((uint64_t)64 << 20)   /* decoded image area */
#define IMG_SIGNATURE_BYTES 8                 /* img_signature looks at no more */

typedef enum img_format { IMG_NONE, IMG_PNG, IMG_JPEG } img_format;

/* The format by its first bytes. */
img_format img_signature(const uint8_t *buf, size_t len);

typedef struct img_decoder img_decoder;

img_decoder *img_decoder_new(void);           /* NULL when out of memory */
void img_decoder_free(img_decoder *d);        /* NULL is a no-op */

/* The header only: size and whether the image is grey. The size limits do
 * not apply (a census counts every size). Returns 0, or -1 with why. */
int img_probe(img_decoder *d, const uint8_t *buf, size_t len, int *w, int *h, bool *gray,
              char *why, size_t whylen);

/* Decodes buf to packed HWC with c channels (1 or 3), malloc'ed in *pix,
 * *w x *h. With min_w and min_h > 0 a JPEG is decoded at the smallest of
 * libjpeg's scaling factors (n/8) that keeps it at least min_w x min_h,
 * which skips most of the work when the target is much smaller; 0 decodes at
 * full size. Images beyond IMG_MAX_SIDE or IMG_MAX_PIXELS are refused.
 * Returns 0, or -1 with a reason in why ("bad JPEG: ...", "PNG of AxB pixels
 * is too large", "not a PNG or JPEG image") and *pix NULL. */
int img_decode(img_decoder *d, const uint8_t *buf, size_t len, int c, int min_w, int min_h,
               uint8_t **pix, int *w, int *h, char *why, size_t whylen);

/* ---- resizing ----------------------------------------------------------------- */

/* DIGITS' four ways to reach a size of another aspect ratio:
 *   squash     scale each axis on its own (the aspect ratio changes)
 *   crop       scale to cover the target, keeping the aspect, and cut the
 *              centre out
 *   fill       scale to fit inside the target, keeping the aspect, and fill
 *              the bands left over with noise
 *   half_crop  halfway between: scale to the aspect ratio halfway between the
 *              image's and the target's, cut half of the difference and fill
 *              the other half with noise */
typedef enum img_resize { IMG_SQUASH, IMG_CROP, IMG_FILL, IMG_HALF_CROP, IMG_RESIZE_COUNT } img_resize;

const char *img_resize_name(img_resize r);            /* "squash", ...; NULL out of range */
int img_resize_parse(const char *name, img_resize *r);   /* 0, or -1 for an unknown name */

/* Converts an HWC image of sc channels (1 or 3), sw x sh, to CHW with dc
 * channels, dw x dh, by mode. Downscaling averages over each output pixel's
 * footprint (a triangle filter as wide as the scale, like PIL's
 * antialiased bilinear), so a photo shrunk 4x does not alias; equal sizes
 * copy exactly. The noise of fill and half_crop is drawn from noise_seed, so
 * an import repeats. scratch is a caller-owned buffer grown as needed (may
 * start NULL/0; free it with free()). Returns 0, or -1 when out of memory. */
int img_resize_chw(const uint8_t *hwc, int sw, int sh, int sc, img_resize mode, uint64_t noise_seed,
                   uint8_t *chw, int dw, int dh, int dc, uint8_t **scratch, size_t *scratch_cap);

/* ---- encoding ------------------------------------------------------------------ */

/* Encodes a CHW image (c 1 or 3) as PNG, or as JPEG of quality 1..100 (4:2:0
 * for colour). *out is malloc'ed, *outlen its bytes. Returns 0, or -1 with why. */
int img_encode_png(const uint8_t *chw, int c, int h, int w, uint8_t **out, size_t *outlen,
                   char *why, size_t whylen);
int img_encode_jpeg(const uint8_t *chw, int c, int h, int w, int quality, uint8_t **out, size_t *outlen,
                    char *why, size_t whylen);

/* Decodes a stored image (PNG or JPEG, as img_encode_* wrote it) straight to
 * CHW of exactly c x h x w: what the loader of an encoded dataset does. A
 * different size or channel count is an error. Returns 0, or -1 with why. */
int img_decode_chw(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, uint8_t *chw,
                   char *why, size_t whylen);

/* The same decode into the caller's buffer, as packed pixels instead of
 * planes: pixel (x, y) channel k lands at pix[(y * w + x) * stride + k],
 * where stride is c, or 4 for a colour image (c 3) to have each pixel in 4
 * bytes (RGBX: the fourth byte is unspecified), which a consumer reads as
 * whole 32-bit words. The checks and the pixel values are img_decode_chw's
 * (the same libjpeg-turbo settings: its default, accurate DCT and smooth
 * chroma upsampling); a JPEG is read once and decoded straight into pix, with
 * no allocation. A PNG takes img_decode's path and one copy. pix holds
 * h * w * stride bytes; on an error its contents are unspecified. Returns 0,
 * or -1 with why (a stride other than c or, for colour, 4, is one). */
int img_decode_into(img_decoder *d, const uint8_t *buf, size_t len, int c, int h, int w, int stride,
                    uint8_t *pix, char *why, size_t whylen);

#endif
