/* server/user_cli.c: `kiln user` and `kiln token` (contract in user_cli.h).
 *
 * They open the data directory's database directly (SQLite in WAL mode: a
 * running `kiln serve` sees the change at its next request) and apply the
 * same rules as the API (server/auth.h: names, passwords, the first user is
 * an admin, tokens stored as hashes).
 */
#include "server/user_cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <sodium.h>

#include "base/layout.h"       /* LAYOUT_DB_FILE, layout_file */
#include "db/users.h"
#include "engine/fileio.h"     /* fio_mkdir_p */
#include "server/auth.h"       /* auth_user_add, auth_token_new */
#include "server/limits.h"     /* password-ops, password-mem */

typedef struct cli_opts {
    const char *data;
    const char *name;              /* the one positional argument */
    const char *password_file;
    bool admin;
    int64_t expires_days;          /* token add: 0 never */
    const char *label;             /* token add --name */
    serve_limits limits;           /* --limit password-ops=N, password-mem=N */
} cli_opts;

void user_usage(FILE *f)
{
    fprintf(f,
            "usage: kiln user add NAME [--admin] [--password-file FILE] [--data DIR]\n"
            "                 [--limit password-ops=N] [--limit password-mem=BYTES]\n"
            "       kiln user list [--data DIR]\n"
            "       kiln user remove NAME [--data DIR]\n"
            "       kiln token add USER [--expires-days N] [--name LABEL] [--data DIR]\n"
            "\n"
            "Users and API tokens of the kiln serve whose data directory is DIR (default\n"
            "$KILN_DATA, else ./var). Once a user exists, every API call needs a sign-in.\n"
            "\n"
            "  user add        adds a user; the password is read from FILE (its first line),\n"
            "                  else asked for twice on the terminal without echo, else read\n"
            "                  as one line from stdin. 8 to 1024 bytes. The first user is\n"
            "                  always an admin. --limit sets the Argon2id cost as kiln serve's\n"
            "                  limits of those names do (defaults: 2 passes, 64 MiB)\n"
            "  user list       prints id, name, admin and creation time of every user\n"
            "  user remove     removes a user and its tokens; what it owned stays, seen by\n"
            "                  admins only\n"
            "  token add       makes an API token for USER and prints it (only this once) on\n"
            "                  stdout; it expires after N days (default: never). Use it as\n"
            "                  curl -H \"Authorization: Bearer TOKEN\" ...\n");
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "kiln %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see kiln user --help)\n");
    return 2;
}

/* Options after the subcommand (argv[0] is "add"/"list"/...). Returns 0, 1
 * after --help, or 2 (reported). */
static int parse(const char *cmd, int argc, char **argv, bool wants_name, cli_opts *o)
{
    const char *env = getenv("KILN_DATA");
    o->data = env && *env ? env : "./var";
    serve_limits_default(&o->limits);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        char err[768];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            user_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--admin")) {
            o->admin = true;
        } else if (!strcmp(a, "--data") && has_next) {
            o->data = argv[++i];
        } else if (!strcmp(a, "--password-file") && has_next) {
            o->password_file = argv[++i];
        } else if (!strcmp(a, "--name") && has_next) {
            o->label = argv[++i];
        } else if (!strcmp(a, "--expires-days") && has_next) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > 3650)
                return usage_error(cmd, "--expires-days must be 1..3650, not %s", argv[i]);
            o->expires_days = v;
        } else if (!strcmp(a, "--limit") && has_next) {
            const char *v = argv[++i];
            if (strncmp(v, "password-ops=", 13) && strncmp(v, "password-mem=", 13))
                return usage_error(cmd, "--limit here takes password-ops or password-mem, not %s", v);
            if (serve_limits_set(&o->limits, v, err, sizeof err) != 0)
                return usage_error(cmd, "%s", err);
        } else if (a[0] == '-') {
            return usage_error(cmd, "unknown option, or one without its value: %s", a);
        } else if (wants_name && !o->name) {
            o->name = a;
        } else {
            return usage_error(cmd, "unexpected argument %s", a);
        }
    }
    if (wants_name && !o->name)
        return usage_error(cmd, "%s", "needs a user name");
    return 0;
}

