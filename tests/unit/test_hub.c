/* tests/unit/test_hub.c: live event streams (jobs/hub.h). */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "jobs/hub.h"

static void ids_start_at_one_and_increase(void **state)
{
    (void)state;
    hub *h = hub_create();
    assert_int_equal(hub_publish(h, 1, "metric", "{}"), 0);     /* not open yet */
    hub_open(h, 1);
    hub_open(h, 2);
    assert_int_equal(hub_publish(h, 1, "metric", "{\"v\":1}"), 1);
    assert_int_equal(hub_publish(h, 1, "progress", "{\"v\":2}"), 2);
    assert_int_equal(hub_publish(h, 2, "metric", "{\"w\":1}"), 1);  /* ids are per job */
    assert_int_equal(hub_publish(h, 1, "status", "{\"v\":3}"), 3);

    hub_event ev[8];
    bool live, ended, gap;
    size_t n = hub_read(h, 1, 0, ev, 8, &live, &ended, &gap);
    assert_int_equal(n, 3);
    assert_true(live);
    assert_false(ended);
    assert_false(gap);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ev[i].id, i + 1);
    assert_string_equal(ev[0].type, "metric");
    assert_string_equal(ev[1].type, "progress");
    assert_string_equal(ev[2].type, "status");
    assert_string_equal(ev[1].data, "{\"v\":2}");
    for (size_t i = 0; i < n; i++)
        hub_event_clear(&ev[i]);

    /* After id 2: only 3. max limits the count. */
    n = hub_read(h, 1, 2, ev, 8, &live, &ended, &gap);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].id, 3);
    hub_event_clear(&ev[0]);
    n = hub_read(h, 1, 0, ev, 2, &live, &ended, &gap);
    assert_int_equal(n, 2);
    assert_int_equal(ev[1].id, 2);
    hub_event_clear(&ev[0]);
    hub_event_clear(&ev[1]);

    /* A job never opened is not live. */
    n = hub_read(h, 99, 0, ev, 8, &live, &ended, &gap);
    assert_int_equal(n, 0);
    assert_false(live);
    hub_destroy(h);
}

/* A finished stream opened again (a resumed job): ids go on, and a reader
 * from the start sees only the new run, not the earlier run's final status. */
static void reopened_stream_serves_the_new_run(void **state)
{
    (void)state;
    hub *h = hub_create();
    hub_open(h, 7);
    hub_publish(h, 7, "metric", "{}");
    hub_publish(h, 7, "status", "{\"status\":\"cancelled\"}");
    hub_finish(h, 7);
    hub_open(h, 7);
    hub_event ev[4];
    bool live, ended, gap;
    size_t n = hub_read(h, 7, 0, ev, 4, &live, &ended, &gap);
    assert_int_equal(n, 0);                   /* nothing of the new run yet */
    assert_true(live);
    assert_false(ended);
    assert_false(gap);
    assert_int_equal(hub_publish(h, 7, "status", "{\"status\":\"running\"}"), 3);
    n = hub_read(h, 7, 0, ev, 4, &live, &ended, &gap);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].id, 3);
    assert_string_equal(ev[0].data, "{\"status\":\"running\"}");
    hub_event_clear(&ev[0]);
    n = hub_read(h, 7, 1, ev, 4, &live, &ended, &gap);   /* a reader of the earlier run */
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].id, 3);
    hub_event_clear(&ev[0]);
    hub_destroy(h);
}

static void finish_ends_after_last_event(void **state)
{
    (void)state;
    hub *h = hub_create();
    hub_open(h, 5);
    hub_publish(h, 5, "metric", "{}");
    hub_publish(h, 5, "status", "{\"status\":\"done\"}");
    hub_finish(h, 5);
    assert_int_equal(hub_publish(h, 5, "metric", "{}"), 0);     /* nothing after the end */

    hub_event ev[4];
    bool live, ended, gap;
    size_t n = hub_read(h, 5, 0, ev, 1, &live, &ended, &gap);
    assert_int_equal(n, 1);
    assert_false(ended);                      /* one event still to take */
    hub_event_clear(&ev[0]);
    n = hub_read(h, 5, 1, ev, 4, &live, &ended, &gap);
    assert_int_equal(n, 1);
    assert_true(ended);
    assert_true(live);
    hub_event_clear(&ev[0]);
    n = hub_read(h, 5, 2, ev, 4, &live, &ended, &gap);
    assert_int_equal(n, 0);
    assert_true(ended);

    /* Reopened (a restarted job): ids continue, not ended any more. */
    hub_open(h, 5);
    assert_int_equal(hub_publish(h, 5, "status", "{}"), 3);
    n = hub_read(h, 5, 2, ev, 4, &live, &ended, &gap);
    assert_int_equal(n, 1);
    assert_false(ended);
    hub_event_clear(&ev[0]);
    hub_destroy(h);
}

