# Unit tests of the HTTP layer (server/): route matching, SSE formatting, static
# path checks, the JSON representations, the OpenAPI document against the route
# table, and the upload's archive check.
kiln_unit_test(test_server_http
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_server_http.c
  LIBS kiln_server)
kiln_unit_test(test_server_upload
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_server_upload.c
  LIBS kiln_server PkgConfig::ARCHIVE)
# The table of kiln serve's limits: defaults, --limit parsing, the API's list.
kiln_unit_test(test_server_limits
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_server_limits.c
  LIBS kiln_server)
# Users, tokens and owners in the store, and the secrets of server/auth.c.
kiln_unit_test(test_users
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_users.c
  LIBS kiln_server)
# The front door's pure parts: Host names, same-origin, \u0000 in JSON.
kiln_unit_test(test_server_guard
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_server_guard.c
  LIBS kiln_server)