static store *open_store(const cli_opts *o)
{
    char path[PATH_MAX + 16], err[512];
    if (fio_mkdir_p(o->data) != 0) {
        fprintf(stderr, "kiln: cannot create the data directory %s: %s\n", o->data, strerror(errno));
        return NULL;
    }
    if (layout_file(path, sizeof path, o->data, LAYOUT_DB_FILE) != 0) {
        fprintf(stderr, "kiln: the data directory's path is too long\n");
        return NULL;
    }
    store *st = store_open(path, err, sizeof err);
    if (!st)
        fprintf(stderr, "kiln: cannot open %s: %s\n", path, err);
    return st;
}

/* One line of f into buf without its line end. Returns 0, or -1. */
static int read_line(FILE *f, char *buf, size_t n)
{
    if (!fgets(buf, (int)n, f))
        return -1;
    size_t len = strlen(buf);
    if (len == n - 1 && buf[len - 1] != '\n')
        return -1;                                  /* longer than a password may be */
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        buf[--len] = '\0';
    return 0;
}

/* Asks on the terminal without echo. */
static int prompt(const char *question, char *buf, size_t n)
{
    FILE *tty = fopen("/dev/tty", "r+");
    if (!tty)
        return -1;
    struct termios old, quiet;
    int fd = fileno(tty);
    bool restore = tcgetattr(fd, &old) == 0;
    if (restore) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(fd, TCSAFLUSH, &quiet);
    }
    fprintf(tty, "%s", question);
    fflush(tty);
    int rc = read_line(tty, buf, n);
    if (restore)
        tcsetattr(fd, TCSAFLUSH, &old);
    fprintf(tty, "\n");
    fclose(tty);
    return rc;
}

static int read_password(const cli_opts *o, char *buf, size_t n)
{
    if (o->password_file) {
        FILE *f = fopen(o->password_file, "r");
        int rc = f ? read_line(f, buf, n) : -1;
        if (f)
            fclose(f);
        if (rc != 0)
            fprintf(stderr, "kiln user add: cannot read a password from %s%s%s\n", o->password_file,
                    f ? "" : ": ", f ? "" : strerror(errno));
        return rc;
    }
    if (isatty(STDIN_FILENO)) {
        char again[AUTH_PASSWORD_MAX + 2];
        char q[AUTH_NAME_MAX + 32];
        snprintf(q, sizeof q, "Password for %s: ", o->name);
        if (prompt(q, buf, n) != 0 || prompt("Again: ", again, sizeof again) != 0) {
            fprintf(stderr, "kiln user add: no password read from the terminal\n");
            return -1;
        }
        bool same = !strcmp(buf, again);
        sodium_memzero(again, sizeof again);
        if (!same) {
            fprintf(stderr, "kiln user add: the two passwords differ\n");
            return -1;
        }
        return 0;
    }
    if (read_line(stdin, buf, n) != 0) {
        fprintf(stderr, "kiln user add: no password on stdin (one line, at most %d bytes)\n", AUTH_PASSWORD_MAX);
        return -1;
    }
    return 0;
}

