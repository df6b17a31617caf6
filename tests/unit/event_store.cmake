# A job's stored event stream (issue 17): ids per job from 1, never reused after a trim, pages in order.
kiln_unit_test(test_event_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_event_store.c LIBS kiln_db)
