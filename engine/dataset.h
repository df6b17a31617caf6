/* engine/dataset.h: the prepared-dataset format and the batch loader.
 *
 * A prepared dataset is a folder:
 *   header.json   {"format": 1, "classes": ["0", ...], "shape": [C, H, W],
 *                  "counts": {"train": N, "val": M, "test": T},
 *                  "mean": [per-channel mean, 0..255], "resize": "squash",
 *                  "encoding": "raw" | "png" | "jpeg", "source": "..."}
 *                 (a header without "encoding", from before issue 13, is raw)
 *   train.kds     one split: the images with their labels
 *   val.kds
 *   test.kds      when the source had a test split
 *
 * A .kds file is little-endian and starts with the same 24 bytes in both
 * versions:
 *   offset 0   8 bytes  magic "KILNDS\0" and the format version (1 or 2)
 *   offset 8   u32      count (images)
 *   offset 12  u16 c, u16 h, u16 w   (every image is c x h x w)
 *   offset 18  u16      encoding: version 1 has 0 (raw); version 2 has 1
 *                       (PNG) or 2 (JPEG), the DS_ENC_* values below
 *   offset 20  u32      reserved (0)
 *   offset 24  u16      labels[count], then zero padding to a multiple of 64
 * Version 1 (raw, memory-mappable, read without decoding):
 *   then       u8       images[count][c*h*w], packed CHW
 * Version 2 (encoded: each image a PNG or JPEG file of c x h x w, as
 * engine/image.h's img_encode_* wrote it):
 *   then       u64      offsets[count + 1]: where record i starts in the
 *                       record block (offsets[0] = 0, strictly increasing;
 *                       offsets[count] is the block's size), then zero
 *                       padding to a multiple of 64
 *   then       u8       records: image i is bytes offsets[i]..offsets[i+1]
 * Raw splits are written as version 1, so that an older kiln still reads
 * them; encoded ones as version 2. A reader refuses a file whose version,
 * encoding or size disagrees with its header, or whose offsets do not
 * increase to the end of the file.
 * Writers write to "<path>.tmp", fsync and rename, so a reader never sees half a file.
 */
#ifndef KILN_ENGINE_DATASET_H
#define KILN_ENGINE_DATASET_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdbool.h>

/* How a split stores its images; the values are the .kds header's. */
enum { DS_ENC_RAW, DS_ENC_PNG, DS_ENC_JPEG, DS_ENC_COUNT };

const char *ds_encoding_name(int encoding);           /* "raw", "png", "jpeg"; NULL out of range */
int ds_encoding_parse(const char *name, int *encoding);   /* 0, or -1 for an unknown name */

/* ---- reading a split ------------------------------------------------------ */

typedef struct ds_split ds_split;

/* Maps a .kds file read-only. Returns NULL with err set on a missing file, a bad
 * magic or version, or a size that does not match its header. */
ds_split *ds_split_open(const char *path, char *err, size_t errlen);
void ds_split_close(ds_split *s);               /* NULL is a no-op */
size_t ds_split_count(const ds_split *s);
void ds_split_shape(const ds_split *s, int *c, int *h, int *w);
/* Image i's c*h*w bytes in the mapping, for a raw split; NULL for an encoded one. */
const uint8_t *ds_split_image(const ds_split *s, size_t i);
int ds_split_label(const ds_split *s, size_t i);
/* Whether the split stores images compressed (PNG or JPEG records, format
 * version 2); ds_split_image is NULL for such a split. */
bool ds_split_encoded(const ds_split *s);
int ds_split_encoding(const ds_split *s);        /* DS_ENC_* */
struct img_decoder;
/* Image i as CHW pixels (c*h*w bytes) in chw, from either kind of split:
 * copied from a raw one, decoded from an encoded one with d (one per
 * thread; NULL: a decoder made for the call). Returns 0, or -1 with why
 * (a record that does not decode to c x h x w). */
int ds_split_read(const ds_split *s, size_t i, struct img_decoder *d, uint8_t *chw, char *why, size_t whylen);

/* ---- writing a split ------------------------------------------------------ */

typedef struct ds_writer ds_writer;

/* Starts "<path>.tmp". Images are buffered to a temporary file, labels in memory. */
ds_writer *ds_writer_open(const char *path, int c, int h, int w, char *err, size_t errlen);
/* The same for an encoded split: each image added as CHW pixels is stored
 * compressed as DS_ENC_PNG, or DS_ENC_JPEG of the given quality (1..100);
 * DS_ENC_RAW is ds_writer_open. Channels 1 or 3 (what the codecs hold). */
ds_writer *ds_writer_open_encoded(const char *path, int c, int h, int w, int encoding, int quality,
                                  char *err, size_t errlen);
/* Adds one image (c*h*w bytes, CHW) with its label (0..65535). Returns 0, or
 * -1 with err (a label out of range, a write or encode failure). */
int ds_writer_add(ds_writer *wr, const uint8_t *chw, int label, char *err, size_t errlen);
/* Announces, before the first ds_writer_add, that exactly count images will
 * be added: a raw split then writes them straight into place instead of
 * through its scratch file (one copy of the pixels less); adding another
 * number is an error at the add or the commit. No effect on an encoded
 * split. Returns 0, or -1 with err set. */
int ds_writer_expect(ds_writer *wr, size_t count, char *err, size_t errlen);
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
    int encoding;            /* DS_ENC_*: how the splits store images (0, raw, when absent) */
} ds_info;

