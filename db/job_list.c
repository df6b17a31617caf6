/* db/job_list.c: the jobs list's query (contract in store.h, "the jobs list").
 *
 * One SELECT per page, built from the query's parts: a WHERE of the filters
 * that are set, the keyset condition "(sort value, id) after the place", an
 * ORDER BY of the sort value then the id, and LIMIT n + 1 (the extra row only
 * says that more follow). It selects only the id and the sort value; the
 * page's rows are then read by id. No OFFSET: a deep page costs what the first does,
 * since each sort key has an index ending in the id (migration 7). The SQL
 * text is made only of the fixed fragments below; every value is a bound
 * parameter. The count of all matching jobs is a second statement over the
 * same WHERE.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "db/store.h"
#include "db/store_db.h"     /* store_db_lock, STORE_JOB_COLS, store_db_read_job */

const char *const store_job_sort_names[] = {
    [STORE_JOB_SORT_CREATED] = "created",
    [STORE_JOB_SORT_NAME] = "name",
    [STORE_JOB_SORT_STATUS] = "status",
    [STORE_JOB_SORT_NETWORK] = "network",
    [STORE_JOB_SORT_DATASET] = "dataset",
    [STORE_JOB_SORT_EPOCHS] = "epochs",
    [STORE_JOB_SORT_PROGRESS] = "progress",
    [STORE_JOB_SORT_COUNT] = NULL,
};

/* Each sort key's value as SQL over the jobs row; created sorts by id alone. */
static const struct {
    const char *sql;
    bool numeric;
} sort_keys[STORE_JOB_SORT_COUNT] = {
    [STORE_JOB_SORT_CREATED] = { "id", true },
    [STORE_JOB_SORT_NAME] = { "name COLLATE NOCASE", false },
    [STORE_JOB_SORT_STATUS] = { "status", false },
    [STORE_JOB_SORT_NETWORK] = { "network", false },
    [STORE_JOB_SORT_DATASET] = { "dataset_id", true },
    [STORE_JOB_SORT_EPOCHS] = { "epochs", true },
    [STORE_JOB_SORT_PROGRESS] = { "progress", true },
};

bool store_job_sort_numeric(store_job_sort sort)
{
    return sort >= STORE_JOB_SORT_COUNT || sort_keys[sort].numeric;
}

void store_job_key_clear(store_job_key *k)
{
    if (!k)
        return;
    free(k->text);
    memset(k, 0, sizeof *k);
}

/* ---- building the statement --------------------------------------------- */

#define SQL_MAX 2048
#define BINDS_MAX 24

typedef struct bindv {
    enum { BV_INT, BV_NUM, BV_TEXT } type;
    int64_t i;
    double d;
    const char *t;         /* not owned */
} bindv;

typedef struct sqlbuf {
    char s[SQL_MAX];
    size_t len;
    bool overflow;
    bindv b[BINDS_MAX];
    int nb;
} sqlbuf;

