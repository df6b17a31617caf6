/* tests/gpu/bench_main.c: `kiln bench` (jobs/bench_cli.c) as a program of its
 * own, which tests/gpu/check builds with nvcc from the engine alone: the
 * resnet50 throughput on a GPU machine without the service's dependencies. */
#include "jobs/bench.h"

int main(int argc, char **argv)
{
    return bench_main(argc, argv);
}
