# The Slurm dispatcher's pieces (issue 18): squeue --json / scontrol parsing,
# the exit record, final states, and a job's Slurm fields in the store.
kiln_unit_test(test_slurm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_slurm.c LIBS kiln_jobs kiln_db)
