/* jobs/runner.h: `kiln worker`, one training job in its own process.
 *
 * Reads <job-dir>/job.json, trains with the engine, and reports on stdout as
 * JSON lines (one object per line, "t" naming the kind):
 *   {"t":"status","status":"running"}
 *   {"t":"progress","epoch":E,"epochs":N,"step":S,"steps":T,"images_per_sec":R,"eta":SEC}
 *   {"t":"metric","step":S,"epoch":F,"tag":"train/loss","value":V,"wall_time":W}
 *   {"t":"snapshot","epoch":E,"path":"checkpoints/epoch-E.safetensors"}
 *   {"t":"stopped_early","epoch":E,"best_epoch":B,"message":"stopped early after epoch E: ..."}
 *                      (early_stopping ended the run; "done" follows)
 *   {"t":"done"}  or  {"t":"error","message":"..."}   (the last line)
 * Human-readable log lines go to stderr. Writes in the job folder: the
 * TensorBoard event file, checkpoints/epoch-<n>.safetensors (checkpoints,
 * engine/checkpoint.h: weights, optimizer state, step, epoch, seed),
 * model.safetensors (the final weights), epochs.json (every validated
 * epoch's metrics, jobs/snap_keep.h) and snapshots.json (jobs/snapshots.h).
 *
 * Snapshots: after each snapshot_interval-th epoch the checkpoint is listed
 * in snapshots.json with the epoch's val/loss, val/accuracy and the mean
 * train/loss and train/accuracy of its steps, and the best is picked by
 * checkpoint_metric. With keep_checkpoints N, the snapshots other than the
 * last N and the best are deleted (files and items), and so are a cancel's
 * step-S checkpoints once a later snapshot exists; the newest checkpoint,
 * the one a resume needs, always stays.
 *
 * Early stopping (job.json's "early_stopping"): every epoch's validation is
 * fed to es_update (snapshotted or not); when its metric has not improved by
 * more than min_delta for `patience` epochs the worker saves
 * model.safetensors (the last epoch's weights), logs and reports
 * stopped_early, and ends as done. A resumed worker rebuilds that state from
 * epochs.json, cut back to the checkpoint it resumes from, so it stops at
 * the epoch the uninterrupted run would have. SIGTERM stops after the current step
 * with checkpoints/step-<s>.safetensors and {"t":"status","status":"cancelled"}.
 * A job folder that already holds a checkpoint is resumed from the latest one
 * (bit for bit). A write error on stdout (the server is gone) ends the worker.
 *
 * `--report-file PATH` appends the report lines to PATH instead (flushed
 * line by line), for a dispatcher that tails a file in the job folder.
 *
 * A job of several ranks (jobcfg.h: nodes, tasks_per_node) runs as one
 * worker per rank, each told its rank by its environment (jobs/ranks.h:
 * srun's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, or KILN_RANK,
 * KILN_WORLD_SIZE, KILN_LOCAL_RANK); a worker started otherwise than the
 * job says (alone for a multi-rank job, or as another number of ranks)
 * fails at start with the reason. Rank 0 reports and writes everything
 * above; the other ranks write nothing but "rank R: error: ..." on stderr.
 * All ranks resume from the same (rank 0's) checkpoint, stop after the same
 * step, and fail within the collectives' timeout when one fails.
 */
#ifndef KILN_JOBS_RUNNER_H
#define KILN_JOBS_RUNNER_H

#include <stdbool.h>

int runner_main(int argc, char **argv);

/* Runs the job of dir (dir/job.json) to its end: the worker's whole life
 * after its command line. With human_output (kiln train) nothing is written
 * as JSON: progress and log lines go to stdout for a person, errors to
 * stderr; the files written are the same. Resumes from dir/checkpoints when
 * it holds a checkpoint. Returns the exit status (0 done or cancelled, 1
 * failed). */
int runner_run(const char *dir, bool human_output);

/* `kiln train` (jobs/train_cli.c): argv starts at "train". Returns the exit
 * status (0 done, 1 failed, 2 a usage error or a refused option). */
int train_main(int argc, char **argv);

#endif
