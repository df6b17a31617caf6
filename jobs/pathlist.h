/* jobs/pathlist.h: reading a `path label` list, DIGITS' form (a pure reader:
 * it opens no image).
 *
 * The list is text, one image a line: a path, whitespace, and a label, the
 * last whitespace-separated token (so a path may hold spaces). Spaces and
 * tabs around both are dropped, and a CR before the LF. Empty lines and
 * lines whose first non-blank character is '#' are ignored. A relative path
 * is joined to the folder of the list file (only joined: no ".." is removed
 * and no link followed; checking the result against the import roots is the
 * caller's); an absolute path is kept as it is.
 *
 * The label is a class index: into the labels file when one is given
 * (jobs/readers.h's class-names format), else the classes are "0" .. the
 * largest label found. A line without a label, with a label that is not a
 * whole number or out of range (0 .. classes - 1; without a labels file,
 * 0 .. READERS_MAX_CLASSES - 1), longer than PATHLIST_LINE_MAX or holding a
 * NUL byte is not fatal: it is delivered as a problem with its line number,
 * for the import report's "unreadable" count.
 *
 * pathlist_open reads the list once (for the counts and the classes);
 * pathlist_read reads it again line by line, so memory does not grow with
 * the list.
 */
#ifndef KILN_JOBS_PATHLIST_H
#define KILN_JOBS_PATHLIST_H

#include <stddef.h>

#include "jobs/readers.h"

#define PATHLIST_LINE_MAX 8192     /* bytes in one line, without its end */

typedef struct pathlist pathlist;

/* Opens the list at list_path and the optional labels file at labels_path
 * (NULL: classes numbered by the labels found). Returns a list owned by the
 * caller (pathlist_close), or NULL with err set: the list missing,
 * unreadable or not a regular file, or the labels file so, or not a class
 * list. Problem lines are not errors. */
pathlist *pathlist_open(const char *list_path, const char *labels_path, char *err, size_t errlen);
void pathlist_close(pathlist *l);                    /* NULL is a no-op */

/* From pathlist_open's reading: lines naming an image with a good label,
 * and problem lines. */
size_t pathlist_count(const pathlist *l);
size_t pathlist_problems(const pathlist *l);
/* The classes; a name lives as long as l, NULL for i out of range. Without
 * a labels file, 0 when no line has a good label. */
int pathlist_nclasses(const pathlist *l);
const char *pathlist_class_name(const pathlist *l, int i);

/* One line of the list, valid only during the callback. */
typedef struct pathlist_entry {
    unsigned long line;      /* 1-based line number in the list */
    const char *path;        /* the path resolved (see above); NULL where the line has none or it is too long */
    int label;               /* 0 .. pathlist_nclasses - 1; -1 with a problem */
    const char *problem;     /* NULL, or why the line is unreadable ("label 12 is out of range: ...") */
} pathlist_entry;

/* Called once per image line and once per problem line. Returns 0 to go
 * on, or -1 with err filled (the reader's own err, errlen) to stop:
 * pathlist_read then returns -1 with it. */
typedef int (*pathlist_entry_fn)(void *arg, const pathlist_entry *e, char *err, size_t errlen);

/* Delivers every line that is not empty or a comment to fn, in order.
 * Returns 0, or -1 with err set when fn stopped it or the list could not be
 * read. Labels are checked against the classes pathlist_open found. */
int pathlist_read(pathlist *l, pathlist_entry_fn fn, void *arg, char *err, size_t errlen);

#endif
