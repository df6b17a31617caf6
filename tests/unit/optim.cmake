# Unit tests of the optimizers, learning-rate policies and checkpoints
# (engine/optim.*, engine/lr.*, engine/checkpoint.*).
kiln_unit_test(test_engine_optim SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_optim.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_lr SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_lr.c
  LIBS kiln_engine m)
kiln_unit_test(test_engine_checkpoint SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_engine_checkpoint.c
  LIBS kiln_engine m)
kiln_unit_test(test_train_resume SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_train_resume.c
  LIBS kiln_jobs kiln_engine)