static void sb_add(sqlbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_add(sqlbuf *sb, const char *fmt, ...)
{
    if (sb->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(sb->s + sb->len, sizeof sb->s - sb->len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof sb->s - sb->len)
        sb->overflow = true;
    else
        sb->len += (size_t)k;
}

/* A new parameter's number (?N), or 0 when there are too many (overflow). */
static int sb_bind(sqlbuf *sb, bindv v)
{
    if (sb->nb == BINDS_MAX) {
        sb->overflow = true;
        return 0;
    }
    sb->b[sb->nb++] = v;
    return sb->nb;
}

#define BIND_INT(v) ((bindv){ .type = BV_INT, .i = (v) })
#define BIND_NUM(v) ((bindv){ .type = BV_NUM, .d = (v) })
#define BIND_TEXT(v) ((bindv){ .type = BV_TEXT, .t = (v) })

/* " WHERE a AND b ..." of the filters that are set (nothing when none):
 * true when it wrote a WHERE. like: the search's LIKE pattern (the caller's,
 * living past the run). */
static bool add_filters(sqlbuf *sb, const store_job_query *q, const char *like, int64_t text_id)
{
    const char *sep = " WHERE ";
    if (q->owner != 0) {
        sb_add(sb, "%sowner_id = ?%d", sep, sb_bind(sb, BIND_INT(q->owner)));
        sep = " AND ";
    }
    if (q->nstatuses > 0) {
        sb_add(sb, "%sstatus IN (", sep);
        for (size_t i = 0; i < q->nstatuses && i < STORE_JOB_STATUSES_MAX; i++)
            sb_add(sb, "%s?%d", i ? ", " : "", sb_bind(sb, BIND_TEXT(q->statuses[i])));
        sb_add(sb, ")");
        sep = " AND ";
    }
    if (q->dataset_id != 0) {
        sb_add(sb, "%sdataset_id = ?%d", sep, sb_bind(sb, BIND_INT(q->dataset_id)));
        sep = " AND ";
    }
    if (q->sweep_id != 0) {
        sb_add(sb, "%ssweep_id = ?%d", sep, sb_bind(sb, BIND_INT(q->sweep_id)));
        sep = " AND ";
    }
    if (q->network) {
        sb_add(sb, "%snetwork = ?%d", sep, sb_bind(sb, BIND_TEXT(q->network)));
        sep = " AND ";
    }
    if (q->precision) {
        sb_add(sb, "%sprecision = ?%d", sep, sb_bind(sb, BIND_TEXT(q->precision)));
        sep = " AND ";
    }
    /* The tag and the search read only name, network, tags and notes: as
     * "id IN (a scan of the covering index jobs_text)", named since the
     * planner does not choose it by itself, they never read a
     * job's row (whose config makes it span overflow pages), 10x faster. */
    if (q->tag) {
        sb_add(sb, "%sid IN (SELECT s.id FROM jobs s INDEXED BY jobs_text WHERE EXISTS (SELECT 1 FROM json_each(s.tags) t "
               "WHERE t.value = ?%d))", sep, sb_bind(sb, BIND_TEXT(q->tag)));
        sep = " AND ";
    }
    if (like) {
        int p = sb_bind(sb, BIND_TEXT(like));
        sb_add(sb, "%sid IN (SELECT s.id FROM jobs s INDEXED BY jobs_text WHERE s.name LIKE ?%d ESCAPE '\\' OR "
               "s.network LIKE ?%d ESCAPE '\\' OR s.notes LIKE ?%d ESCAPE '\\' OR "
               "s.tags LIKE ?%d ESCAPE '\\' OR s.id = ?%d)", sep, p, p, p, p, sb_bind(sb, BIND_INT(text_id)));
        sep = " AND ";
    }
    return strcmp(sep, " WHERE ") != 0;
}

/* The search's LIKE pattern: %text% with \, % and _ escaped (malloc'ed, or NULL). */
static char *like_pattern(const char *text)
{
    size_t n = strlen(text);
    char *p = malloc(2 * n + 3);
    if (!p)
        return NULL;
    size_t k = 0;
    p[k++] = '%';
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\\' || text[i] == '%' || text[i] == '_')
            p[k++] = '\\';
        p[k++] = text[i];
    }
    p[k++] = '%';
    p[k] = '\0';
    return p;
}

/* The id a search text names ("12" or "#12"), or -1. */
static int64_t text_as_id(const char *text)
{
    const char *t = text[0] == '#' ? text + 1 : text;
    if (!*t || strlen(t) > 18)
        return -1;
    for (const char *c = t; *c; c++)
        if (*c < '0' || *c > '9')
            return -1;
    return strtoll(t, NULL, 10);
}

/* Prepares sb's text and binds its parameters: the statement, or NULL (logged). */
static sqlite3_stmt *prepare(sqlite3 *db, const sqlbuf *sb)
{
    if (sb->overflow) {
        fprintf(stderr, "kiln: store: listing jobs: the query is too long\n");
        return NULL;
    }
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sb->s, (int)sb->len, &q, NULL) != SQLITE_OK) {
        fprintf(stderr, "kiln: store: listing jobs: %s\n", sqlite3_errmsg(db));
        return NULL;
    }
    int rc = SQLITE_OK;
    for (int i = 0; i < sb->nb && rc == SQLITE_OK; i++) {
        const bindv *v = &sb->b[i];
        rc = v->type == BV_INT ? sqlite3_bind_int64(q, i + 1, v->i)
           : v->type == BV_NUM ? sqlite3_bind_double(q, i + 1, v->d)
                               : sqlite3_bind_text(q, i + 1, v->t, -1, SQLITE_STATIC);
    }
    if (rc != SQLITE_OK) {
        fprintf(stderr, "kiln: store: listing jobs: binding: %s\n", sqlite3_errmsg(db));
        sqlite3_finalize(q);
        return NULL;
    }
    return q;
}

/* ---- running it ----------------------------------------------------------- */

