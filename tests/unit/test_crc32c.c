/* tests/unit/test_crc32c.c: CRC32C against published check values
 * (RFC 3720 appendix B.4 and the CRC catalogue), incremental use, and
 * TensorBoard's mask. */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "jobs/tbevents.h"   /* crc32c, tb_masked_crc */

static void test_check_values(void **state) {
    (void)state;
    uint8_t buf[32];
    assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
    memset(buf, 0, sizeof buf);
    assert_int_equal(crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    assert_int_equal(crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;          /* RFC 3720: incrementing */
    assert_int_equal(crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);   /* RFC 3720: decrementing */
    assert_int_equal(crc32c(0, buf, 32), 0x113FDB5Cu);
    assert_int_equal(crc32c(0, "", 0), 0u);
}

static void test_incremental(void **state) {
    (void)state;
    const char *s = "The quick brown fox jumps over the lazy dog, 0123456789";
    size_t n = strlen(s);
    uint32_t whole = crc32c(0, s, n);
    for (size_t cut = 0; cut <= n; cut++) {
        uint32_t c = crc32c(0, s, cut);
        c = crc32c(c, s + cut, n - cut);
        assert_int_equal(c, whole);
    }
    uint32_t bytewise = 0;
    for (size_t i = 0; i < n; i++) bytewise = crc32c(bytewise, s + i, 1);
    assert_int_equal(bytewise, whole);
}

static void test_mask(void **state) {
    (void)state;
    /* mask(crc) = rotate right by 15, plus 0xa282ead8, modulo 2^32 */
    assert_int_equal(tb_masked_crc(0), 0xa282ead8u);
    assert_int_equal(tb_masked_crc(1), (uint32_t)((1u << 17) + 0xa282ead8u));
    assert_int_equal(tb_masked_crc(0x8000u), (uint32_t)(1u + 0xa282ead8u));
    assert_int_equal(tb_masked_crc(0xE3069283u),
                     (uint32_t)(((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_values),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
