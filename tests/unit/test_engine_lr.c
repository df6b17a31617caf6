/* Learning-rate policies (engine/lr.h): each kind against its closed form at
 * chosen steps, the linear warm-up, and the JSON form with its errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "engine/lr.h"

#define PI 3.14159265358979323846

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)))) {
        print_error("lr %.17g, expected %.17g\n", got, want);
        fail();
    }
}

static lr_policy parse(const char *json, double base, int64_t max_steps, int64_t per_epoch)
{
    char err[256] = "";
    cJSON *o = cJSON_Parse(json);
    assert_non_null(o);
    lr_policy p;
    bool unknown = true;
    int rc = lr_from_json(o, base, max_steps, per_epoch, &p, &unknown, err, sizeof err);
    if (rc != 0)
        print_error("%s: %s\n", json, err);
    assert_int_equal(rc, 0);
    assert_false(unknown);
    cJSON_Delete(o);
    return p;
}

static void test_fixed_step_multistep(void **state)
{
    lr_policy p = lr_fixed(0.1);
    near(lr_at(&p, 0), 0.1);
    near(lr_at(&p, 123456), 0.1);
    p = parse("{\"type\": \"step\", \"step_size\": 30, \"gamma\": 0.5}", 0.1, 0, 10);
    near(lr_at(&p, 0), 0.1);
    near(lr_at(&p, 29), 0.1);
    near(lr_at(&p, 30), 0.05);
    near(lr_at(&p, 95), 0.1 * 0.125);
    p = parse("{\"type\": \"multistep\", \"milestones\": [10, 25, 40]}", 1.0, 0, 10);
    near(lr_at(&p, 9), 1.0);
    near(lr_at(&p, 10), 0.1);                 /* gamma defaults to 0.1 */
    near(lr_at(&p, 24), 0.1);
    near(lr_at(&p, 25), 0.01);
    near(lr_at(&p, 1000), 0.001);
}

static void test_exponential_polynomial_cosine(void **state)
{
    lr_policy p = parse("{\"type\": \"exponential\", \"gamma\": 0.99}", 0.2, 0, 10);
    near(lr_at(&p, 0), 0.2);
    near(lr_at(&p, 7), 0.2 * pow(0.99, 7));
    p = parse("{\"type\": \"polynomial\", \"power\": 2}", 0.5, 100, 10);
    near(lr_at(&p, 0), 0.5);
    near(lr_at(&p, 25), 0.5 * 0.75 * 0.75);
    near(lr_at(&p, 100), 0);
    near(lr_at(&p, 150), 0);
    p = parse("{\"type\": \"cosine\", \"min_lr\": 0.001}", 0.1, 200, 10);
    near(lr_at(&p, 0), 0.1);
    near(lr_at(&p, 100), 0.001 + 0.099 * 0.5);
    near(lr_at(&p, 50), 0.001 + 0.099 * (1 + cos(PI / 4)) / 2);
    near(lr_at(&p, 200), 0.001);
}

static void test_warmup(void **state)
{
    lr_policy p = parse("{\"type\": \"step\", \"step_size\": 3, \"gamma\": 0.5, "
                        "\"warmup_steps\": 4}", 0.8, 0, 10);
    near(lr_at(&p, 0), 0.8 * 1 / 4);
    near(lr_at(&p, 2), 0.8 * 3 / 4);
    near(lr_at(&p, 3), 0.4 * 4 / 4);          /* the policy's rate times (t + 1) / W */
    near(lr_at(&p, 4), 0.4);
    p = parse("{\"type\": \"cosine\", \"warmup_epochs\": 2}", 0.1, 1000, 25);
    assert_int_equal(p.warmup_steps, 50);
    near(lr_at(&p, 9), 0.1 * (1 + cos(PI * 9 / 1000)) / 2 * 10 / 50);
    near(lr_at(&p, 50), 0.1 * (1 + cos(PI * 50 / 1000)) / 2);
}

static void test_json_errors(void **state)
{
    struct {
        const char *json;
        bool unknown;
        const char *msg;
    } cases[] = {
        { "{\"type\": \"step\", \"gamma\": 0.5}", false,
          "lr_policy.step_size must be an integer >= 1" },
        { "{\"type\": \"step\", \"step_size\": 3, \"power\": 2}", true,
          "unknown field \"lr_policy.power\" for lr_policy type step" },
        { "{\"type\": \"fixed\", \"warmup\": 2}", true,
          "unknown field \"lr_policy.warmup\" for lr_policy type fixed" },
        { "{\"type\": \"linear\"}", false,
          "lr_policy.type must be one of fixed, step, multistep, exponential, polynomial, cosine" },
        { "{\"type\": \"exponential\", \"gamma\": 1.5}", false,
          "lr_policy.gamma must be a number above 0 and at most 1" },
        { "{\"type\": \"multistep\", \"milestones\": [5, 5]}", false,
          "lr_policy.milestones must be increasing integers >= 1" },
        { "{\"type\": \"cosine\", \"min_lr\": 1}", false, "lr_policy.min_lr must be a number from 0 to lr" },
        { "{\"type\": \"fixed\", \"warmup_steps\": 2, \"warmup_epochs\": 1}", false,
          "lr_policy: give warmup_steps or warmup_epochs, not both" },
        { "{\"type\": \"fixed\", \"warmup_steps\": -1}", false,
          "lr_policy.warmup_steps must be an integer >= 0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        cJSON *o = cJSON_Parse(cases[i].json);
        lr_policy p;
        bool unknown = !cases[i].unknown;
        assert_int_equal(lr_from_json(o, 0.1, 100, 10, &p, &unknown, err, sizeof err), -1);
        assert_string_equal(err, cases[i].msg);
        assert_int_equal(unknown, cases[i].unknown);
        cJSON_Delete(o);
    }
}

/* The JSON a job.json holds reads back as the same policy. */
static void test_json_round_trip(void **state)
{
    lr_policy p = parse("{\"type\": \"multistep\", \"milestones\": [3, 9], \"gamma\": 0.2, "
                        "\"warmup_epochs\": 1}", 0.3, 50, 7);
    cJSON *o = cJSON_CreateObject();
    assert_int_equal(lr_to_json(&p, o), 0);
    char *text = cJSON_PrintUnformatted(o);
    lr_policy q = parse(text, 0.3, 50, 7);
    for (int64_t t = 0; t < 60; t++)
        assert_true(lr_at(&p, t) == lr_at(&q, t));
    assert_int_equal(q.warmup_steps, 7);
    cJSON_free(text);
    cJSON_Delete(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_step_multistep),
        cmocka_unit_test(test_exponential_polynomial_cosine),
        cmocka_unit_test(test_warmup),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_json_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
