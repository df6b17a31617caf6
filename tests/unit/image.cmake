# engine/image.c: the codecs (PNG, JPEG, scaled JPEG decoding, corrupt and
# forged files, mutations) and the resize modes against references.
kiln_unit_test(test_image
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_image.c
  LIBS kiln_engine PkgConfig::SPNG PkgConfig::TURBOJPEG m)
