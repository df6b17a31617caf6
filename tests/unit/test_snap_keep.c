/* Unit tests of jobs/snap_keep.c: the worker's keeping decisions.
 *
 * - Pruning (snap_keep_plan): keep_checkpoints N keeps the last N snapshots
 *   and the best, and the pinned one (the resume's); 0 keeps all.
 * - Early stopping (es_update) on controlled sequences: a loss that rises,
 *   one that improves by less than min_delta, ties (no improvement), an
 *   accuracy (higher is better), NaN values, and the message.
 * - The record of the epochs (epochs.json): written, read back, cut back to
 *   a resumed epoch, and malformed files refused; replaying the record gives
 *   the same decision as the run that wrote it.
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "engine/fileio.h"
#include "jobs/snap_keep.h"

/* A list of snapshots of the given epochs, best `best`. */
static snap_list list_of(const int *epochs, int n, int best)
{
    snap_list l = { .metric = SNAP_VAL_ACCURACY, .best = best, .n = n };
    l.items = calloc((size_t)n, sizeof *l.items);
    assert_non_null(l.items);
    for (int i = 0; i < n; i++)
        l.items[i].epoch = epochs[i];
    return l;
}

/* The epochs plan keeps, as a string "1 4 5". */
static void kept(const snap_list *l, int keep, int pinned, const char *want, int want_gone)
{
    bool k[32];
    char got[128] = "";
    int gone = snap_keep_plan(l, keep, pinned, k);
    for (int i = 0; i < l->n; i++)
        if (k[i])
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", got[0] ? " " : "", l->items[i].epoch);
    if (strcmp(got, want) != 0 || gone != want_gone)
        fail_msg("keep %d pinned %d: kept \"%s\" (%d gone), want \"%s\" (%d gone)", keep, pinned, got,
                 gone, want, want_gone);
}

static void pruning_keeps_the_last_n_and_the_best(void **state)
{
    (void)state;
    const int epochs[] = { 1, 2, 3, 4, 5, 6 };
    snap_list l = list_of(epochs, 6, 2);
    kept(&l, 0, 0, "1 2 3 4 5 6", 0);           /* keep_checkpoints absent: all */
    kept(&l, 1, 0, "2 6", 4);                   /* the last and the best */
    kept(&l, 2, 0, "2 5 6", 3);
    kept(&l, 6, 0, "1 2 3 4 5 6", 0);
    kept(&l, 10, 0, "1 2 3 4 5 6", 0);          /* more than there are */
    kept(&l, 1, 3, "2 3 6", 3);                 /* the pinned one stays too */
    l.best = 6;                                 /* the best is the last: just one */
    kept(&l, 1, 0, "6", 5);
    l.best = 0;                                 /* no metrics, no best */
    kept(&l, 2, 0, "5 6", 4);
    free(l.items);

    const int gaps[] = { 2, 4, 6, 8 };         /* snapshot_interval 2 */
    l = list_of(gaps, 4, 4);
    kept(&l, 1, 0, "4 8", 2);
    free(l.items);
    l = list_of(gaps, 0, 0);                    /* nothing saved yet */
    kept(&l, 1, 0, "", 0);
    free(l.items);
}

/* Feeds values 1..n; returns the epoch after which it says stop (0: never). */
static int stop_epoch(const jobcfg_early_stop *cfg, const double *v, int n, es_state *s)
{
    es_init(s);
    for (int e = 1; e <= n; e++)
        if (es_update(s, cfg, e, v[e - 1]))
            return e;
    return 0;
}

