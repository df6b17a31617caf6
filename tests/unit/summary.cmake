# Unit tests of the model summary (engine/summary.c): parameters, FLOPs and
# the training-memory estimate against figures worked out by hand.
kiln_unit_test(test_engine_summary SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_summary.c
  LIBS kiln_engine)