static void gap_when_reader_falls_behind(void **state)
{
    (void)state;
    hub *h = hub_create();
    hub_open(h, 1);
    const uint64_t total = HUB_RING + 10;
    char buf[32];
    for (uint64_t i = 1; i <= total; i++) {
        snprintf(buf, sizeof buf, "{\"i\":%llu}", (unsigned long long)i);
        assert_int_equal(hub_publish(h, 1, "metric", buf), i);
    }
    hub_event *ev = calloc(HUB_RING + 16, sizeof *ev);
    bool live, ended, gap;
    size_t n = hub_read(h, 1, 0, ev, HUB_RING + 16, &live, &ended, &gap);
    assert_true(gap);
    assert_int_equal(n, HUB_RING);
    assert_int_equal(ev[0].id, 11);           /* the oldest kept */
    assert_string_equal(ev[0].data, "{\"i\":11}");
    assert_int_equal(ev[n - 1].id, total);
    for (size_t i = 0; i < n; i++)
        hub_event_clear(&ev[i]);

    /* A reader that is behind by less than the ring has no gap. */
    n = hub_read(h, 1, 10, ev, HUB_RING + 16, &live, &ended, &gap);
    assert_false(gap);
    assert_int_equal(n, HUB_RING);
    for (size_t i = 0; i < n; i++)
        hub_event_clear(&ev[i]);
    free(ev);
    hub_destroy(h);
}

typedef struct counter {
    atomic_int calls;
} counter;

static void count_wake(void *arg)
{
    atomic_fetch_add(&((counter *)arg)->calls, 1);
}

static void wake_and_unsubscribe(void **state)
{
    (void)state;
    hub *h = hub_create();
    counter a = { 0 }, b = { 0 }, other = { 0 };
    hub_open(h, 1);
    hub_open(h, 2);
    void *ha = hub_subscribe(h, 1, count_wake, &a);
    void *hb = hub_subscribe(h, 1, count_wake, &b);
    void *ho = hub_subscribe(h, 2, count_wake, &other);
    assert_non_null(ha);
    hub_publish(h, 1, "metric", "{}");
    hub_publish(h, 1, "metric", "{}");
    assert_int_equal(atomic_load(&a.calls), 2);
    assert_int_equal(atomic_load(&b.calls), 2);
    assert_int_equal(atomic_load(&other.calls), 0);   /* another job's publishes */

    hub_unsubscribe(h, ha);
    hub_publish(h, 1, "metric", "{}");
    assert_int_equal(atomic_load(&a.calls), 2);
    assert_int_equal(atomic_load(&b.calls), 3);
    hub_finish(h, 1);                                  /* finish wakes too */
    assert_int_equal(atomic_load(&b.calls), 4);
    hub_unsubscribe(h, hb);
    hub_unsubscribe(h, ho);
    hub_unsubscribe(h, NULL);
    hub_destroy(h);
}

/* ---- threads -------------------------------------------------------------- */

#define PUBLISHES 20000

typedef struct shared {
    hub *h;
    atomic_int wakes;
    atomic_bool in_wake;          /* a wake is running on the publisher's thread */
    atomic_int after_unsub_calls;
    atomic_bool unsubscribed;
    atomic_ullong reader_last;    /* the publisher stays within half a ring of the reader */
} shared;

