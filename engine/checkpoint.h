/* engine/checkpoint.h: training checkpoints, to resume a run bit for bit.
 *
 * A checkpoint is one safetensors file (engine/safetensors.h), written
 * atomically (temporary name, fsync, rename):
 *   "<param>"                   every parameter and batch-norm running
 *                               statistic under its net_save name, so the file
 *                               also loads with net_load
 *   "optim/<param>/<slot>"      the optimizer's state (engine/optim.h:
 *                               "momentum", or "exp_avg" and "exp_avg_sq")
 *   __metadata__                kiln_checkpoint ("1", the format version),
 *                               network, solver (the type), step (global steps
 *                               done), epoch (epochs completed), epoch_step
 *                               (steps done inside the next epoch: 0 at an
 *                               epoch boundary), optim_steps (Adam's t),
 *                               net_steps (the dropout stream position) and
 *                               seed, all as decimal strings.
 * The rest of the random state is a function of (seed, epoch): the loader's
 * shuffle and the initialisation; so a restored run that skips epoch_step
 * batches of epoch `epoch` sees the same batches and draws the same masks.
 */
#ifndef KILN_ENGINE_CHECKPOINT_H
#define KILN_ENGINE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/net.h"

#define CKPT_FORMAT "1"

typedef struct ckpt_info {
    int64_t step;          /* training steps done, counted from 1 over the run */
    int epoch;             /* epochs completed */
    int64_t epoch_step;    /* steps done inside epoch `epoch` (0-based), 0 at a boundary */
    uint64_t seed;         /* the run's seed (checked on restore by the caller) */
} ckpt_info;

/* Writes n's weights, running statistics and optimizer state with info to
 * path, atomically. Returns 0, or -1 with err set. */
int ckpt_save(net *n, const char *path, const ckpt_info *info, char *err, size_t errlen);

/* Restores a checkpoint written by ckpt_save into n, a net built from the
 * same spec and solver type; fills *info (when not NULL). All or nothing:
 * everything is checked before anything changes. Returns 0, or -1 with err
 * set (a missing tensor, another shape or solver, a newer format). */
int ckpt_load(net *n, const char *path, ckpt_info *info, char *err, size_t errlen);

/* Reads only the metadata of a checkpoint. Returns 0, or -1 with err set
 * (also for a file that is not a kiln checkpoint, such as a bare net_save). */
int ckpt_read_info(const char *path, ckpt_info *info, char *err, size_t errlen);

/* Finds the checkpoint of dir (a job's checkpoints/ folder) with the most
 * steps among files named *.safetensors that ckpt_read_info accepts; writes
 * its path into path. Returns 1 when found, 0 when there is none (or no
 * folder), -1 with err set when the folder cannot be read. */
int ckpt_latest(const char *dir, char *path, size_t pathlen, ckpt_info *info,
                char *err, size_t errlen);

/* Writes the model part of a checkpoint (every tensor but the "optim/..."
 * state) to out_path atomically, as net_save would have written it, so that
 * a model download holds weights only. Returns 0, or -1 with err set. */
int ckpt_export_weights(const char *ckpt_path, const char *out_path, char *err, size_t errlen);

#endif
