/* base/utf8.h: names from the outside world made fit for JSON.
 *
 * Archive entries, folder names, list and label files carry names in
 * whatever encoding their maker used (a GNU tar made on a Latin-1 system
 * stores "caf\xe9"); JSON is UTF-8. The rule, applied by every importer
 * source (jobs/import*.c) and by the server's JSON answers as a last
 * defence: well-formed UTF-8 is kept as it is, and every byte that is not
 * part of a well-formed sequence is read as Latin-1 (ISO 8859-1) and written
 * as that code point in UTF-8 ("caf\xe9" -> "café", U+00E9). The result is
 * always well-formed UTF-8; two names that differ only in their encoding
 * may become equal (they then name one class).
 */
#ifndef KILN_BASE_UTF8_H
#define KILN_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF); else *bad_at (may be NULL) is the first bad byte. */
bool utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Writes s[0..n) by the rule above into out (outlen bytes, NUL-terminated;
 * outlen > 0), cutting it short at a character boundary when it does not
 * fit. Returns the bytes written (without the NUL). At most 2 * n + 1 bytes
 * are ever needed. */
size_t utf8_from_any(const char *s, size_t n, char *out, size_t outlen);

/* The same into a new string (malloc'ed, the caller frees it); NULL when
 * out of memory. */
char *utf8_dup_any(const char *s, size_t n);

#endif