static int count_matching(sqlite3 *db, const store_job_query *q, const char *like, int64_t text_id,
                          int64_t *total)
{
    sqlbuf sb = { .len = 0 };
    sb_add(&sb, "SELECT COUNT(*) FROM jobs");
    (void)add_filters(&sb, q, like, text_id);
    sqlite3_stmt *st = prepare(db, &sb);
    if (!st)
        return -1;
    int ret = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *total = sqlite3_column_int64(st, 0);
        ret = 0;
    } else {
        fprintf(stderr, "kiln: store: counting jobs: %s\n", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return ret;
}

/* The page's statement: filters, the place, the order, limit + 1. */
static void build_page(sqlbuf *sb, const store_job_query *q, const char *like, int64_t text_id)
{
    const char *key = sort_keys[q->sort].sql;
    const char *dir = q->desc ? "DESC" : "ASC";
    const char *cmp = q->desc ? "<" : ">";
    sb_add(sb, "SELECT id, %s FROM jobs", key);
    bool where = add_filters(sb, q, like, text_id);
    if (q->after) {
        const char *sep = where ? " AND " : " WHERE ";
        if (q->sort == STORE_JOB_SORT_CREATED) {
            sb_add(sb, "%sid %s ?%d", sep, cmp, sb_bind(sb, BIND_INT(q->after->id)));
        } else {
            int pv = sb_bind(sb, sort_keys[q->sort].numeric ? BIND_NUM(q->after->num)
                                                             : BIND_TEXT(q->after->text ? q->after->text : ""));
            /* Not the row value (key, id) > (?, ?): SQLite does not take that
             * as an index range when the key has a collation. */
            sb_add(sb, "%s%s %s= ?%d AND (%s %s ?%d OR id %s ?%d)", sep, key, cmp, pv, key, cmp, pv, cmp,
                   sb_bind(sb, BIND_INT(q->after->id)));
        }
    }
    if (q->sort == STORE_JOB_SORT_CREATED)
        sb_add(sb, " ORDER BY id %s", dir);
    else
        sb_add(sb, " ORDER BY %s %s, id %s", key, dir, dir);
    sb_add(sb, " LIMIT ?%d", sb_bind(sb, BIND_INT((int64_t)q->limit + 1)));
}

/* Reads the page's ids and sort values (st), then each job's row by id
 * (byid): a sort then holds only (id, value), never the rows, whose configs
 * are long. The place of the last one kept in *last. 0 or -1. */
static int read_page(sqlite3 *db, sqlite3_stmt *st, sqlite3_stmt *byid, const store_job_query *q,
                     store_job **out, size_t *n, bool *more, store_job_key *last)
{
    store_job *arr = calloc(q->limit, sizeof *arr);
    if (!arr)
        return -1;
    size_t len = 0;
    int rc;
    *more = false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == q->limit) {
            *more = true;
            rc = SQLITE_DONE;
            break;
        }
        store_job_key_clear(last);
        last->id = sqlite3_column_int64(st, 0);
        if (sort_keys[q->sort].numeric) {
            last->num = sqlite3_column_double(st, 1);
        } else {
            const unsigned char *t = sqlite3_column_text(st, 1);
            if (!(last->text = strdup(t ? (const char *)t : "")))
                goto fail;
        }
        sqlite3_reset(byid);
        if (sqlite3_bind_int64(byid, 1, last->id) != SQLITE_OK || sqlite3_step(byid) != SQLITE_ROW) {
            rc = SQLITE_ERROR;          /* a row the same read saw a moment ago: a store error */
            break;
        }
        if (store_db_read_job(byid, &arr[len]) != 0)
            goto fail;
        len++;
    }
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "kiln: store: listing jobs: %s\n", sqlite3_errmsg(db));
        goto fail;
    }
    *out = arr;
    *n = len;
    return 0;
fail:
    store_job_list_free(arr, len);
    store_job_key_clear(last);
    return -1;
}

int store_job_query_run(store *s, const store_job_query *q, store_job **out, size_t *n, bool *more,
                        store_job_key *next, int64_t *total)
{
    *out = NULL;
    *n = 0;
    *more = false;
    memset(next, 0, sizeof *next);
    if (q->limit < 1 || q->sort >= STORE_JOB_SORT_COUNT)
        return -1;
    char *like = q->text ? like_pattern(q->text) : NULL;
    if (q->text && !like)
        return -1;
    int64_t text_id = q->text ? text_as_id(q->text) : -1;

    sqlbuf *sb = calloc(1, sizeof *sb);
    if (!sb) {
        free(like);
        return -1;
    }
    build_page(sb, q, like, text_id);

    int ret = -1;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = prepare(db, sb), *byid = NULL;
    if (st && sqlite3_prepare_v2(db, "SELECT " STORE_JOB_COLS " FROM jobs WHERE id = ?1", -1, &byid,
                                 NULL) != SQLITE_OK)
        fprintf(stderr, "kiln: store: listing jobs: %s\n", sqlite3_errmsg(db));
    else if (st && read_page(db, st, byid, q, out, n, more, next) == 0)
        ret = 0;
    sqlite3_finalize(st);
    sqlite3_finalize(byid);
    if (ret == 0 && total && count_matching(db, q, like, text_id, total) != 0) {
        store_job_list_free(*out, *n);
        *out = NULL;
        *n = 0;
        ret = -1;
    }
    store_db_unlock(s);
    if (ret != 0 || !*more)
        store_job_key_clear(next);
    free(sb);
    free(like);
    return ret;
}
