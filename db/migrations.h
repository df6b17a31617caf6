/* db/migrations.h: the ordered list of schema migrations (internal to db/).
 *
 * Migration i (1-based, its `version`) takes a database at user_version
 * version-1 to version. store_open runs every migration above the file's
 * user_version in one transaction; a file newer than the last entry is refused.
 * Entries are only ever appended: a released migration never changes.
 */
#ifndef KILN_DB_MIGRATIONS_H
#define KILN_DB_MIGRATIONS_H

#include <stddef.h>

typedef struct store_migration {
    int version;              /* the user_version after this migration */
    const char *what;         /* one line, for error messages */
    const char *sql;          /* one or more statements, run with sqlite3_exec */
} store_migration;

extern const store_migration store_migrations[];
extern const size_t store_migration_count;

#endif