static void *publisher(void *arg)
{
    shared *sh = arg;
    char buf[32];
    for (int i = 1; i <= PUBLISHES; i++) {
        snprintf(buf, sizeof buf, "{\"i\":%d}", i);
        while ((uint64_t)i > atomic_load(&sh->reader_last) + HUB_RING / 2)
            sched_yield();
        if (hub_publish(sh->h, 1, "metric", buf) != (uint64_t)i)
            abort();
    }
    hub_finish(sh->h, 1);
    return NULL;
}

static void slow_wake(void *arg)
{
    shared *sh = arg;
    atomic_store(&sh->in_wake, true);
    if (atomic_load(&sh->unsubscribed))
        atomic_fetch_add(&sh->after_unsub_calls, 1);
    atomic_fetch_add(&sh->wakes, 1);
    struct timespec ts = { 0, 20000 };   /* 20 us: widens the window for a racing unsubscribe */
    nanosleep(&ts, NULL);
    if (atomic_load(&sh->unsubscribed))   /* still running after hub_unsubscribe returned */
        atomic_fetch_add(&sh->after_unsub_calls, 1);
    atomic_store(&sh->in_wake, false);
}

static void concurrent_publisher_and_reader(void **state)
{
    (void)state;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.h = hub_create();
    hub_open(sh.h, 1);
    void *sub = hub_subscribe(sh.h, 1, slow_wake, &sh);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, publisher, &sh), 0);

    /* Read everything as it comes: ids without holes, data matching ids. */
    uint64_t last = 0;
    bool live = false, ended = false, gap = false, unsubscribed = false;
    hub_event ev[64];
    while (!ended) {
        size_t n = hub_read(sh.h, 1, last, ev, 64, &live, &ended, &gap);
        assert_false(gap);             /* the publisher never gets a ring ahead */
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(ev[i].id, last + 1);
            char want[32];
            snprintf(want, sizeof want, "{\"i\":%llu}", (unsigned long long)ev[i].id);
            assert_string_equal(ev[i].data, want);
            last = ev[i].id;
            hub_event_clear(&ev[i]);
        }
        atomic_store(&sh.reader_last, last);
        /* Half-way, unsubscribe while wakes are running on the other thread. */
        if (!unsubscribed && last > PUBLISHES / 2) {
            struct timespec t0, t1;   /* spin (bounded) until a wake is in flight */
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do
                clock_gettime(CLOCK_MONOTONIC, &t1);
            while (!atomic_load(&sh.in_wake) && t1.tv_sec - t0.tv_sec < 1);
            hub_unsubscribe(sh.h, sub);
            atomic_store(&sh.unsubscribed, true);
            unsubscribed = true;
        }
        if (!n && !ended)
            sched_yield();
    }
    pthread_join(t, NULL);
    assert_int_equal(last, PUBLISHES);
    assert_true(unsubscribed);
    assert_true(atomic_load(&sh.wakes) > 0);
    /* After hub_unsubscribe returned, the callback neither ran nor was still running. */
    assert_int_equal(atomic_load(&sh.after_unsub_calls), 0);
    hub_destroy(sh.h);
}

static void concurrent_subscribe_churn(void **state)
{
    (void)state;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.h = hub_create();
    hub_open(sh.h, 1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, publisher, &sh), 0);
    atomic_store(&sh.reader_last, UINT64_MAX / 2);   /* no reader here: never throttle */
    /* Subscribing and unsubscribing while publishes run must neither crash nor
     * leave a callback running on freed state. */
    for (int i = 0; i < 2000; i++) {
        counter *c = calloc(1, sizeof *c);
        void *s = hub_subscribe(sh.h, 1, count_wake, c);
        sched_yield();
        hub_unsubscribe(sh.h, s);
        free(c);                       /* use-after-free here would show under ASan */
    }
    pthread_join(t, NULL);
    hub_destroy(sh.h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids_start_at_one_and_increase),
        cmocka_unit_test(finish_ends_after_last_event),
        cmocka_unit_test(reopened_stream_serves_the_new_run),
        cmocka_unit_test(gap_when_reader_falls_behind),
        cmocka_unit_test(wake_and_unsubscribe),
        cmocka_unit_test(concurrent_publisher_and_reader),
        cmocka_unit_test(concurrent_subscribe_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
