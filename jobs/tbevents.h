/* jobs/tbevents.h: TensorBoard event files (format in DESIGN.md).
 *
 * Records are length + masked CRC32C + a serialized tensorflow.Event + masked
 * CRC32C; events are encoded with protobuf-c from jobs/proto/tensorboard.proto,
 * which holds just the messages we write. Each scalar is flushed when written so
 * that the file is readable while the job runs and after a crash.
 */
#ifndef KILN_JOBS_TBEVENTS_H
#define KILN_JOBS_TBEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct tb_writer tb_writer;

/* Creates dir/events.out.tfevents.<unix seconds>.<hostname> and writes the
 * file_version record. Returns NULL with err set. */
tb_writer *tb_open(const char *dir, double wall_time, char *err, size_t errlen);
/* Appends one scalar event. Returns 0, or -1 with err set. */
int tb_scalar(tb_writer *w, const char *tag, int64_t step, float value, double wall_time,
              char *err, size_t errlen);
/* Appends Event{step, session_log{status: START}}, TensorBoard's mark of a
 * restarted run: reading the files in name order, its EventAccumulator drops
 * everything read before with a step >= step (purge_orphaned_data). A
 * resumed run writes it first, with step = the first step it will record.
 * Returns 0, or -1 with err set. */
int tb_session_start(tb_writer *w, int64_t step, double wall_time, char *err, size_t errlen);

/* TensorBoard's HParams plugin (tensorboard/plugins/hparams): each record is a
 * summary whose value carries SummaryMetadata{plugin_data{plugin_name
 * "hparams", content: a serialized HParamsPluginData{version 0, ...}}} and
 * an empty float tensor (the plugin's NULL_TENSOR); the plugin keeps the
 * first record of each tag it reads. */
#define TB_HPARAMS_EXPERIMENT_TAG "_hparams_/experiment"
#define TB_HPARAMS_START_TAG "_hparams_/session_start_info"
#define TB_HPARAMS_END_TAG "_hparams_/session_end_info"

/* tensorboard.hparams.Status, as api.proto numbers it (there is no "aborted"). */
typedef enum {
    TB_STATUS_UNKNOWN = 0,
    TB_STATUS_SUCCESS = 1,
    TB_STATUS_FAILURE = 2,
    TB_STATUS_RUNNING = 3,
} tb_status;

/* A metric the experiment names: a scalar tag of the same run, and whether it
 * is measured on the training or the validation data. */
typedef struct tb_metric_info {
    const char *tag;
    bool validation;
} tb_metric_info;

/* hparams is a flat object of name -> number, string or bool (other kinds are
 * skipped), such as hparams_from_config gives (jobs/hparams.h).
 * tb_hparams_experiment: "_hparams_/experiment", an Experiment with one
 * HParamInfo per hyper-parameter (name and type, no domain) and the metrics.
 * tb_hparams_start: "_hparams_/session_start_info" with the values, the
 * group name (NULL: none) and the start time.
 * tb_hparams_end: "_hparams_/session_end_info" with the status and end time.
 * Each returns 0, or -1 with err set. */
int tb_hparams_experiment(tb_writer *w, int64_t step, const cJSON *hparams, const tb_metric_info *metrics,
                          size_t nmetrics, double wall_time, char *err, size_t errlen);
int tb_hparams_start(tb_writer *w, int64_t step, const cJSON *hparams, const char *group,
                     double start_time, double wall_time, char *err, size_t errlen);
int tb_hparams_end(tb_writer *w, int64_t step, tb_status status, double wall_time, char *err,
                   size_t errlen);

void tb_close(tb_writer *w);   /* fsyncs and closes; NULL is a no-op */
const char *tb_path(const tb_writer *w);

/* CRC32C (Castagnoli) and TensorBoard's mask of it. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
static inline uint32_t tb_masked_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
