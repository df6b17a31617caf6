/* tests/fuzz/fuzz_cifar.c: CIFAR-10 and CIFAR-100 binary batches
 * (jobs/cifar.c), a dataset source given as a folder or as the published
 * archive.
 *
 * Input: a flags byte, then the files separated by FUZZ_SEP lines.
 *   bit 0 set: the one part is an archive (cifar.tar.gz; libarchive reads
 *              tar, plain or gzipped) and the source is that file;
 *   else:      the parts are, in order, data_batch_1.bin, test_batch.bin,
 *              batches.meta.txt, train.bin, test.bin, fine_label_names.txt,
 *              coarse_label_names.txt (an empty part: the file is absent),
 *              in the folder itself or, with bit 2, in its
 *              cifar-10-batches-bin/ subfolder.
 *   bit 1:     CIFAR-100's coarse labels.
 * cifar_open checks the source; cifar_read streams every record, whose label
 * must be in range.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "jobs/cifar.h"
#include "fuzz_util.h"

static const char *const names[] = {
    "data_batch_1.bin", "test_batch.bin", "batches.meta.txt", "train.bin", "test.bin",
    "fine_label_names.txt", "coarse_label_names.txt",
};
#define NFILES (sizeof names / sizeof names[0])

static int on_record(void *arg, const cifar_image *im, char *err, size_t errlen)
{
    const cifar_source *s = arg;
    if (im->label < 0 || im->label >= cifar_nclasses(s) || !cifar_class_name(s, im->label)) {
        fprintf(stderr, "cifar_read: record %zu has label %d of %d classes\n", im->index, im->label,
                cifar_nclasses(s));
        abort();
    }
    fuzz_touch(im->chw, CIFAR_PIXELS);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *dir = fuzz_scratch();
    fuzz_empty(dir);
    char src[PATH_MAX];
    if (data[0] & 1) {
        fuzz_write(fuzz_path(src, dir, "cifar.tar.gz"), data + 1, size - 1);
    } else {
        const uint8_t *part[NFILES];
        size_t len[NFILES];
        size_t n = fuzz_split(data + 1, size - 1, part, len, NFILES);
        char sub[PATH_MAX];
        snprintf(src, sizeof src, "%s", dir);
        if (data[0] & 4) {
            fuzz_path(sub, dir, "cifar-10-batches-bin");
            if (mkdir(sub, 0700) != 0)
                fuzz_die(sub);
        } else {
            snprintf(sub, sizeof sub, "%s", dir);
        }
        for (size_t i = 0; i < n; i++) {
            char path[PATH_MAX];
            if (len[i])
                fuzz_write(fuzz_path(path, sub, names[i]), part[i], len[i]);
        }
    }
    char err[512];
    cifar_source *s = cifar_open(src, data[0] & 2 ? CIFAR_LABELS_COARSE : CIFAR_LABELS_FINE, err, sizeof err);
    fuzz_note("cifar_open", s ? 0 : -1, err);
    if (!s)
        return 0;
    (void)cifar_kind(s);
    (void)cifar_names_file(s);
    (void)cifar_count(s, READER_TRAIN);
    (void)cifar_count(s, READER_TEST);
    (void)cifar_read(s, on_record, s, err, sizeof err);
    cifar_close(s);
    return 0;
}
