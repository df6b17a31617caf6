# Data parallelism across processes (engine/net_world.c) over Gloo, with forked ranks.
kiln_unit_test(test_engine_world SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_world.c
  LIBS kiln_engine m)
set_tests_properties(test_engine_world PROPERTIES TIMEOUT 120)
