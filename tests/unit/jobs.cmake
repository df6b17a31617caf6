# Unit tests of the store (db/) and of the job machinery (jobs/: hub, jobspec, scheduler).
kiln_unit_test(test_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store.c LIBS kiln_db)
kiln_unit_test(test_hub SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_hub.c LIBS kiln_jobs)
kiln_unit_test(test_jobspec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jobspec.c LIBS kiln_jobs kiln_db)
# The scheduler with a shell script as the worker (real `kiln worker` runs are the integration tests').
kiln_unit_test(test_scheduler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_scheduler.c LIBS kiln_jobs kiln_db kiln_engine)
# The job configuration: round trips, and every field's limits the same from the API, kiln train and job.json.
kiln_unit_test(test_jobcfg SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jobcfg.c LIBS kiln_jobs)
# The worker's keeping decisions: which snapshots stay (keep_checkpoints), early stopping, epochs.json.
kiln_unit_test(test_snap_keep SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_snap_keep.c LIBS kiln_jobs)
# The dataset source readers (IDX, CIFAR batches, path label lists) on generated, damaged and random files.
kiln_unit_test(test_readers SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_readers.c LIBS kiln_jobs)
# An evaluation's counts: confusion matrix, top-1/top-5, precision/recall/F1 against hand-computed values.
kiln_unit_test(test_eval_metrics SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_eval_metrics.c LIBS kiln_jobs m)
# A job's snapshots (the best, the weights a selection means) and a model opened from its folder or tarball.
kiln_unit_test(test_model_bundle SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_model_bundle.c LIBS kiln_jobs PkgConfig::ARCHIVE)
# Classifying (jobs/infer.c): the preprocessing bit for bit against import + validation loader; top-k and item errors.
kiln_unit_test(test_infer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_infer.c LIBS kiln_jobs kiln_engine)
# The jobs list (issue 16): kiln_fill_jobs gives its integration and browser
# tests and bench/jobs_list.mjs thousands of ended jobs without training them.
add_executable(kiln_fill_jobs ${CMAKE_SOURCE_DIR}/tests/tools/fill_jobs.c)
target_link_libraries(kiln_fill_jobs PRIVATE kiln_db)
target_include_directories(kiln_fill_jobs PRIVATE ${CMAKE_SOURCE_DIR})
kiln_warnings(kiln_fill_jobs)
