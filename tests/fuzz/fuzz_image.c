/* tests/fuzz/fuzz_image.c: PNG and JPEG decoding and the resize modes
 * (engine/image.c), as the importer, the loader of an encoded dataset and
 * the classify box use them.
 *
 * Input: 4 bytes that choose what the importer's options would (channels,
 * the target's width and height 1..64, the resize mode, whether the JPEG
 * may be decoded scaled), then the image file. One decoder lives across
 * inputs, as an import's does, so that the state a failure leaves behind is
 * exercised too. An image the probe says is over 4 Mpixel is only probed: a
 * fuzzer's time is better spent on many small images than on one big one
 * (the size limits themselves are img_decode's, checked before anything is
 * allocated, and the unit tests cover them).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/image.h"     /* img_probe, img_decode, img_resize_chw, img_decode_chw, img_decode_into */
#include "fuzz_util.h"

#define FUZZ_MAX_PIXELS (4u << 20)

static img_decoder *dec;
static uint8_t *scratch;
static size_t scratch_cap;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    if (!dec && !(dec = img_decoder_new()))
        abort();
    int c = data[0] & 1 ? 3 : 1;
    int dw = data[1] % 64 + 1, dh = data[2] % 64 + 1;
    img_resize mode = (img_resize)((data[3] & 0x7f) % IMG_RESIZE_COUNT);
    bool scaled = data[3] & 0x80;
    const uint8_t *buf = data + 4;
    size_t len = size - 4;
    (void)img_signature(buf, len);

    char why[256];
    int w, h;
    bool gray;
    if (img_probe(dec, buf, len, &w, &h, &gray, why, sizeof why) != 0 ||
        (uint64_t)w * (uint64_t)h > FUZZ_MAX_PIXELS)
        return 0;

    uint8_t *pix = NULL;
    int sw, sh;
    int rc = img_decode(dec, buf, len, c, scaled ? dw : 0, scaled ? dh : 0, &pix, &sw, &sh, why, sizeof why);
    fuzz_note("img_decode", rc, why);
    if (rc == 0) {
        uint8_t *chw = malloc((size_t)dw * dh * 3);
        if (!chw)
            abort();
        for (int dc = 1; dc <= 3; dc += 2)
            if (img_resize_chw(pix, sw, sh, c, mode, 7, chw, dw, dh, dc, &scratch, &scratch_cap) != 0)
                abort();                       /* out of memory for a few KB */
        free(chw);
        free(pix);
    }
    /* The encoded dataset's paths: straight to CHW, and packed into the caller's buffer. */
    size_t px = (size_t)w * (size_t)h;
    uint8_t *out = malloc(px * 4 + 1);
    if (!out)
        abort();
    (void)img_decode_chw(dec, buf, len, c, h, w, out, why, sizeof why);
    (void)img_decode_into(dec, buf, len, c, h, w, c == 3 ? 4 : 1, out, why, sizeof why);
    free(out);
    return 0;
}
