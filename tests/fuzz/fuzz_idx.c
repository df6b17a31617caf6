/* tests/fuzz/fuzz_idx.c: MNIST's IDX files (jobs/idx.c), a dataset source
 * a request names as {"type": "idx", "path": FOLDER}.
 *
 * Input: a flags byte, then up to four files separated by FUZZ_SEP lines:
 * train-images, train-labels, t10k-images, t10k-labels (fewer parts: the
 * later files are absent). Flag bit i names file i "<name>.gz" (its bytes
 * are then read through zlib: the seeds hold gzipped files). idx_open checks
 * the folder; idx_read streams every image, whose label must be in range.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "jobs/idx.h"
#include "fuzz_util.h"

static const char *const names[4] = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
};

static int on_image(void *arg, const idx_image *im, char *err, size_t errlen)
{
    const idx_source *s = arg;
    int w, h;
    idx_shape(s, &w, &h);
    if (im->label < 0 || im->label >= idx_nclasses(s) || im->w != w || im->h != h) {
        fprintf(stderr, "idx_read: image %zu has label %d of %d classes, %dx%d of %dx%d\n", im->index, im->label,
                idx_nclasses(s), im->w, im->h, w, h);
        abort();
    }
    fuzz_touch(im->pixels, (size_t)w * (size_t)h);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *dir = fuzz_scratch();
    fuzz_empty(dir);
    const uint8_t *part[4];
    size_t len[4];
    size_t n = fuzz_split(data + 1, size - 1, part, len, 4);
    for (size_t i = 0; i < n; i++) {
        char name[64], path[PATH_MAX];
        snprintf(name, sizeof name, "%s%s", names[i], data[0] >> i & 1 ? ".gz" : "");
        fuzz_write(fuzz_path(path, dir, name), part[i], len[i]);
    }
    char err[512];
    idx_source *s = idx_open(dir, err, sizeof err);
    fuzz_note("idx_open", s ? 0 : -1, err);
    if (!s)
        return 0;
    for (int i = 0; i < idx_nclasses(s); i++)
        if (!idx_class_name(s, i))
            abort();
    (void)idx_count(s, READER_TRAIN);
    (void)idx_count(s, READER_TEST);
    (void)idx_read(s, on_image, s, err, sizeof err);
    idx_close(s);
    return 0;
}
