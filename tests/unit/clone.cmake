# Clone (issue 16): a clone's request from a job's stored config (server/job_clone.h):
# the overrides merged, the default name and its cut at a character.
kiln_unit_test(test_job_clone
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_job_clone.c
  LIBS kiln_server)
