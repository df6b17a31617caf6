# Comparing runs (issue 16): the metrics endpoint's tag filter and min/max
# downsampling; kiln_seed_runs fills a store with finished runs and long
# metric series for bench/compare_page.mjs.
kiln_unit_test(test_metric_select
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_metric_select.c
  LIBS kiln_server)
add_executable(kiln_seed_runs ${CMAKE_SOURCE_DIR}/tests/tools/seed_runs.c)
target_link_libraries(kiln_seed_runs PRIVATE kiln_db m)
target_include_directories(kiln_seed_runs PRIVATE ${CMAKE_SOURCE_DIR})
kiln_warnings(kiln_seed_runs)
