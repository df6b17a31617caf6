/* Mixed precision's arithmetic (engine/elementwise.h casts and unscale) and
 * the dynamic loss scaler (engine/amp.h).
 *
 * The FP16 casts are checked against the compiler's _Float16 conversions
 * (GCC on x86-64 rounds to nearest even in software), on every half and on
 * FP32 values around every rounding boundary; bfloat16 against a reference
 * that rounds through double. The scaler is driven through its states. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "engine/amp.h"
#include "engine/elementwise.h"
#include "engine/rng.h"

static uint16_t ref_f16_bits(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

static float ref_f16_value(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, sizeof h);
    return (float)h;
}

static bool is_nan_f16(uint16_t u)
{
    return (u & 0x7c00u) == 0x7c00u && (u & 0x3ffu);
}

/* Every half widens exactly and narrows back to itself. */
static void test_f16_every_half(void **state)
{
    for (uint32_t u = 0; u <= 0xffffu; u++) {
        float f = ew_f16_to_f32((unsigned short)u);
        if (is_nan_f16((uint16_t)u)) {
            assert_true(isnan(f));
            assert_true(is_nan_f16(ew_f32_to_f16(f)));
            continue;
        }
        float want = ref_f16_value((uint16_t)u);
        if (memcmp(&f, &want, sizeof f) != 0) {
            print_error("half 0x%04x widens to %.9g, not %.9g\n", u, (double)f, (double)want);
            fail();
        }
        if (ew_f32_to_f16(f) != u) {
            print_error("half 0x%04x does not narrow back (0x%04x)\n", u, ew_f32_to_f16(f));
            fail();
        }
    }
}

static void check_f16(float f)
{
    uint16_t got = ew_f32_to_f16(f), want = ref_f16_bits(f);
    if (got != want && !(isnan(f) && is_nan_f16(got))) {
        print_error("f32 %.9g (0x%08x) -> half 0x%04x, expected 0x%04x\n", (double)f,
                    ew_f32_bits(f), got, want);
        fail();
    }
}

/* Narrowing: around every boundary between two halves (the midpoint, one ulp
 * either side: ties go to even), at the overflow and underflow edges, and at
 * random FP32 values over the whole range. */
static void test_f16_rounding(void **state)
{
    for (uint32_t u = 0; u < 0x7c00u; u++) {
        float lo = ew_f16_to_f32((unsigned short)u), hi = ew_f16_to_f32((unsigned short)(u + 1));
        float mid = (float)(((double)lo + (double)hi) / 2);     /* exact in FP32 */
        const float probes[] = { lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY) };
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
            check_f16(probes[k]);
            check_f16(-probes[k]);
        }
    }
    const float edges[] = { 65504.0f, 65519.99f, 65520.0f, 1e10f, INFINITY, -INFINITY, NAN,
                            0x1p-24f, 0x1p-25f, nextafterf(0x1p-25f, 1.0f), 0x1p-26f, 0.0f, -0.0f,
                            0x1p-14f, nextafterf(0x1p-14f, 0.0f), 1e-30f, 3.0e38f };
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
        check_f16(edges[k]);
    assert_int_equal(ew_f32_to_f16(65520.0f), 0x7c00);          /* overflow to infinity */
    assert_true(isinf(ew_round_f16(70000.0f)));
    assert_true(ew_round_f16(1e-9f) == 0.0f);                    /* underflow to zero */
    rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)rng_next(&r);
        check_f16(ew_bits_f32(bits));
    }
}

/* bfloat16: the FP32 value rounded to 8 significant bits, nearest even,
 * computed through double (which holds every FP32 exactly). */
static uint16_t ref_bf16(float f)
{
    if (isnan(f))
        return 0x7fc0;
    if (f == 0.0f || isinf(f))
        return (uint16_t)(ew_f32_bits(f) >> 16);
    int e;
    double m = frexp((double)f, &e);            /* |m| in [0.5, 1) */
    double scaled = ldexp(m, 8), rounded = nearbyint(scaled);   /* round-half-even mode */
    double v = ldexp(rounded, e - 8);
    if (fabs(v) > 3.3895313892515355e38)        /* beyond the largest bfloat16 */
        return (uint16_t)(f < 0 ? 0xff80 : 0x7f80);
    float vf = (float)v;
    return (uint16_t)(ew_f32_bits(vf) >> 16);
}

static void test_bf16(void **state)
{
    rng r;
    rng_seed(&r, 11);
    for (int i = 0; i < 2000000; i++) {
        float f = ew_bits_f32((uint32_t)rng_next(&r));
        if (isnan(f) || fpclassify(f) == FP_SUBNORMAL)
            continue;                           /* frexp's subnormal scaling differs; below */
        uint16_t got = ew_f32_to_bf16(f), want = ref_bf16(f);
        if (got != want) {
            print_error("f32 %.9g (0x%08x) -> bf16 0x%04x, expected 0x%04x\n", (double)f,
                        ew_f32_bits(f), got, want);
            fail();
        }
        /* widening the result is exact and narrowing it again changes nothing */
        assert_int_equal(ew_f32_to_bf16(ew_bf16_to_f32(got)), got);
    }
    /* ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    assert_int_equal(ew_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(ew_f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
    assert_int_equal(ew_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_true(isnan(ew_bf16_to_f32(ew_f32_to_bf16(NAN))));
    assert_true(isinf(ew_bf16_to_f32(ew_f32_to_bf16(3.4e38f))));   /* rounds past the largest */
    assert_int_equal(ew_f32_to_bf16(0x1p-130f), 0x0008);           /* subnormals keep their top bits */
}

