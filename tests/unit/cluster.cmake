# The Slurm cluster's nodes (server/cluster.c): gres strings, recorded and
# malformed `sinfo --json` outputs, the sampler's failures (issue 18).
kiln_unit_test(test_cluster
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cluster.c
  LIBS kiln_server)
