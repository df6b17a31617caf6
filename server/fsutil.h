/* server/fsutil.h: small file-system helpers for the HTTP layer. */
#ifndef KILN_SERVER_FSUTIL_H
#define KILN_SERVER_FSUTIL_H

#include <stddef.h>

/* Creates dir and its missing parents (mode 0755). Returns 0 or -1 (errno). */
int fs_mkdir_p(const char *dir);
/* Removes path and everything below it, never following links. Missing is
 * not an error. Returns 0 or -1. */
int fs_rm_rf(const char *path);
/* Reads a whole file of at most max bytes into a NUL-terminated malloc'ed
 * buffer (*len without the NUL). Returns NULL with errno set (EFBIG past max). */
char *fs_read_file(const char *path, size_t max, size_t *len);
/* Removes every entry of dir (not dir itself); for stale uploads at start. */
void fs_empty_dir(const char *dir);

#endif
