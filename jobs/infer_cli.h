/* jobs/infer_cli.h: `kiln infer`, classifying images from the command line
 * with a model tarball or a job folder (jobs/infer.h, the same code as
 * POST /api/v1/jobs/{id}/infer). */
#ifndef KILN_JOBS_INFER_CLI_H
#define KILN_JOBS_INFER_CLI_H

/* Runs `kiln infer` with argv[0] = "infer"; returns the exit status: 0 when
 * some image was classified, 1 when none was or the model could not be
 * opened, 2 on a usage error. */
int infer_main(int argc, char **argv);

#endif
