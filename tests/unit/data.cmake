# Data: the prepared-dataset format and loader (engine/dataset.c), dataset
# import (jobs/import.c), TensorBoard event files (jobs/tbevents.c, crc32c.c).
kiln_unit_test(test_crc32c
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_crc32c.c
  LIBS kiln_jobs)
kiln_unit_test(test_tbevents
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_tbevents.c
  LIBS kiln_jobs kiln_proto)
kiln_unit_test(test_dataset
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dataset.c
  LIBS kiln_engine)
kiln_unit_test(test_import
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_import.c
  LIBS kiln_jobs kiln_engine PkgConfig::ARCHIVE PkgConfig::SPNG PkgConfig::TURBOJPEG PkgConfig::CJSON m)
