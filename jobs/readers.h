/* jobs/readers.h: what the dataset source readers (jobs/idx.h, jobs/cifar.h,
 * jobs/pathlist.h) share: the split an image comes from, the class-name
 * list and its one file format, and counts written for people.
 *
 * A class-names file (CIFAR's batches.meta.txt, fine_label_names.txt and
 * coarse_label_names.txt; a `path label` list's labels file) is text with
 * one name per line: a CR before the LF and spaces or tabs around a name are
 * dropped, empty lines are ignored, and line i of what is left names class
 * i. A name is UTF-8 without control characters, at most READERS_NAME_MAX
 * bytes, and no two are the same.
 */
#ifndef KILN_JOBS_READERS_H
#define KILN_JOBS_READERS_H

#include <stddef.h>
#include <stdint.h>

/* A prepared dataset's labels are u16 (engine/dataset.h); the importer
 * takes at most this many classes. */
#define READERS_MAX_CLASSES 65535
#define READERS_NAME_MAX 255                 /* bytes in one class name */
#define READERS_NAMES_FILE_MAX (16u << 20)   /* bytes in a class-names file */

/* The split a source puts an image in (sources with a validation split of
 * their own have none here: the importer draws val from train). */
typedef enum reader_split { READER_TRAIN, READER_TEST } reader_split;

typedef struct class_names {
    int n;
    char **name;     /* n names, owned (class_names_free) */
} class_names;

/* What is wrong with s[0..n) as a class name, or NULL when it may be one:
 * empty, longer than READERS_NAME_MAX bytes, or a control character (which
 * would break labels.txt's one name a line). UTF-8 is the caller's. The one
 * rule for every source: a names file, an archive's or folder's class
 * folders. */
const char *readers_class_name_problem(const char *s, size_t n);

/* Parses the text of a class-names file (len bytes, need not be
 * NUL-terminated) into c, at most max names. file is the name errors give
 * ("batches.meta.txt"). Returns 0, or -1 with err set and c empty: not text
 * (a NUL byte), a name too long, not UTF-8 or with a control character, a
 * name repeated, no names, more than max. */
int class_names_parse(class_names *c, const char *text, size_t len, const char *file, int max,
                      char *err, size_t errlen);
/* class_names_parse of the file at path (a regular file of at most
 * READERS_NAMES_FILE_MAX bytes); errors name it as file. */
int class_names_load(class_names *c, const char *path, const char *file, int max, char *err, size_t errlen);
/* n classes named "0", "1", ... (n may be 0). Returns 0, or -1 with err. */
int class_names_numbered(class_names *c, int n, char *err, size_t errlen);
void class_names_free(class_names *c);   /* what c owns; c is left empty */

/* n with a comma every three digits ("60,000"), in buf; returns buf. */
const char *readers_grouped(char buf[32], uint64_t n);

#endif