static void early_stopping_on_controlled_sequences(void **state)
{
    (void)state;
    es_state s;
    jobcfg_early_stop loss = { .enabled = true, .metric = SNAP_VAL_LOSS, .patience = 2 };

    /* best at 2, rising after: stops after 4 (two epochs without improvement) */
    const double rising[] = { 1.0, 0.8, 0.9, 1.1, 0.5 };
    assert_int_equal(stop_epoch(&loss, rising, 5, &s), 4);
    assert_int_equal(s.best_epoch, 2);
    assert_true(s.best == 0.8);
    assert_int_equal(s.wait, 2);

    /* an improvement resets the count */
    const double zigzag[] = { 1.0, 1.1, 0.9, 1.0, 0.8, 0.85, 0.86 };
    assert_int_equal(stop_epoch(&loss, zigzag, 7, &s), 7);
    assert_int_equal(s.best_epoch, 5);

    /* a tie is no improvement */
    const double flat[] = { 0.5, 0.5, 0.5 };
    assert_int_equal(stop_epoch(&loss, flat, 3, &s), 3);
    assert_int_equal(s.best_epoch, 1);

    /* always improving: never stops */
    const double falling[] = { 1.0, 0.9, 0.8, 0.7, 0.6, 0.5 };
    assert_int_equal(stop_epoch(&loss, falling, 6, &s), 0);
    assert_int_equal(s.best_epoch, 6);
    assert_int_equal(s.wait, 0);

    /* min_delta: improvements of 0.05 do not count when it is 0.1; the best
     * stays the value that last improved by more than 0.1 */
    jobcfg_early_stop delta = loss;
    delta.min_delta = 0.1;
    const double slow[] = { 1.0, 0.95, 0.92, 0.6 };
    assert_int_equal(stop_epoch(&delta, slow, 4, &s), 3);     /* 0.95, 0.92: not below 0.9 */
    assert_int_equal(s.best_epoch, 1);
    const double fast[] = { 1.0, 0.85, 0.7, 0.62, 0.55 };
    assert_int_equal(stop_epoch(&delta, fast, 5, &s), 0);    /* 0.62: wait 1; 0.55 beats 0.7 by 0.15 */
    assert_int_equal(s.best_epoch, 5);

    /* patience 1: the first epoch without improvement */
    jobcfg_early_stop one = loss;
    one.patience = 1;
    assert_int_equal(stop_epoch(&one, rising, 5, &s), 3);

    /* accuracy: higher is better */
    jobcfg_early_stop acc = { .enabled = true, .metric = SNAP_VAL_ACCURACY, .patience = 3 };
    const double accs[] = { 0.5, 0.7, 0.69, 0.7, 0.65, 0.9 };
    assert_int_equal(stop_epoch(&acc, accs, 6, &s), 5);
    assert_int_equal(s.best_epoch, 2);

    /* NaN is never an improvement, and never the first best */
    const double nans[] = { NAN, 1.0, NAN, NAN };
    assert_int_equal(stop_epoch(&loss, nans, 4, &s), 4);
    assert_int_equal(s.best_epoch, 2);
    const double all_nan[] = { NAN, NAN };
    assert_int_equal(stop_epoch(&loss, all_nan, 2, &s), 2);
    assert_int_equal(s.best_epoch, 0);
    char msg[256];
    es_message(&s, &loss, msg, sizeof msg);
    assert_string_equal(msg, "stopped early after epoch 2: val/loss has had no finite value for 2 epochs");
}

static void the_message_names_the_epochs(void **state)
{
    (void)state;
    es_state s;
    jobcfg_early_stop cfg = { .enabled = true, .metric = SNAP_VAL_LOSS, .patience = 5 };
    double v[14];
    for (int i = 0; i < 14; i++)
        v[i] = i < 9 ? 1.0 - 0.1 * i : 1.0;       /* best at epoch 9, then worse */
    assert_int_equal(stop_epoch(&cfg, v, 14, &s), 14);
    char msg[256];
    es_message(&s, &cfg, msg, sizeof msg);
    assert_string_equal(msg, "stopped early after epoch 14: val/loss has not improved for 5 epochs; "
                             "best epoch 9");
}

