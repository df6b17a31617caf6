/* engine/dataset.h: the prepared-dataset format and the batch loader.
 *
 * A prepared dataset is a folder:
 *   header.json   {"format": 1, "classes": ["0", ...], "shape": [C, H, W],
 *                  "counts": {"train": N, "val": M}, "mean": [per-channel mean, 0..255],
 *                  "resize": "squash", "source": "..."}
 *   train.kds     one split: packed uint8 CHW images with labels, memory-mappable
 *   val.kds
 *
 * A .kds file is little-endian:
 *   offset 0   8 bytes  magic "KILNDS\0\1"  (the last byte is the format version)
 *   offset 8   u32      count (images)
 *   offset 12  u16 c, u16 h, u16 w, u16 reserved (0)
 *   offset 20  u32      reserved (0), header is 24 bytes
 *   offset 24  u16      labels[count], then zero padding to a multiple of 64
 *   then       u8       images[count][c*h*w]
 * Writers write to "<path>.tmp", fsync and rename, so a reader never sees half a file.
 */
#ifndef KILN_ENGINE_DATASET_H
#define KILN_ENGINE_DATASET_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdbool.h>

/* ---- reading a split ------------------------------------------------------ */

typedef struct ds_split ds_split;

/* Maps a .kds file read-only. Returns NULL with err set on a missing file, a bad
 * magic or version, or a size that does not match its header. */
ds_split *ds_split_open(const char *path, char *err, size_t errlen);
void ds_split_close(ds_split *s);               /* NULL is a no-op */
size_t ds_split_count(const ds_split *s);
void ds_split_shape(const ds_split *s, int *c, int *h, int *w);
const uint8_t *ds_split_image(const ds_split *s, size_t i);   /* c*h*w bytes */
int ds_split_label(const ds_split *s, size_t i);

/* ---- writing a split ------------------------------------------------------ */

typedef struct ds_writer ds_writer;

/* Starts "<path>.tmp". Images are buffered to a temporary file, labels in memory. */
ds_writer *ds_writer_open(const char *path, int c, int h, int w, char *err, size_t errlen);
int ds_writer_add(ds_writer *wr, const uint8_t *chw, int label, char *err, size_t errlen);
/* Writes the final file (header, labels, images), fsyncs and renames it into place;
 * frees wr in every case. */
int ds_writer_commit(ds_writer *wr, char *err, size_t errlen);
void ds_writer_abort(ds_writer *wr);            /* removes the temporary file, frees wr */

/* ---- the header ----------------------------------------------------------- */

typedef struct ds_info {
    int c, h, w;
    int nclasses;
    char **classes;          /* nclasses strdup'ed names */
    size_t train_count, val_count;
    size_t test_count;       /* test.kds, when the source had a test split; 0: none */
    float mean[4];           /* per channel, in pixel units 0..255 */
    char resize[16];         /* "squash", "crop", "fill", "half_crop" */
} ds_info;

/* Reads dir/header.json. Returns 0 or -1 with err set. Free with ds_info_free. */
int ds_info_load(const char *dir, ds_info *out, char *err, size_t errlen);
/* info as the header's JSON object (classes, shape, counts, mean, resize),
 * owned by the caller, or NULL when out of memory: header.json and the
 * store's record of a dataset both start from it. */
cJSON *ds_info_to_json(const ds_info *info);
/* Writes dir/header.json atomically. */
int ds_info_save(const char *dir, const ds_info *info, const char *source, char *err, size_t errlen);
void ds_info_free(ds_info *info);

/* ---- the loader ----------------------------------------------------------- */

typedef struct loader loader;

/* Batches from one split: images as floats (pixel - mean[c]) * scale in NCHW,
 * labels as int32. With shuffle, the order of each epoch is a permutation drawn
 * from seed and the epoch number, so runs repeat exactly. Batches are prepared
 * ahead on a background thread. mean may be NULL (no subtraction). */
loader *loader_open(const ds_split *s, int batch, bool shuffle, uint64_t seed,
                    const float *mean, float scale, char *err, size_t errlen);
void loader_close(loader *l);                     /* NULL is a no-op */
/* Batches in one epoch: ceil(count / batch); the last may be short. */
size_t loader_batches(const loader *l);
/* Starts epoch `epoch` (0-based): reshuffles and rewinds. */
void loader_start_epoch(loader *l, int epoch);
/* Fills x (batch*c*h*w floats) and labels with the next batch; returns the number
 * of images in it, 0 at the end of the epoch. */
int loader_next(loader *l, float *x, int32_t *labels);

#endif
