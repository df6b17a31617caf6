/* db/store_db.h: the store's connection for the other files of db/ (internal
 * to db/; db/users.c). Everything else goes through store.h's functions.
 *
 * store_db_lock takes the store's lock and returns its connection; the caller
 * runs its statements (prepared with bound parameters, finalized before it
 * unlocks) and calls store_db_unlock. No other store function may be called
 * in between (the lock is not recursive).
 */
#ifndef KILN_DB_STORE_DB_H
#define KILN_DB_STORE_DB_H

#include <sqlite3.h>

#include "db/store.h"

sqlite3 *store_db_lock(store *s);
void store_db_unlock(store *s);

#endif
