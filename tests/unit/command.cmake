# Running a command with a time limit and capped output (jobs/command.c):
# exit codes, signals, caps, time limit, stop flag, the child's signal mask.
kiln_unit_test(test_command SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_command.c LIBS kiln_jobs)
