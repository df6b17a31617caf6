/* base/num.h: numbers written as text, parsed strictly: the one rule for
 * query values, form fields and every other integer a person types. */
#ifndef KILN_BASE_NUM_H
#define KILN_BASE_NUM_H

#include <stdbool.h>
#include <stdint.h>

/* s is a decimal integer in [lo, hi], nothing before or after it: no space
 * or '+' (strtoll alone would skip the one and take the other), no trailing
 * text. Then *out is its value and the answer true. */
bool num_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
