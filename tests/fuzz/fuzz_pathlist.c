/* tests/fuzz/fuzz_pathlist.c: a `path label` list and its labels file
 * (jobs/pathlist.c, and jobs/readers.c's class-names format), DIGITS' form
 * of a dataset source.
 *
 * Input: the list, then optionally FUZZ_SEP and the labels file (one class
 * name a line). pathlist_open reads both; pathlist_read delivers every line,
 * each with a label in range or a problem, never both.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/pathlist.h"
#include "jobs/readers.h"     /* class_names_parse */
#include "fuzz_util.h"

static int on_entry(void *arg, const pathlist_entry *e, char *err, size_t errlen)
{
    const pathlist *l = arg;
    bool good = e->label >= 0 && e->label < pathlist_nclasses(l) && e->path && !e->problem;
    bool problem = e->label == -1 && e->problem;
    if (!good && !problem) {
        fprintf(stderr, "pathlist_read: line %lu: label %d of %d, path %s, problem %s\n", e->line, e->label,
                pathlist_nclasses(l), e->path ? e->path : "(none)", e->problem ? e->problem : "(none)");
        abort();
    }
    if (e->path)
        (void)strlen(e->path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_scratch();
    const uint8_t *part[2];
    size_t len[2];
    size_t n = fuzz_split(data, size, part, len, 2);
    char list[PATH_MAX], labels[PATH_MAX], err[512];
    fuzz_write(fuzz_path(list, dir, "list.txt"), part[0], len[0]);
    if (n > 1)
        fuzz_write(fuzz_path(labels, dir, "labels.txt"), part[1], len[1]);

    /* The class-names parser on its own, on the text as it is. */
    class_names c = { 0 };
    if (n > 1 && class_names_parse(&c, (const char *)part[1], len[1], "labels.txt", READERS_MAX_CLASSES, err,
                                   sizeof err) == 0)
        class_names_free(&c);

    pathlist *l = pathlist_open(list, n > 1 ? labels : NULL, err, sizeof err);
    fuzz_note("pathlist_open", l ? 0 : -1, err);
    if (!l)
        return 0;
    for (int i = 0; i < pathlist_nclasses(l); i++)
        if (!pathlist_class_name(l, i))
            abort();
    size_t lines = 0;
    (void)pathlist_read(l, on_entry, l, err, sizeof err);
    lines = pathlist_count(l) + pathlist_problems(l);
    (void)lines;
    pathlist_close(l);
    return 0;
}
