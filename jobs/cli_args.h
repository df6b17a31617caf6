/* jobs/cli_args.h: what the command-line tools that take a network share
 * (kiln summary, kiln bench): integer and C,H,W arguments, and the network
 * argument itself, a built-in name or a spec file. */
#ifndef KILN_JOBS_CLI_ARGS_H
#define KILN_JOBS_CLI_ARGS_H

#include <stdbool.h>
#include <cjson/cJSON.h>

#include "engine/net.h"         /* net_shape */

#define CLI_SPEC_MAX (16u << 20)    /* the largest spec file read */

/* s as an integer in [lo, hi] into *out; false (and *out alone) otherwise. */
bool cli_int(const char *s, int lo, int hi, int *out);
/* "C,H,W", each at least 1, into *out. */
bool cli_shape(const char *s, net_shape *out);
/* The spec of a built-in network or of a spec file, as a new cJSON object;
 * NULL after a message on stderr that starts "kiln TOOL: ". */
cJSON *cli_spec(const char *tool, const char *arg);

#endif
