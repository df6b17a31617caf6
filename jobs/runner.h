/* jobs/runner.h: `kiln worker`, one training job in its own process.
 *
 * Reads <job-dir>/job.json, trains with the engine, and reports on stdout as
 * JSON lines (one object per line, "t" naming the kind):
 *   {"t":"status","status":"running"}
 *   {"t":"progress","epoch":E,"epochs":N,"step":S,"steps":T,"images_per_sec":R,"eta":SEC}
 *   {"t":"metric","step":S,"epoch":F,"tag":"train/loss","value":V,"wall_time":W}
 *   {"t":"snapshot","epoch":E,"path":"checkpoints/epoch-E.safetensors"}
 *   {"t":"done"}  or  {"t":"error","message":"..."}   (the last line)
 * Human-readable log lines go to stderr. Writes in the job folder: the
 * TensorBoard event file, checkpoints/epoch-<n>.safetensors, model.safetensors
 * (the final weights). SIGTERM stops after the current step with
 * {"t":"status","status":"cancelled"}. A write error on stdout (the server is
 * gone) ends the worker.
 */
#ifndef KILN_JOBS_RUNNER_H
#define KILN_JOBS_RUNNER_H

int runner_main(int argc, char **argv);

#endif
