/* engine/fileio.h: the few file-system operations every part of kiln needs.
 *
 * The lowest layer: POSIX and libc only, so the engine, the store, the jobs
 * and the server may all include it. Files that matter are written
 * atomically: the bytes go to "<path>.tmp", which is fsynced and renamed over
 * path, then the folder is fsynced, so a crash leaves the old file or the new
 * one, never a mix. Every function reports failure as its return value with
 * errno set; those that take (err, errlen) also fill err (when not NULL) with
 * a message that names the file.
 */
#ifndef KILN_ENGINE_FILEIO_H
#define KILN_ENGINE_FILEIO_H

#include <stddef.h>
#include <stdio.h>

/* fsyncs the folder dir, so that a rename or a create in it is durable.
 * Returns 0, or -1 with errno set. */
int fio_fsync_dir(const char *dir);

/* fsyncs the folder that holds path ("." when path has no slash).
 * Returns 0, or -1 with errno set (ENAMETOOLONG for a folder past PATH_MAX). */
int fio_fsync_parent(const char *path);

/* Finishes an atomic write that the caller streamed into tmp through f:
 * flushes and fsyncs f, closes it (always, also on failure), renames tmp to
 * path and fsyncs the folder (best effort: a failure there is not reported).
 * Returns 0, or -1 with errno set; on failure the caller removes tmp. */
int fio_commit(FILE *f, const char *tmp, const char *path);

/* Writes len bytes of data to path atomically through "<path>.tmp" (see the
 * top of this file); data may be NULL when len is 0. Returns 0, or -1 with
 * errno and err set; on failure path is untouched and no .tmp is left. */
int fio_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Reads the whole regular file at path, of at most max bytes (max is taken
 * as at most SIZE_MAX / 2), into a new NUL-terminated buffer the caller frees;
 * *len (when len is not NULL) gets its length without the NUL. A file that
 * grows while it is read is read to its end, within max.
 * Returns NULL with errno and err set: EFBIG past max, EISDIR or EINVAL for a
 * folder or another non-regular file, ENOMEM, or what open or read gave
 * ("cannot open <path>: ..." when the file is missing). */
char *fio_read_file(const char *path, size_t max, size_t *len, char *err, size_t errlen);

/* Creates dir and its missing parents (mode 0755). An existing folder is
 * fine. Returns 0, or -1 with errno set (ENOTDIR when dir exists and is not
 * a folder, ENAMETOOLONG past PATH_MAX). */
int fio_mkdir_p(const char *dir);

/* Removes path and everything below it, never following links (a link is
 * removed, not what it points to). A missing path is not an error.
 * Returns 0, or -1 with errno set. */
int fio_rm_rf(const char *path);

/* Removes every entry of dir, not dir itself (fio_rm_rf on each); goes on
 * past an entry it cannot remove. Returns 0, or -1 with errno set for the
 * last failure (also when dir cannot be opened). */
int fio_empty_dir(const char *dir);

#endif
