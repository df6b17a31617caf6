/* jobs/summary_cli.h: `kiln summary`, a network's model summary on the
 * command line (engine/summary.h). */
#ifndef KILN_JOBS_SUMMARY_CLI_H
#define KILN_JOBS_SUMMARY_CLI_H

/* argv[0] is "summary". Prints the table (or with --json one JSON object) to
 * stdout; returns 0, 1 when the network does not summarise (the message, which
 * names the layer, on stderr), or 2 for a usage error. */
int summary_main(int argc, char **argv);

#endif