static void test_unscale(void **state)
{
    float g = 1024.0f;
    assert_false(ew_unscale(&g, 1.0f / 65536.0f));
    assert_true(g == 1024.0f / 65536.0f);
    g = INFINITY;
    assert_true(ew_unscale(&g, 0.5f));
    g = NAN;
    assert_true(ew_unscale(&g, 0.5f));
    g = 3e38f;
    assert_true(ew_unscale(&g, 4.0f));          /* the product overflows */
}

/* ---- the scaler ------------------------------------------------------------- */

static void test_scaler_starts_and_halves(void **state)
{
    amp_scaler s;
    amp_scaler_init(&s, true);
    assert_true(s.scale == 65536.0f);
    assert_int_equal(amp_scaler_update(&s, false), AMP_APPLY);
    assert_int_equal(s.clean, 1);
    assert_int_equal(amp_scaler_update(&s, true), AMP_SKIP);
    assert_true(s.scale == 32768.0f);
    assert_int_equal(s.clean, 0);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(amp_scaler_update(&s, true), AMP_SKIP);
    assert_true(s.scale == 16384.0f);
    assert_int_equal(s.skipped, 2);
}

static void test_scaler_grows_after_interval(void **state)
{
    amp_scaler s;
    amp_scaler_init(&s, true);
    for (int i = 0; i < AMP_GROWTH_INTERVAL - 1; i++)
        assert_int_equal(amp_scaler_update(&s, false), AMP_APPLY);
    assert_true(s.scale == 65536.0f);
    assert_int_equal(amp_scaler_update(&s, false), AMP_APPLY);
    assert_true(s.scale == 131072.0f);
    assert_int_equal(s.clean, 0);
    /* an overflow resets the count: growth needs a full interval again */
    for (int i = 0; i < AMP_GROWTH_INTERVAL - 1; i++)
        amp_scaler_update(&s, false);
    amp_scaler_update(&s, true);
    for (int i = 0; i < AMP_GROWTH_INTERVAL - 1; i++)
        amp_scaler_update(&s, false);
    assert_true(s.scale == 65536.0f);
    /* and it stops at the ceiling */
    s.scale = AMP_SCALE_MAX;
    s.clean = AMP_GROWTH_INTERVAL - 1;
    amp_scaler_update(&s, false);
    assert_true(s.scale == AMP_SCALE_MAX && isfinite(s.scale));
}

static void test_scaler_floor_diverges(void **state)
{
    amp_scaler s;
    amp_scaler_init(&s, true);
    int skips = 0;
    amp_verdict v;
    while ((v = amp_scaler_update(&s, true)) == AMP_SKIP)
        skips++;
    assert_int_equal(v, AMP_DIVERGED);
    assert_int_equal(skips, 16);                /* 2^16 halved 16 times is 1, the floor */
    assert_true(s.scale < AMP_SCALE_FLOOR);
}

static void test_scaler_disabled(void **state)
{
    amp_scaler s;
    amp_scaler_init(&s, false);
    assert_true(s.scale == 1.0f);
    for (int i = 0; i < 3 * AMP_GROWTH_INTERVAL; i++)
        assert_int_equal(amp_scaler_update(&s, false), AMP_APPLY);
    assert_true(s.scale == 1.0f);
    assert_int_equal(amp_scaler_update(&s, true), AMP_DIVERGED);
    assert_int_equal(s.skipped, 0);
}

static void test_scaler_restore(void **state)
{
    amp_scaler s;
    amp_scaler_init(&s, true);
    assert_true(amp_scaler_restore(&s, true, 8192.0, 17, 3));
    assert_true(s.scale == 8192.0f && s.clean == 17 && s.skipped == 3);
    amp_scaler keep = s;
    assert_false(amp_scaler_restore(&s, true, 1000.0, 0, 0));      /* not a power of two */
    assert_false(amp_scaler_restore(&s, true, NAN, 0, 0));
    assert_false(amp_scaler_restore(&s, true, 8192.0, -1, 0));
    assert_false(amp_scaler_restore(&s, true, 8192.0, AMP_GROWTH_INTERVAL, 0));
    assert_false(amp_scaler_restore(&s, false, 8192.0, 0, 0));     /* no scaling: S = 1 */
    assert_memory_equal(&s, &keep, sizeof s);
}

/* The op lists name every layer kind, matrix products in 16 bits. */
static void test_op_lists(void **state)
{
    assert_int_equal(amp_layer_class(LAYER_CONV2D), AMP_LOW);
    assert_int_equal(amp_layer_class(LAYER_DENSE), AMP_LOW);
    for (int k = 0; k <= LAYER_CONCAT; k++)
        if (k != LAYER_CONV2D && k != LAYER_DENSE)
            assert_int_equal(amp_layer_class((layer_kind)k), AMP_INPUT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_every_half),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_unscale),
        cmocka_unit_test(test_scaler_starts_and_halves),
        cmocka_unit_test(test_scaler_grows_after_interval),
        cmocka_unit_test(test_scaler_floor_diverges),
        cmocka_unit_test(test_scaler_disabled),
        cmocka_unit_test(test_scaler_restore),
        cmocka_unit_test(test_op_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
