/* tests/unit/test_tbevents.c: TensorBoard event files read back byte by byte:
 * record framing and both masked CRCs, the wire bytes of an event, and a decode
 * of every record with the protobuf-c code generated from our .proto; the
 * SessionLog of a resumed run and TensorBoard's HParams records, parsed back
 * and checked byte by byte; a job's hyper-parameters (jobs/hparams.h). */
#define _GNU_SOURCE   /* nftw, mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include "data_util.h"
#include "jobs/hparams.h"
#include "jobs/tbevents.h"
#include "hparams.pb-c.h"       /* Tensorboard__Hparams__HParamsPluginData */
#include "struct.pb-c.h"        /* Google__Protobuf__Value */
#include "tensorboard.pb-c.h"   /* Tensorflow__Event */

typedef struct record {
    const uint8_t *data;
    size_t len;
} record;

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Splits a file into records, checking both CRCs of each; returns the count. */
static size_t parse_records(const uint8_t *buf, size_t n, record *out, size_t max) {
    size_t off = 0, k = 0;
    while (off < n) {
        assert_true(n - off >= 12);
        uint64_t len = get_le64(buf + off);
        assert_int_equal(get_le32(buf + off + 8), tb_masked_crc(crc32c(0, buf + off, 8)));
        assert_true(len <= n - off - 16);
        const uint8_t *data = buf + off + 12;
        assert_int_equal(get_le32(data + len), tb_masked_crc(crc32c(0, data, (size_t)len)));
        assert_true(k < max);
        out[k].data = data;
        out[k].len = (size_t)len;
        k++;
        off += 12 + (size_t)len + 4;
    }
    assert_int_equal(off, n);
    return k;
}