static int user_add(const cli_opts *o)
{
    char password[AUTH_PASSWORD_MAX + 2];
    char err[256];
    if (auth_name_check(o->name, err, sizeof err) != 0) {
        fprintf(stderr, "kiln user add: %s\n", err);
        return 2;
    }
    if (read_password(o, password, sizeof password) != 0)
        return 1;
    store *st = open_store(o);
    if (!st) {
        sodium_memzero(password, sizeof password);
        return 1;
    }
    int64_t id = 0;
    bool admin = false;
    api_error e;
    int rc = auth_user_add(st, o->name, password, o->admin, o->limits.password_ops, o->limits.password_mem, &id,
                           &admin, &e);
    sodium_memzero(password, sizeof password);
    store_close(st);
    if (rc != 0) {
        fprintf(stderr, "kiln user add: %s\n", e.message);
        return e.status == 400 ? 2 : 1;
    }
    printf("kiln: user %s added (id %lld%s)\n", o->name, (long long)id, admin ? ", admin" : "");
    if (admin && !o->admin)
        printf("kiln: the first user is an admin\n");
    return 0;
}

static int user_list(const cli_opts *o)
{
    store *st = open_store(o);
    if (!st)
        return 1;
    store_user *list = NULL;
    size_t n = 0;
    int rc = store_user_list(st, &list, &n);
    store_close(st);
    if (rc != 0) {
        fprintf(stderr, "kiln user list: the database could not be read\n");
        return 1;
    }
    printf("%-6s %-24s %-6s %s\n", "ID", "NAME", "ADMIN", "CREATED");
    for (size_t i = 0; i < n; i++)
        printf("%-6lld %-24s %-6s %s\n", (long long)list[i].id, list[i].name, list[i].admin ? "yes" : "no",
               list[i].created_at);
    store_user_list_free(list, n);
    return 0;
}

static int user_remove(const cli_opts *o)
{
    store *st = open_store(o);
    if (!st)
        return 1;
    store_user u;
    int rc = store_user_find(st, o->name, &u);
    if (rc == 0) {
        rc = store_user_delete(st, u.id);
        store_user_clear(&u);
    }
    store_close(st);
    if (rc == STORE_NOT_FOUND) {
        fprintf(stderr, "kiln user remove: there is no user %s\n", o->name);
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "kiln user remove: the database failed\n");
        return 1;
    }
    printf("kiln: user %s removed\n", o->name);
    return 0;
}

static int token_add(const cli_opts *o)
{
    store *st = open_store(o);
    if (!st)
        return 1;
    store_user u;
    int rc = store_user_find(st, o->name, &u);
    if (rc != 0) {
        store_close(st);
        fprintf(stderr, "kiln token add: %s %s\n", rc == STORE_NOT_FOUND ? "there is no user" : "cannot read user",
                o->name);
        return 1;
    }
    char token[AUTH_TOKEN_LEN + 1], hex[AUTH_HASH_HEX + 1], err[256];
    int64_t id = 0;
    rc = auth_token_new(token, hex);
    if (rc == 0)
        rc = store_token_insert(st, u.id, "api", o->label ? o->label : "cli", hex, o->expires_days * 86400, &id,
                                err, sizeof err);
    store_user_clear(&u);
    store_close(st);
    if (rc != 0) {
        fprintf(stderr, "kiln token add: %s\n", err);
        return 1;
    }
    printf("%s\n", token);
    sodium_memzero(token, sizeof token);
    fprintf(stderr, "kiln: token %lld for %s%s (shown only now; revoke with DELETE /api/v1/tokens/%lld)\n",
            (long long)id, o->name, o->expires_days ? "" : ", never expires", (long long)id);
    return 0;
}

int user_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        user_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cli_opts o;
    memset(&o, 0, sizeof o);
    const char *sub = argv[1];
    bool add = !strcmp(sub, "add"), list = !strcmp(sub, "list"), remove = !strcmp(sub, "remove");
    if (!add && !list && !remove)
        return usage_error("user", "unknown command %s (add, list, remove)", sub);
    int rc = parse("user", argc - 1, argv + 1, !list, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    return add ? user_add(&o) : list ? user_list(&o) : user_remove(&o);
}

int token_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "add")) {
        user_usage(stderr);
        return argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
    }
    cli_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse("token", argc - 1, argv + 1, true, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    return token_add(&o);
}
