/* jobs/tbevents.h: TensorBoard event files (format in DESIGN.md).
 *
 * Records are length + masked CRC32C + a serialized tensorflow.Event + masked
 * CRC32C; events are encoded with protobuf-c from jobs/proto/tensorboard.proto,
 * which holds just the messages we write. Each scalar is flushed when written so
 * that the file is readable while the job runs and after a crash.
 */
#ifndef KILN_JOBS_TBEVENTS_H
#define KILN_JOBS_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_writer tb_writer;

/* Creates dir/events.out.tfevents.<unix seconds>.<hostname> and writes the
 * file_version record. Returns NULL with err set. */
tb_writer *tb_open(const char *dir, double wall_time, char *err, size_t errlen);
/* Appends one scalar event. Returns 0, or -1 with err set. */
int tb_scalar(tb_writer *w, const char *tag, int64_t step, float value, double wall_time,
              char *err, size_t errlen);
void tb_close(tb_writer *w);   /* fsyncs and closes; NULL is a no-op */
const char *tb_path(const tb_writer *w);

/* CRC32C (Castagnoli) and TensorBoard's mask of it. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
static inline uint32_t tb_masked_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
