# ONNX export (engine/onnx.c): the unit test decodes the models with the
# protobuf-c code generated from engine/proto/onnx.proto. kiln_predict
# (tests/tools/kiln_predict.c) gives kiln's probabilities for raw pixels, the
# reference of tests/integration/onnx.test.mjs (node.cmake passes its path).
kiln_unit_test(test_engine_onnx SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_onnx.c
  LIBS kiln_engine kiln_onnx_proto)
add_executable(kiln_predict ${CMAKE_SOURCE_DIR}/tests/tools/kiln_predict.c)
target_link_libraries(kiln_predict PRIVATE kiln_jobs)
target_include_directories(kiln_predict PRIVATE ${CMAKE_SOURCE_DIR})
kiln_warnings(kiln_predict)
