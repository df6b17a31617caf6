# Unit tests of the engine (engine/): backend ops against references and finite
# differences, spec parsing, safetensors, and whole nets training.
kiln_unit_test(test_engine_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_ops.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_spec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_spec.c
  LIBS kiln_engine)
kiln_unit_test(test_engine_safetensors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_safetensors.c
  LIBS kiln_engine)
kiln_unit_test(test_engine_net SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_net.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_fuse SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_fuse.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_dp SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_dp.c
  LIBS kiln_engine m)
