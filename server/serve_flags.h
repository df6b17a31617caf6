/* server/serve_flags.h: THE table of `kiln serve`'s flags (SERVE_FLAGS): for
 * each its name, its environment variable, its kind, its default and its help.
 * The command-line parser, the environment reader, `kiln serve --help` and the
 * README's configuration table (`kiln serve --help=markdown`, checked by
 * test_serve_flags) all read it; nothing else parses a flag of kiln serve.
 *
 * Precedence: the table's default, then the environment, then the command
 * line (the command line wins). An empty variable counts as unset. A
 * repeatable flag (--import-root, --allowed-host) takes a list in its variable
 * (KILN_IMPORT_ROOT="/a:/b", KILN_ALLOWED_HOST="a.example,b.example"); giving
 * the flag on the command line replaces the variable's list. Limits have one
 * variable each, named from the limits table (server/limits.h):
 * KILN_LIMIT_UPLOAD_BYTES=4G is --limit upload-bytes=4G; a --limit on the
 * command line overrides that limit's variable only. A bad value in a variable
 * is a start-up error that names the variable; an unknown KILN_LIMIT_* too.
 *
 * To add a flag: a field in serve_opts, an apply function and a row in
 * SERVE_FLAGS (serve_flags.c), and `kiln serve --help=markdown` into the
 * README's table.
 */
#ifndef KILN_SERVER_SERVE_FLAGS_H
#define KILN_SERVER_SERVE_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "jobs/dispatch.h"       /* dispatch_kind, slurm_options */
#include "jobs/import_roots.h"   /* import_roots */
#include "server/guard.h"        /* guard_hosts */
#include "server/limits.h"       /* serve_limits */

#define SERVE_BASE_PATH_MAX 256

/* Which requests get an access-log line (server/http.c). */
typedef enum access_log_mode {
    ACCESS_LOG_OFF,       /* none */
    ACCESS_LOG_ON,        /* every request but the polls of monitors (GET /healthz, GET /metrics) */
    ACCESS_LOG_ALL        /* every request */
} access_log_mode;

/* What kiln serve was asked to do. Strings point into argv, the environment
 * or the table (all outlive the server); the three pointers are the server's
 * own tables, filled in place. */
typedef struct serve_opts {
    const char *host;
    int port;
    const char *data;
    const char *web_dir;
    const char *static_dir;
    int max_jobs;
    char base_path[SERVE_BASE_PATH_MAX];   /* "" or "/prefix" (no trailing slash) */
    access_log_mode access_log;
    bool insecure_no_auth;        /* serve beyond loopback without users (server/auth.h) */
    import_roots *roots;          /* --import-root, resolved as they are read */
    serve_limits *limits;         /* --limit NAME=VALUE */
    guard_hosts *hosts;           /* --allowed-host NAME[:PORT] */
    dispatch_kind dispatcher;     /* --dispatcher local|slurm (jobs/dispatch.h) */
    slurm_options slurm;          /* --slurm-* */
} serve_opts;

typedef enum flag_kind {
    FLAG_VALUE,      /* --name VALUE or --name=VALUE */
    FLAG_SWITCH,     /* --name; its variable takes 1/0, true/false, yes/no, on/off */
    FLAG_LIST,       /* repeatable; its variable is a list split at `sep` */
    FLAG_LIMITS      /* --limit NAME=VALUE; one variable a limit: env is the prefix */
} flag_kind;

typedef struct serve_flag {
    const char *name;          /* "--port" */
    const char *env;           /* "KILN_PORT"; for FLAG_LIMITS the prefix "KILN_LIMIT_" */
    flag_kind kind;
    const char *arg;           /* "N" in the usage; NULL for a switch */
    const char *def;           /* applied before the environment; NULL: none */
    const char *def_doc;       /* the default as documented, when def is not what to show */
    char sep;                  /* FLAG_LIST: the separator in the variable */
    const char *help;          /* lines separated by '\n' */
    /* Applies one value (a switch gets "1" or "0"). 0, or -1 with err set. */
    int (*apply)(serve_opts *o, const char *value, char *err, size_t errlen);
} serve_flag;

extern const serve_flag SERVE_FLAGS[];
extern const size_t SERVE_FLAG_COUNT;

/* Fills o from the table's defaults, then envp (a NULL-terminated
 * "NAME=VALUE" array, as environ; NULL: none), then argv[1..argc). o's three
 * table pointers must be set and their tables empty/defaulted. Returns 0;
 * 1 after printing the usage to help_out (--help) or the markdown table
 * (--help=markdown); 2 with err set on a bad flag or variable (err names
 * the flag, or the variable and its value). */
int serve_flags_parse(serve_opts *o, int argc, char **argv, char **envp, FILE *help_out, char *err,
                      size_t errlen);

/* `kiln serve --help`. */
void serve_flags_usage(FILE *f);

/* The README's table: | flag | variable | default | what |. */
void serve_flags_markdown(FILE *f);

/* Checks and normalises a base path: "" or "/" give ""; else it must start
 * with '/', hold only A-Z a-z 0-9 - . _ ~ and '/', and have no empty, "."
 * or ".." segment; trailing slashes are dropped. 0, or -1 with err set. */
int serve_base_path(const char *in, char out[SERVE_BASE_PATH_MAX], char *err, size_t errlen);

#endif
