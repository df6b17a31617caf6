/* jobs/bench.h: `kiln bench`, the engine's throughput on synthetic data. */
#ifndef KILN_JOBS_BENCH_H
#define KILN_JOBS_BENCH_H

/* Runs `kiln bench` with argv[0] = "bench"; returns the exit status (0 done,
 * 1 a failure, 2 a usage error) after printing the figures to stdout. */
int bench_main(int argc, char **argv);

#endif
