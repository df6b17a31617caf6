/* tests/fuzz/fuzz_archive.c: the archive importer (jobs/import_archive.c,
 * jobs/import.c): what an upload's archive goes through.
 *
 * Input: 4 bytes of import options (the target's width and height, 0 or
 * 1..16 each, both or neither; channels 0, 1 or 3; the resize mode; the
 * stored encoding; val and test percentages), then the archive file (tar,
 * zip, 7z, plain or gzip/bzip2/xz/zstd, as libarchive reads them for kiln).
 * It goes through the upload's check (import_probe), the loose-images reader
 * of classification (import_archive_files, every byte handed over touched),
 * and a whole import into a fresh dataset folder, capped at 256 entries and
 * 4 MB; a dataset the import writes must read back whole, labels in range.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/dataset.h"   /* ds_info_load, ds_split_open, ds_split_read */
#include "engine/image.h"     /* IMG_RESIZE_COUNT */
#include "jobs/import.h"      /* import_probe, import_archive_files, import_archive_reported */
#include "fuzz_util.h"

#define FUZZ_MAX_ENTRIES 256
#define FUZZ_MAX_BYTES (4u << 20)

static int on_file(void *ctx, const char *path, const uint8_t *buf, size_t len, const char *why, api_error *e)
{
    size_t *files = ctx;
    (*files)++;
    fuzz_touch(path, strlen(path));
    if (buf)
        fuzz_touch(buf, len);
    else if (!why || !*why)
        abort();                                 /* an unreadable entry says why */
    return 0;
}

static void read_split(const char *dir, const char *name, const ds_info *info, size_t count)
{
    char path[PATH_MAX], err[512];
    ds_split *s = ds_split_open(fuzz_path(path, dir, name), err, sizeof err);
    if (!s && count == 0)
        return;                                  /* no such split */
    if (!s || ds_split_count(s) != count) {
        fprintf(stderr, "%s of an import: %s\n", name, s ? "another count than header.json's" : err);
        abort();
    }
    uint8_t *chw = malloc((size_t)info->c * info->h * info->w);
    if (!chw)
        abort();
    for (size_t i = 0; i < count; i++) {
        int label = ds_split_label(s, i);
        if (label < 0 || label >= info->nclasses || ds_split_read(s, i, NULL, chw, err, sizeof err) != 0) {
            fprintf(stderr, "%s image %zu: label %d of %d, %s\n", name, i, label, info->nclasses, err);
            abort();
        }
    }
    free(chw);
    ds_split_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const char *root = fuzz_scratch();
    fuzz_empty(root);
    char archive[PATH_MAX], out[PATH_MAX], err[512];
    fuzz_write(fuzz_path(archive, root, "upload"), data + 4, size - 4);

    api_error e = { 0 };
    import_check_limits lim = { .max_bytes = FUZZ_MAX_BYTES, .max_seconds = 10, .stop = NULL };
    import_check found;
    fuzz_note("import_probe", import_probe(archive, &lim, &found, &e), e.message);
    size_t files = 0;
    fuzz_note("import_archive_files",
              import_archive_files(archive, FUZZ_MAX_ENTRIES, FUZZ_MAX_BYTES, on_file, &files, &e), e.message);

    import_opts o = IMPORT_OPTS_DEFAULT;
    int side = data[0] % 17;
    o.width = side;
    o.height = side ? data[1] % 16 + 1 : 0;
    o.channels = (int[]){ 0, 1, 3, 0 }[data[2] & 3];
    o.resize = (data[2] >> 2 & 3) % IMG_RESIZE_COUNT;
    o.encoding = (data[2] >> 4) % 3;             /* DS_ENC_RAW, _PNG, _JPEG */
    o.val_percent = data[3] % 4 * 10;
    o.test_percent = data[3] >> 2 & 1 ? 10 : 0;
    o.max_entries = FUZZ_MAX_ENTRIES;
    o.max_bytes = FUZZ_MAX_BYTES;
    if (mkdir(fuzz_path(out, root, "dataset"), 0700) != 0)
        fuzz_die(out);
    ds_info info;
    import_report rep;
    int rc = import_archive_reported(archive, out, &o, NULL, NULL, &info, &rep, err, sizeof err);
    import_report_free(&rep);
    fuzz_note("import_archive", rc, err);
    if (rc != 0)
        return 0;
    ds_info back;
    if (ds_info_load(out, &back, err, sizeof err) != 0) {
        fprintf(stderr, "header.json of an import does not read back: %s\n", err);
        abort();
    }
    read_split(out, "train.kds", &back, back.train_count);
    read_split(out, "val.kds", &back, back.val_count);
    read_split(out, "test.kds", &back, back.test_count);
    ds_info_free(&back);
    ds_info_free(&info);
    return 0;
}
