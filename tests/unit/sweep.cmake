# Sweeps (issue 16): the request's space, grid enumeration, seeded sampling and asha's decisions (jobs/sweep.h).
kiln_unit_test(test_sweep SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sweep.c LIBS kiln_jobs m)
