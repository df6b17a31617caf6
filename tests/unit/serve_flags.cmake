# The table of kiln serve's flags: defaults, KILN_* variables, precedence,
# bad values, the base path's rules, the README's table.
kiln_unit_test(test_serve_flags
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_serve_flags.c
  LIBS kiln_server)