static cJSON *item(int epoch, double val_loss)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "epoch", epoch);
    cJSON_AddNumberToObject(o, "step", epoch * 10);
    cJSON *m = cJSON_AddObjectToObject(o, "metrics");
    cJSON_AddNumberToObject(m, "val/loss", val_loss);
    cJSON_AddNumberToObject(m, "val/accuracy", 1 - val_loss);
    return o;
}

static void write_text(const char *dir, const char *text)
{
    char path[PATH_MAX], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, SNAP_EPOCHS_JSON);
    assert_int_equal(fio_write_atomic(path, text, strlen(text), err, sizeof err), 0);
}

static void the_record_survives_a_resume(void **state)
{
    (void)state;
    char dir[] = "/tmp/kiln-snapkeep-XXXXXX", err[512];
    assert_non_null(mkdtemp(dir));
    cJSON *items = snap_epochs_load(dir, err, sizeof err);      /* none yet: empty */
    assert_non_null(items);
    assert_int_equal(cJSON_GetArraySize(items), 0);
    const double losses[] = { 1.0, 0.5, 0.625, 0.75, 0.875 };   /* exact in binary and in text */
    jobcfg_early_stop cfg = { .enabled = true, .metric = SNAP_VAL_LOSS, .patience = 3 };
    es_state run;
    es_init(&run);
    for (int e = 1; e <= 4; e++) {
        cJSON_AddItemToArray(items, item(e, losses[e - 1]));
        assert_int_equal(snap_epochs_save(dir, items, err, sizeof err), 0);
        assert_false(es_update(&run, &cfg, e, losses[e - 1]));
    }
    cJSON_Delete(items);

    /* a worker resuming from epoch 3's checkpoint: epoch 4 goes, the state
     * replayed from 1..3 then fed epochs 4 and 5 stops where the run does */
    items = snap_epochs_load(dir, err, sizeof err);
    assert_non_null(items);
    assert_int_equal(cJSON_GetArraySize(items), 4);
    assert_int_equal(snap_epochs_truncate(items, 3), 1);
    assert_int_equal(cJSON_GetArraySize(items), 3);
    es_state again;
    es_init(&again);
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        int e = cJSON_GetObjectItemCaseSensitive(it, "epoch")->valueint;
        assert_false(es_update(&again, &cfg, e, snap_epochs_value(it, cfg.metric)));
    }
    assert_false(es_update(&again, &cfg, 4, losses[3]));
    assert_true(es_update(&again, &cfg, 5, losses[4]));
    assert_true(es_update(&run, &cfg, 5, losses[4]));
    assert_memory_equal(&again, &run, sizeof run);
    assert_true(isnan(snap_epochs_value(cJSON_GetArrayItem(items, 0), SNAP_TRAIN_LOSS)));
    assert_true(snap_epochs_value(cJSON_GetArrayItem(items, 1), SNAP_VAL_ACCURACY) == 1 - 0.5);
    cJSON_Delete(items);

    /* malformed records are refused, naming the file */
    static const char *const bad[] = {
        "not json", "{\"items\": {}}", "{\"items\": [{\"epoch\": 0, \"metrics\": {}}]}",
        "{\"items\": [{\"epoch\": 2, \"metrics\": {}}, {\"epoch\": 2, \"metrics\": {}}]}",
        "{\"items\": [{\"epoch\": 1.5, \"metrics\": {}}]}", "{\"items\": [{\"epoch\": 1}]}",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_text(dir, bad[k]);
        err[0] = '\0';
        cJSON *x = snap_epochs_load(dir, err, sizeof err);
        if (x)
            fail_msg("%s: accepted", bad[k]);
        assert_non_null(strstr(err, SNAP_EPOCHS_JSON));
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, SNAP_EPOCHS_JSON);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pruning_keeps_the_last_n_and_the_best),
        cmocka_unit_test(early_stopping_on_controlled_sequences),
        cmocka_unit_test(the_message_names_the_epochs),
        cmocka_unit_test(the_record_survives_a_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
