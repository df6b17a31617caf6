# Unit tests of mixed precision: the casts and unscale of engine/elementwise.h
# and the dynamic loss scaler (engine/amp.*).
kiln_unit_test(test_engine_amp SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_amp.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_amp_net SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_amp_net.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_amp_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_amp_ops.c
  LIBS kiln_engine m)