/* Reads dir/header.json. Returns 0 or -1 with err set. Free with ds_info_free. */
int ds_info_load(const char *dir, ds_info *out, char *err, size_t errlen);
/* info as the header's JSON object (classes, shape, counts, mean, resize,
 * encoding), owned by the caller, or NULL when out of memory: header.json
 * and the store's record of a dataset both start from it. */
cJSON *ds_info_to_json(const ds_info *info);
/* Writes dir/header.json atomically. */
int ds_info_save(const char *dir, const ds_info *info, const char *source, char *err, size_t errlen);
void ds_info_free(ds_info *info);

/* ---- the loader ----------------------------------------------------------- */

/* Augmentation of a loader's images (all zero: none). The loader's output is
 * crop_h x crop_w (the stored h x w when 0):
 *   pad     the image is surrounded by pad black pixels (value 0, so they read
 *           -mean[c] * scale after the mean subtraction) on every side first;
 *   crop    training takes a window of crop_h x crop_w at a random position
 *           of the (padded) image, validation the centre one (which, with a
 *           crop of the stored size, is the image itself whatever the pad);
 *   mirror  training flips each image left to right with probability 1/2;
 *           validation never does.
 * CIFAR's augmentation is {0, 0, 4, true}: pad 4, crop back to 32 x 32, flip. */
typedef struct ds_augment {
    int crop_h, crop_w;      /* 0: the stored size; else 1..(stored size) */
    int pad;                 /* 0..DS_AUGMENT_PAD_MAX */
    bool mirror;
} ds_augment;

#define DS_AUGMENT_PAD_MAX 64
#define LOADER_THREADS_MAX 64

/* Checks aug against images of h x w: a crop larger than the image, or a pad
 * out of range, is refused with a message that names the field
 * ("augmentation.crop 40 is larger than the dataset's 32x32 images").
 * Returns 0 or -1 with err. */
int ds_augment_check(const ds_augment *aug, int h, int w, char *err, size_t errlen);

/* Batches in an epoch of count images at batch images a batch:
 * ceil(count / batch), or, with drop_last, floor(count / batch) so that no
 * batch is short; but a split smaller than one batch (count < batch) still
 * gives its one short batch, so that a small dataset trains. 0 for no images.
 * The runner's steps per epoch and jobs/jobcfg.c's step count both come
 * from here. */
size_t loader_batch_count(size_t count, int batch, bool drop_last);

/* Loader threads that fit this machine: min(online cores, 4), at least 1. */
int loader_default_threads(void);

typedef struct loader_opts {
    int batch;               /* images a batch, >= 1 */
    bool train;              /* training: each epoch's order shuffled, random
                              * crops and mirrors; else the file's order, centre
                              * crops, no mirror */
    bool drop_last;          /* leave out an epoch's last short batch (loader_batch_count) */
    uint64_t seed;           /* the order and the augmentation */
    const float *mean;       /* c values subtracted (pixel units); NULL: none */
    float scale;             /* after the subtraction */
    ds_augment aug;
    int threads;             /* decoding and augmenting threads; 0: loader_default_threads() */
} loader_opts;

typedef struct loader loader;

/* Batches from one split: images as floats (pixel - mean[c]) * scale in NCHW
 * of c x out_h x out_w (loader_shape), labels as int32. In training the
 * order of each epoch is a permutation drawn from seed and the epoch number,
 * and each image's crop position and mirror from (seed, epoch, its position
 * in the epoch), so runs repeat exactly: a batch's contents never depend on
 * the number of threads or on their timing. Batches are prepared ahead on
 * o->threads threads, each image by one of them (with its own image decoder
 * for an encoded split). s must outlive the loader. Returns NULL with err on
 * a bad option (ds_augment_check) or when out of memory. */
loader *loader_open(const ds_split *s, const loader_opts *o, char *err, size_t errlen);
void loader_close(loader *l);                     /* NULL is a no-op */
/* The shape of the loader's images: the crop (or the stored size). */
void loader_shape(const loader *l, int *c, int *h, int *w);
/* Batches in one epoch: loader_batch_count(count, batch, drop_last). */
size_t loader_batches(const loader *l);
int loader_threads(const loader *l);
/* Starts epoch `epoch` (0-based): reshuffles and rewinds. */
void loader_start_epoch(loader *l, int epoch);
/* Fills x (batch*c*h*w floats of loader_shape) and labels with the next
 * batch; returns the number of images in it, 0 at the end of the epoch, or
 * -1 when an image of an encoded split does not decode (loader_error says
 * which and why; the epoch cannot go on). loader_next, loader_next_view,
 * loader_release and loader_start_epoch are called from one thread (the
 * consumer). */
int loader_next(loader *l, float *x, int32_t *labels);
/* The next batch without the copy: *x and *labels point at the loader's own
 * buffers, holding what loader_next would have copied (the same images, in
 * the same order, for any number of threads). The consumer may read them
 * (not write) until it hands the batch back: loader_release, or its next
 * call of loader_next, loader_next_view or loader_start_epoch, each of which
 * hands back a batch still held; loader_close frees them. Returns as
 * loader_next, with *x and *labels NULL when it returns 0 or -1. While the
 * consumer holds a batch the threads fill one batch ahead instead of two, so
 * a consumer that holds it only to read or upload it loses nothing. */
int loader_next_view(loader *l, const float **x, const int32_t **labels);
/* Hands back the batch of the last loader_next_view; nothing when none is
 * held. */
void loader_release(loader *l);
/* Why loader_next last returned -1 ("" before it ever did). */
const char *loader_error(const loader *l);

#endif
