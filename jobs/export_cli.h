/* jobs/export_cli.h: `kiln export`, a trained model as an ONNX file
 * (jobs/model_onnx.h). */
#ifndef KILN_JOBS_EXPORT_CLI_H
#define KILN_JOBS_EXPORT_CLI_H

/* Runs `kiln export` with argv[0] = "export"; version is kiln's, for the
 * file's metadata. Returns the exit status: 0 written, 1 a failure (the
 * message on stderr), 2 a usage error. */
int export_main(int argc, char **argv, const char *version);

#endif
