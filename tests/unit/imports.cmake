# The import's limits and names (issue 15): base/utf8.c's rule, and the
# importer's pixel limits, size estimate and non-UTF-8 names (jobs/import*.c).
kiln_unit_test(test_import_limits
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_import_limits.c
  LIBS kiln_jobs kiln_engine PkgConfig::ARCHIVE m)
