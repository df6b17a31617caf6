# Job safety (issue 15, findings 6, 7, 9): the memory-fit arithmetic against a
# fake /proc/meminfo, the job folder's lock; kiln_fill_metrics gives the SSE
# replay test (tests/integration/jobsafe.test.mjs) a job with many metrics.
add_executable(kiln_fill_metrics ${CMAKE_SOURCE_DIR}/tests/tools/fill_metrics.c)
target_link_libraries(kiln_fill_metrics PRIVATE kiln_db PkgConfig::CJSON)
target_include_directories(kiln_fill_metrics PRIVATE ${CMAKE_SOURCE_DIR})
kiln_warnings(kiln_fill_metrics)
kiln_unit_test(test_jobsafe SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jobsafe.c LIBS kiln_jobs kiln_db)
