/* jobs/tbevents.c: TensorBoard event files (format in DESIGN.md and tbevents.h).
 *
 * Guarantees: every record is framed and written with one write(2) loop as soon
 * as tb_scalar is called, so the file is readable while the job runs and after
 * a crash holds only whole records (up to a torn last record). The first
 * record carries file_version "brain.Event:2". tb_close fsyncs. The file is
 * created with O_EXCL: an existing file is never appended to or truncated.
 */
#include "jobs/tbevents.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "hparams.pb-c.h"       /* Tensorboard__Hparams__*, from jobs/proto/hparams.proto */
#include "struct.pb-c.h"        /* Google__Protobuf__Value, from jobs/proto/struct.proto */
#include "tensorboard.pb-c.h"   /* Tensorflow__Event, generated from jobs/proto/tensorboard.proto */

#define TB_FILE_VERSION "brain.Event:2"

struct tb_writer {
    int fd;
    char *path;
};


static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Frames one serialized event as a record and writes it. */
static int write_event(tb_writer *w, const Tensorflow__Event *ev, char *err, size_t errlen) {
    size_t len = tensorflow__event__get_packed_size(ev);
    size_t total = 8 + 4 + len + 4;
    uint8_t *rec = malloc(total);
    if (!rec) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    put_le64(rec, (uint64_t)len);
    put_le32(rec + 8, tb_masked_crc(crc32c(0, rec, 8)));
    tensorflow__event__pack(ev, rec + 12);
    put_le32(rec + 12 + len, tb_masked_crc(crc32c(0, rec + 12, len)));
    int rc = 0;
    size_t off = 0;
    while (off < total) {
        ssize_t n = write(w->fd, rec + off, total - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            set_err(err, errlen, "writing %s: %s", w->path, strerror(errno));
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    free(rec);
    return rc;
}

tb_writer *tb_open(const char *dir, double wall_time, char *err, size_t errlen) {
    char host[256];
    if (gethostname(host, sizeof host) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    tb_writer *w = calloc(1, sizeof *w);
    if (!w) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    w->fd = -1;
    int n = snprintf(NULL, 0, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
    w->path = malloc((size_t)n + 1);
    if (!w->path) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    snprintf(w->path, (size_t)n + 1, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        set_err(err, errlen, "creating %s: %s", w->path, strerror(errno));
        goto fail;
    }
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)TB_FILE_VERSION;
    if (write_event(w, &ev, err, errlen) != 0) {
        close(w->fd);
        unlink(w->path);
        w->fd = -1;
        goto fail;
    }
    return w;
fail:
    free(w->path);
    free(w);
    return NULL;
}

int tb_scalar(tb_writer *w, const char *tag, int64_t step, float value, double wall_time,
              char *err, size_t errlen) {
    Tensorflow__Summary__Value val = TENSORFLOW__SUMMARY__VALUE__INIT;
    val.tag = (char *)tag;
    val.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    val.simple_value = value;
    Tensorflow__Summary__Value *vals[1] = { &val };
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = vals;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.has_step = 1;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(w, &ev, err, errlen);
}

int tb_session_start(tb_writer *w, int64_t step, double wall_time, char *err, size_t errlen) {
    Tensorflow__SessionLog log = TENSORFLOW__SESSION_LOG__INIT;
    log.has_status = 1;
    log.status = TENSORFLOW__SESSION_LOG__SESSION_STATUS__START;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.has_step = 1;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    return write_event(w, &ev, err, errlen);
}

/* ---- HParams ---------------------------------------------------------------- */

_Static_assert((int)TB_STATUS_UNKNOWN == (int)TENSORBOARD__HPARAMS__STATUS__STATUS_UNKNOWN &&
               (int)TB_STATUS_SUCCESS == (int)TENSORBOARD__HPARAMS__STATUS__STATUS_SUCCESS &&
               (int)TB_STATUS_FAILURE == (int)TENSORBOARD__HPARAMS__STATUS__STATUS_FAILURE &&
               (int)TB_STATUS_RUNNING == (int)TENSORBOARD__HPARAMS__STATUS__STATUS_RUNNING,
               "tb_status numbers api.proto's Status");

#define HPARAMS_PLUGIN "hparams"
#define HPARAMS_VERSION 0

/* Writes Event{step, summary{value{tag, metadata{plugin_data{"hparams",
 * content}}, tensor: an empty float vector}}} with content = data packed. */
static int write_hparams(tb_writer *w, int64_t step, const char *tag,
                         Tensorboard__Hparams__HParamsPluginData *data, double wall_time,
                         char *err, size_t errlen) {
    data->version = HPARAMS_VERSION;
    size_t n = tensorboard__hparams__hparams_plugin_data__get_packed_size(data);
    uint8_t *content = malloc(n ? n : 1);
    if (!content)
        return set_err(err, errlen, "out of memory");
    tensorboard__hparams__hparams_plugin_data__pack(data, content);

    Tensorflow__SummaryMetadata__PluginData pd = TENSORFLOW__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    pd.plugin_name = (char *)HPARAMS_PLUGIN;
    pd.has_content = 1;
    pd.content.data = content;
    pd.content.len = n;
    Tensorflow__SummaryMetadata md = TENSORFLOW__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    /* TensorBoard's hparams NULL_TENSOR: dtype DT_FLOAT, shape [0], no values */
    Tensorflow__TensorShapeProto__Dim dim = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
    Tensorflow__TensorShapeProto__Dim *dims[1] = { &dim };
    Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = dims;
    Tensorflow__TensorProto tensor = TENSORFLOW__TENSOR_PROTO__INIT;
    tensor.has_dtype = 1;
    tensor.dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
    tensor.tensor_shape = &shape;

    Tensorflow__Summary__Value val = TENSORFLOW__SUMMARY__VALUE__INIT;
    val.tag = (char *)tag;
    val.metadata = &md;
    val.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR;
    val.tensor = &tensor;
    Tensorflow__Summary__Value *vals[1] = { &val };
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = vals;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.has_step = 1;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    int rc = write_event(w, &ev, err, errlen);
    free(content);
    return rc;
}

/* The hyper-parameters written: numbers, strings and bools. */
static bool hparam_kind_ok(const cJSON *v) {
    return cJSON_IsNumber(v) || cJSON_IsString(v) || cJSON_IsBool(v);
}

static size_t hparam_count(const cJSON *hparams) {
    size_t n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, hparams)
        if (v->string && hparam_kind_ok(v))
            n++;
    return n;
}

int tb_hparams_experiment(tb_writer *w, int64_t step, const cJSON *hparams, const tb_metric_info *metrics,
                          size_t nmetrics, double wall_time, char *err, size_t errlen) {
    size_t nh = hparam_count(hparams);
    Tensorboard__Hparams__HParamInfo *hi = calloc(nh + 1, sizeof *hi);
    Tensorboard__Hparams__HParamInfo **hip = calloc(nh + 1, sizeof *hip);
    Tensorboard__Hparams__MetricName *mn = calloc(nmetrics + 1, sizeof *mn);
    Tensorboard__Hparams__MetricInfo *mi = calloc(nmetrics + 1, sizeof *mi);
    Tensorboard__Hparams__MetricInfo **mip = calloc(nmetrics + 1, sizeof *mip);
    int rc = -1;
    if (!hi || !hip || !mn || !mi || !mip) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    size_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, hparams) {
        if (!v->string || !hparam_kind_ok(v))
            continue;
        tensorboard__hparams__hparam_info__init(&hi[k]);
        hi[k].name = v->string;
        hi[k].type = cJSON_IsNumber(v) ? TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_FLOAT64
                     : cJSON_IsString(v) ? TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_STRING
                                         : TENSORBOARD__HPARAMS__DATA_TYPE__DATA_TYPE_BOOL;
        hip[k] = &hi[k];
        k++;
    }
    for (size_t i = 0; i < nmetrics; i++) {
        tensorboard__hparams__metric_name__init(&mn[i]);
        mn[i].tag = (char *)metrics[i].tag;
        tensorboard__hparams__metric_info__init(&mi[i]);
        mi[i].name = &mn[i];
        mi[i].dataset_type = metrics[i].validation ? TENSORBOARD__HPARAMS__DATASET_TYPE__DATASET_VALIDATION
                                                   : TENSORBOARD__HPARAMS__DATASET_TYPE__DATASET_TRAINING;
        mip[i] = &mi[i];
    }
    Tensorboard__Hparams__Experiment ex = TENSORBOARD__HPARAMS__EXPERIMENT__INIT;
    ex.time_created_secs = wall_time;
    ex.n_hparam_infos = k;
    ex.hparam_infos = hip;
    ex.n_metric_infos = nmetrics;
    ex.metric_infos = mip;
    Tensorboard__Hparams__HParamsPluginData data = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
    data.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT;
    data.experiment = &ex;
    rc = write_hparams(w, step, TB_HPARAMS_EXPERIMENT_TAG, &data, wall_time, err, errlen);
out:
    free(hi);
    free(hip);
    free(mn);
    free(mi);
    free(mip);
    return rc;
}

int tb_hparams_start(tb_writer *w, int64_t step, const cJSON *hparams, const char *group,
                     double start_time, double wall_time, char *err, size_t errlen) {
    size_t nh = hparam_count(hparams);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry *ent = calloc(nh + 1, sizeof *ent);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry **entp = calloc(nh + 1, sizeof *entp);
    Google__Protobuf__Value *vals = calloc(nh + 1, sizeof *vals);
    int rc = -1;
    if (!ent || !entp || !vals) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    size_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, hparams) {
        if (!v->string || !hparam_kind_ok(v))
            continue;
        google__protobuf__value__init(&vals[k]);
        if (cJSON_IsNumber(v)) {
            vals[k].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
            vals[k].number_value = v->valuedouble;
        } else if (cJSON_IsString(v)) {
            vals[k].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
            vals[k].string_value = v->valuestring;
        } else {
            vals[k].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
            vals[k].bool_value = cJSON_IsTrue(v);
        }
        tensorboard__hparams__session_start_info__hparams_entry__init(&ent[k]);
        ent[k].key = v->string;
        ent[k].value = &vals[k];
        entp[k] = &ent[k];
        k++;
    }
    Tensorboard__Hparams__SessionStartInfo si = TENSORBOARD__HPARAMS__SESSION_START_INFO__INIT;
    si.n_hparams = k;
    si.hparams = entp;
    if (group)
        si.group_name = (char *)group;
    si.start_time_secs = start_time;
    Tensorboard__Hparams__HParamsPluginData data = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
    data.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
    data.session_start_info = &si;
    rc = write_hparams(w, step, TB_HPARAMS_START_TAG, &data, wall_time, err, errlen);
out:
    free(ent);
    free(entp);
    free(vals);
    return rc;
}

int tb_hparams_end(tb_writer *w, int64_t step, tb_status status, double wall_time, char *err,
                   size_t errlen) {
    Tensorboard__Hparams__SessionEndInfo ei = TENSORBOARD__HPARAMS__SESSION_END_INFO__INIT;
    ei.status = (Tensorboard__Hparams__Status)status;
    ei.end_time_secs = wall_time;
    Tensorboard__Hparams__HParamsPluginData data = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
    data.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    data.session_end_info = &ei;
    return write_hparams(w, step, TB_HPARAMS_END_TAG, &data, wall_time, err, errlen);
}

void tb_close(tb_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        fsync(w->fd);
        close(w->fd);
    }
    free(w->path);
    free(w);
}

const char *tb_path(const tb_writer *w) { return w->path; }
