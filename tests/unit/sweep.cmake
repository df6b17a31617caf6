# Sweeps (issue 16): the request's space, grid enumeration, seeded sampling and asha's decisions (jobs/sweep.h).
kiln_unit_test(test_sweep SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sweep.c LIBS kiln_jobs m)
# Sweeps and trials in the store: round trips, owners, a trial marks its job, asha's promotion all or nothing.
kiln_unit_test(test_sweep_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sweep_store.c LIBS kiln_db)