static void test_write_and_read_back(void **state) {
    (void)state;
    char dir[PATH_MAX], err[256] = "";
    assert_non_null(du_mkdtemp(dir, sizeof dir));
    tb_writer *w = tb_open(dir, 1700000000.75, err, sizeof err);
    assert_non_null(w);

    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    char expect[PATH_MAX + 300];
    snprintf(expect, sizeof expect, "%s/events.out.tfevents.1700000000.%s", dir, host);
    assert_string_equal(tb_path(w), expect);

    static const struct { const char *tag; int64_t step; float value; } ev[] = {
        { "train/loss", 1, 2.302585f },
        { "train/accuracy", 1, 0.125f },
        { "lr", 1, 0.01f },
        { "val/accuracy", 125, 0.0f },   /* a zero must still be written */
        { "val/loss", 125, -1.5f },
        { "train/loss", 5000000000LL, 1e-7f },
    };
    const size_t nev = sizeof ev / sizeof ev[0];
    for (size_t i = 0; i < nev; i++)
        assert_int_equal(tb_scalar(w, ev[i].tag, ev[i].step, ev[i].value, 1700000001.0 + (double)i,
                                   err, sizeof err), 0);

    /* each record is on disk before tb_close */
    size_t n = 0;
    uint8_t *buf = (uint8_t *)du_read_file(tb_path(w), &n);
    assert_non_null(buf);
    record recs[16];
    assert_int_equal(parse_records(buf, n, recs, 16), 1 + nev);
    free(buf);
    tb_close(w);

    buf = (uint8_t *)du_read_file(expect, &n);
    assert_non_null(buf);
    size_t nrec = parse_records(buf, n, recs, 16);
    assert_int_equal(nrec, 1 + nev);

    /* the first record: wall_time (field 1, double) and file_version (field 3) */
    static const char fv[] = "brain.Event:2";
    assert_int_equal(recs[0].len, 9 + 2 + strlen(fv));
    assert_int_equal(recs[0].data[0], 0x09);
    double wt;
    memcpy(&wt, recs[0].data + 1, 8);
    assert_true(wt == 1700000000.75);
    assert_int_equal(recs[0].data[9], 0x1A);
    assert_int_equal(recs[0].data[10], strlen(fv));
    assert_memory_equal(recs[0].data + 11, fv, strlen(fv));

    /* the wire bytes of the "lr" event, field numbers as TensorFlow's event.proto */
    const uint8_t *d = recs[3].data;
    assert_int_equal(recs[3].len, 9 + 2 + 2 + 2 + 2 + 2 + 5);
    assert_int_equal(d[0], 0x09);            /* wall_time, 64-bit */
    assert_int_equal(d[9], 0x10);            /* step, varint */
    assert_int_equal(d[10], 1);
    assert_int_equal(d[11], 0x2A);           /* summary, field 5, length-delimited */
    assert_int_equal(d[12], 11);
    assert_int_equal(d[13], 0x0A);           /* Summary.value, field 1 */
    assert_int_equal(d[14], 9);
    assert_int_equal(d[15], 0x0A);           /* Value.tag, field 1 */
    assert_int_equal(d[16], 2);
    assert_memory_equal(d + 17, "lr", 2);
    assert_int_equal(d[19], 0x15);           /* Value.simple_value, field 2, 32-bit */
    float f;
    memcpy(&f, d + 20, 4);
    assert_true(f == 0.01f);

    /* decode every record */
    Tensorflow__Event *e0 = tensorflow__event__unpack(NULL, recs[0].len, recs[0].data);
    assert_non_null(e0);
    assert_int_equal(e0->what_case, TENSORFLOW__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(e0->file_version, fv);
    tensorflow__event__free_unpacked(e0, NULL);
    for (size_t i = 0; i < nev; i++) {
        Tensorflow__Event *e = tensorflow__event__unpack(NULL, recs[i + 1].len, recs[i + 1].data);
        assert_non_null(e);
        assert_true(e->has_wall_time);
        assert_true(e->wall_time == 1700000001.0 + (double)i);
        assert_true(e->has_step);
        assert_int_equal(e->step, ev[i].step);
        assert_int_equal(e->what_case, TENSORFLOW__EVENT__WHAT_SUMMARY);
        assert_int_equal(e->summary->n_value, 1);
        const Tensorflow__Summary__Value *v = e->summary->value[0];
        assert_string_equal(v->tag, ev[i].tag);
        assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        assert_true(v->simple_value == ev[i].value);
        tensorflow__event__free_unpacked(e, NULL);
    }
    free(buf);
    du_rm_rf(dir);
}

static void test_open_errors(void **state) {
    (void)state;
    char dir[PATH_MAX], err[256] = "", missing[PATH_MAX + 16];
    assert_non_null(du_mkdtemp(dir, sizeof dir));
    snprintf(missing, sizeof missing, "%s/nope", dir);
    assert_null(tb_open(missing, 1.0, err, sizeof err));
    assert_non_null(strstr(err, "nope"));

    /* an existing file is never truncated or appended to */
    tb_writer *w = tb_open(dir, 42.0, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(tb_scalar(w, "lr", 1, 0.5f, 43.0, err, sizeof err), 0);
    size_t before = 0, after = 0;
    free(du_read_file(tb_path(w), &before));
    err[0] = '\0';
    assert_null(tb_open(dir, 42.0, err, sizeof err));
    assert_true(err[0] != '\0');
    free(du_read_file(tb_path(w), &after));
    assert_int_equal(before, after);
    tb_close(w);
    tb_close(NULL);
    du_rm_rf(dir);
}

/* Reads the single summary value of an event record whose metadata is the
 * HParams plugin's; returns its HParamsPluginData (free_unpacked). */
static Tensorboard__Hparams__HParamsPluginData *hparams_of(const record *r, const char *tag, int64_t step) {
    Tensorflow__Event *e = tensorflow__event__unpack(NULL, r->len, r->data);
    assert_non_null(e);
    assert_int_equal(e->step, step);
    assert_int_equal(e->what_case, TENSORFLOW__EVENT__WHAT_SUMMARY);
    assert_int_equal(e->summary->n_value, 1);
    const Tensorflow__Summary__Value *v = e->summary->value[0];
    assert_string_equal(v->tag, tag);
    assert_non_null(v->metadata);
    assert_non_null(v->metadata->plugin_data);
    assert_string_equal(v->metadata->plugin_data->plugin_name, "hparams");
    /* the plugin's NULL_TENSOR: a float tensor of shape [0] */
    assert_int_equal(v->value_case, TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR);
    assert_int_equal(v->tensor->dtype, TENSORFLOW__DATA_TYPE__DT_FLOAT);
    assert_int_equal(v->tensor->tensor_shape->n_dim, 1);
    assert_int_equal(v->tensor->tensor_shape->dim[0]->size, 0);
    assert_int_equal(v->tensor->n_float_val, 0);
    const ProtobufCBinaryData *c = &v->metadata->plugin_data->content;
    Tensorboard__Hparams__HParamsPluginData *d =
        tensorboard__hparams__hparams_plugin_data__unpack(NULL, c->len, c->data);
    assert_non_null(d);
    assert_int_equal(d->version, 0);
    tensorflow__event__free_unpacked(e, NULL);
    return d;
}

static const Google__Protobuf__Value *start_value(const Tensorboard__Hparams__SessionStartInfo *si,
                                                  const char *name) {
    for (size_t i = 0; i < si->n_hparams; i++)
        if (!strcmp(si->hparams[i]->key, name))
            return si->hparams[i]->value;
    return NULL;
}

/* A resumed run's SessionLog START, and the HParams records, written and
 * parsed back with the protobuf-c code of our .proto files; the wire bytes
 * of the START event and of the session_end_info record checked by hand
 * against TensorFlow's event.proto / summary.proto / tensor.proto and
 * TensorBoard's plugin_data.proto field numbers. */
static void test_session_log_and_hparams(void **state) {
    (void)state;
    char dir[PATH_MAX], err[256] = "";
    assert_non_null(du_mkdtemp(dir, sizeof dir));
    tb_writer *w = tb_open(dir, 1700000000.0, err, sizeof err);
    assert_non_null(w);
    cJSON *hp = cJSON_Parse("{\"solver.lr\": 0.01, \"precision\": \"amp-bf16\", "
                            "\"augmentation.mirror\": true, \"batch_size\": 64, "
                            "\"skipped\": [1, 2], \"also_skipped\": null}");
    assert_non_null(hp);
    static const tb_metric_info metrics[] = {
        { "val/accuracy", true }, { "train/epoch_loss", false },
    };
    assert_int_equal(tb_session_start(w, 42, 1700000001.0, err, sizeof err), 0);
    assert_int_equal(tb_hparams_experiment(w, 42, hp, metrics, 2, 1700000001.5, err, sizeof err), 0);
    assert_int_equal(tb_hparams_start(w, 42, hp, "g1", 1700000001.25, 1700000001.5, err, sizeof err), 0);
    assert_int_equal(tb_hparams_end(w, 90, TB_STATUS_FAILURE, 1700000009.0, err, sizeof err), 0);
    tb_close(w);
    cJSON_Delete(hp);

    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    char path[PATH_MAX + 300] = "";
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, "events.out.tfevents.", 20))
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(d);
    size_t n = 0;
    uint8_t *buf = (uint8_t *)du_read_file(path, &n);
    assert_non_null(buf);
    record recs[8];
    assert_int_equal(parse_records(buf, n, recs, 8), 5);

    /* START by hand: wall_time (1, 64-bit), step (2, varint) 42, session_log
     * (field 6, length-delimited = 0x32) of 2 bytes: status (1, varint) = START 1 */
    const uint8_t *b = recs[1].data;
    assert_int_equal(recs[1].len, 9 + 2 + 4);
    assert_int_equal(b[0], 0x09);
    assert_int_equal(b[9], 0x10);
    assert_int_equal(b[10], 42);
    assert_int_equal(b[11], 0x32);
    assert_int_equal(b[12], 2);
    assert_int_equal(b[13], 0x08);
    assert_int_equal(b[14], 1);
    Tensorflow__Event *e = tensorflow__event__unpack(NULL, recs[1].len, recs[1].data);
    assert_non_null(e);
    assert_int_equal(e->what_case, TENSORFLOW__EVENT__WHAT_SESSION_LOG);
    assert_int_equal(e->session_log->status, TENSORFLOW__SESSION_LOG__SESSION_STATUS__START);
    assert_int_equal(e->step, 42);
    tensorflow__event__free_unpacked(e, NULL);

    /* the experiment: one HParamInfo a number, string or bool, typed; the metrics */
    Tensorboard__Hparams__HParamsPluginData *p = hparams_of(&recs[2], "_hparams_/experiment", 42);
    assert_int_equal(p->data_case, TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT);
    const Tensorboard__Hparams__Experiment *ex = p->experiment;
    static const struct { const char *name; int type; } infos[] = {
        { "solver.lr", TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_FLOAT64 },
        { "precision", TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_STRING },
        { "augmentation.mirror", TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_BOOL },
        { "batch_size", TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_FLOAT64 },
    };
    assert_int_equal(ex->n_hparam_infos, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(ex->hparam_infos[i]->name, infos[i].name);
        assert_int_equal(ex->hparam_infos[i]->type, infos[i].type);
    }
    assert_int_equal(ex->n_metric_infos, 2);
    assert_string_equal(ex->metric_infos[0]->name->tag, "val/accuracy");
    assert_string_equal(ex->metric_infos[0]->name->group, "");
    assert_int_equal(ex->metric_infos[0]->dataset_type, TENSORBOARD__HPARAMS__DATASET_TYPE__DATASET_VALIDATION);
    assert_string_equal(ex->metric_infos[1]->name->tag, "train/epoch_loss");
    assert_int_equal(ex->metric_infos[1]->dataset_type, TENSORBOARD__HPARAMS__DATASET_TYPE__DATASET_TRAINING);
    assert_true(ex->time_created_secs == 1700000001.5);
    tensorboard__hparams__hparams_plugin_data__free_unpacked(p, NULL);

    /* the session's start: the values, the group, the time */
    p = hparams_of(&recs[3], "_hparams_/session_start_info", 42);
    assert_int_equal(p->data_case, TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO);
    const Tensorboard__Hparams__SessionStartInfo *si = p->session_start_info;
    assert_int_equal(si->n_hparams, 4);
    const Google__Protobuf__Value *v = start_value(si, "solver.lr");
    assert_non_null(v);
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
    assert_true(v->number_value == 0.01);
    v = start_value(si, "precision");
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    assert_string_equal(v->string_value, "amp-bf16");
    v = start_value(si, "augmentation.mirror");
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
    assert_true(v->bool_value);
    assert_true(start_value(si, "batch_size")->number_value == 64);
    assert_null(start_value(si, "skipped"));
    assert_string_equal(si->group_name, "g1");
    assert_true(si->start_time_secs == 1700000001.25);
    tensorboard__hparams__hparams_plugin_data__free_unpacked(p, NULL);

    /* the end by hand: summary (5) { value (1) { tag (1) "_hparams_/session_end_info",
     * metadata (9) { plugin_data (1) { plugin_name (1) "hparams", content (2)
     * HParamsPluginData { session_end_info (4) { status (1) FAILURE 2,
     * end_time_secs (2, 64-bit) } } } }, tensor (8) { dtype (1) DT_FLOAT 1,
     * tensor_shape (2) { dim (2) {} } } } }: TensorBoard's NULL_TENSOR (its
     * hparams/metadata.py: a float vector of shape [0], 6 bytes) */
    b = recs[4].data;
    static const char tag[] = "_hparams_/session_end_info";
    const size_t tl = sizeof tag - 1;                        /* 26 */
    const size_t content = 2 + 2 + 9;                        /* 22 0B | 08 02 | 11 <8> */
    const size_t plugin = 2 + 7 + 2 + content;               /* 0A 07 "hparams" | 12 0D ... */
    const size_t meta = 2 + plugin;                          /* 0A 18 ... */
    const size_t tensor = 2 + 2 + 2;                         /* 08 01 | 12 02 | 12 00 */
    const size_t value = 2 + tl + 2 + meta + 2 + tensor;
    assert_int_equal(recs[4].len, 9 + 2 + 2 + 2 + value);
    assert_int_equal(b[9], 0x10);
    assert_int_equal(b[10], 90);
    assert_int_equal(b[11], 0x2A);                           /* summary, field 5 */
    assert_int_equal(b[12], 2 + value);
    assert_int_equal(b[13], 0x0A);                           /* Summary.value, field 1 */
    assert_int_equal(b[14], value);
    assert_int_equal(b[15], 0x0A);                           /* Value.tag, field 1 */
    assert_int_equal(b[16], tl);
    assert_memory_equal(b + 17, tag, tl);
    /* fields in number order, as protobuf serializers write them: tensor (8) first */
    static const uint8_t null_tensor[] = { 0x42, 6, 0x08, 0x01, 0x12, 0x02, 0x12, 0x00 };
    assert_memory_equal(b + 17 + tl, null_tensor, sizeof null_tensor);   /* Value.tensor, field 8 */
    const uint8_t *m = b + 17 + tl + sizeof null_tensor;
    assert_int_equal(m[0], 0x4A);                            /* Value.metadata, field 9 */
    assert_int_equal(m[1], meta);
    assert_int_equal(m[2], 0x0A);                            /* SummaryMetadata.plugin_data, field 1 */
    assert_int_equal(m[3], plugin);
    assert_int_equal(m[4], 0x0A);                            /* PluginData.plugin_name, field 1 */
    assert_int_equal(m[5], 7);
    assert_memory_equal(m + 6, "hparams", 7);
    assert_int_equal(m[13], 0x12);                           /* PluginData.content, field 2 */
    assert_int_equal(m[14], content);
    assert_int_equal(m[15], 0x22);                           /* HParamsPluginData.session_end_info, 4 */
    assert_int_equal(m[16], content - 2);                    /* (version 0: proto3 leaves it out) */
    assert_int_equal(m[17], 0x08);                           /* SessionEndInfo.status, field 1 */
    assert_int_equal(m[18], 2);                              /* STATUS_FAILURE */
    assert_int_equal(m[19], 0x11);                           /* SessionEndInfo.end_time_secs, 2 */
    double t;
    memcpy(&t, m + 20, 8);
    assert_true(t == 1700000009.0);
    assert_int_equal(m + 28 - b, recs[4].len);               /* nothing else */
    p = hparams_of(&recs[4], "_hparams_/session_end_info", 90);
    assert_int_equal(p->data_case, TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO);
    assert_int_equal(p->session_end_info->status, TENSORBOARD__HPARAMS__STATUS__STATUS_FAILURE);
    tensorboard__hparams__hparams_plugin_data__free_unpacked(p, NULL);
    free(buf);
    du_rm_rf(dir);
}

