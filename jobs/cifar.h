/* jobs/cifar.h: reading CIFAR-10 and CIFAR-100 binary batches (a pure
 * reader: no dataset is written).
 *
 * A source is a folder or the published archive (tar, plain or gzipped),
 * holding either layout:
 *
 *   CIFAR-10  (cifar-10-batches-bin/)   data_batch_1.bin .. data_batch_5.bin (train;
 *             any data_batch_<n>.bin), test_batch.bin (test), batches.meta.txt
 *   CIFAR-100 (cifar-100-binary/)       train.bin, test.bin, fine_label_names.txt,
 *             coarse_label_names.txt
 *
 * In a folder the files are looked for in the folder itself, else in its
 * subfolder cifar-10-batches-bin/ or cifar-100-binary/ (a CIFAR file that is
 * a symbolic link is refused: a link could lead out of the import roots the
 * caller checked the folder against); in an archive at any
 * depth, by their names (hidden entries and all other files are ignored; two
 * entries of one name are an error). A record is the label byte (CIFAR-10)
 * or the coarse then the fine label byte (CIFAR-100), then CIFAR_PIXELS
 * bytes: the red, green and blue 32x32 planes, rows top to bottom. Train
 * batches are required, the test batch optional.
 *
 * Classes come from the meta file (jobs/readers.h's class-names format:
 * batches.meta.txt, or for CIFAR-100 fine_label_names.txt by default and
 * coarse_label_names.txt on request); without it they are "0" .. the largest
 * label. cifar_open reads every batch through once and checks it all: a
 * batch whose length is not a whole number of records, and a label beyond
 * the class list, are errors naming the file. cifar_read then streams the
 * records, a block at a time (an archive is decompressed again).
 */
#ifndef KILN_JOBS_CIFAR_H
#define KILN_JOBS_CIFAR_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/readers.h"   /* reader_split */

#define CIFAR_SIDE 32
#define CIFAR_CHANNELS 3
#define CIFAR_PIXELS (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE)   /* 3,072 bytes, CHW */
#define CIFAR_MAX_BATCHES 64

typedef enum cifar_variant { CIFAR_10 = 10, CIFAR_100 = 100 } cifar_variant;

/* Which of a CIFAR-100 record's labels is the class (CIFAR-10 has one). */
typedef enum cifar_labels { CIFAR_LABELS_FINE, CIFAR_LABELS_COARSE } cifar_labels;

typedef struct cifar_source cifar_source;

/* Opens and checks the CIFAR batches at path (a folder or an archive; see
 * above). Returns a source owned by the caller (cifar_close), or NULL with
 * err set: the path missing or unreadable, not a tar archive, no training
 * batch, both layouts at once, a batch of the wrong length, a label beyond
 * the classes, a meta file that is not a class list. */
cifar_source *cifar_open(const char *path, cifar_labels labels, char *err, size_t errlen);
void cifar_close(cifar_source *s);                   /* NULL is a no-op */

cifar_variant cifar_kind(const cifar_source *s);
/* Records per split (0 for READER_TEST without a test batch). */
size_t cifar_count(const cifar_source *s, reader_split split);
/* The classes (1..256, or 0 with no records and no meta file); a name lives
 * as long as s, NULL for i out of range. */
int cifar_nclasses(const cifar_source *s);
const char *cifar_class_name(const cifar_source *s, int i);
/* The meta file the names came from ("batches.meta.txt", or its path in the
 * archive), or NULL where the classes are numbered. */
const char *cifar_names_file(const cifar_source *s);

/* One record, valid only during the callback. */
typedef struct cifar_image {
    reader_split split;
    size_t index;               /* 0-based within its split, in the order delivered */
    int label;                  /* 0 .. cifar_nclasses - 1 */
    const uint8_t *chw;         /* CIFAR_PIXELS bytes: R plane, G plane, B plane */
} cifar_image;

/* Called once per record. Returns 0 to go on, or -1 with err filled (the
 * reader's own err, errlen) to stop: cifar_read then returns -1 with it. */
typedef int (*cifar_image_fn)(void *arg, const cifar_image *im, char *err, size_t errlen);

/* Streams every record to fn. From a folder: the train batches in the order
 * of their numbers, then the test batch; from an archive: in the archive's
 * order (the splits may interleave). Returns 0, or -1 with err set when fn
 * stopped it or a batch no longer reads as cifar_open found it; fn may have
 * been called for some records before such an error. */
int cifar_read(cifar_source *s, cifar_image_fn fn, void *arg, char *err, size_t errlen);

#endif