/* A resolved job.json's hyper-parameters: dotted names of its numbers,
 * strings and bools; no arrays, nulls, network spec, paths or identity. */
static void test_hparams_from_config(void **state) {
    (void)state;
    cJSON *cfg = cJSON_Parse(
        "{\"id\": 2, \"name\": \"mine\", \"dataset_id\": 1, \"dataset_dir\": \"/var/x\","
        " \"network_name\": \"lenet\", \"network\": {\"name\": \"lenet\", \"layers\": [{\"type\": \"relu\"}]},"
        " \"input\": [1, 28, 28], \"classes\": [\"0\", \"1\"], \"epochs\": 50, \"batch_size\": 64,"
        " \"seed\": 2, \"keep_checkpoints\": null, \"precision\": \"fp32\","
        " \"solver\": {\"type\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9, \"nesterov\": false},"
        " \"augmentation\": {\"crop\": 0, \"mirror\": true},"
        " \"lr_policy\": {\"type\": \"step\", \"step_size\": 3, \"milestones\": [1, 2]}}");
    assert_non_null(cfg);
    cJSON *hp = hparams_from_config(cfg);
    assert_non_null(hp);
    static const char *const want[] = {
        "dataset_id", "network_name", "epochs", "batch_size", "seed", "precision", "solver.type",
        "solver.lr", "solver.momentum", "solver.nesterov", "augmentation.crop", "augmentation.mirror",
        "lr_policy.type", "lr_policy.step_size",
    };
    const size_t nw = sizeof want / sizeof want[0];
    assert_int_equal(cJSON_GetArraySize(hp), nw);
    const cJSON *it = hp->child;
    for (size_t i = 0; i < nw; i++, it = it->next)
        assert_string_equal(it->string, want[i]);              /* the config's order */
    assert_true(cJSON_GetObjectItemCaseSensitive(hp, "solver.lr")->valuedouble == 0.01);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(hp, "network_name")->valuestring, "lenet");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(hp, "solver.nesterov")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(hp, "augmentation.mirror")));
    cJSON_Delete(hp);
    cJSON_Delete(cfg);
    hp = hparams_from_config(NULL);
    assert_non_null(hp);
    assert_int_equal(cJSON_GetArraySize(hp), 0);
    cJSON_Delete(hp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_and_read_back),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_session_log_and_hparams),
        cmocka_unit_test(test_hparams_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
