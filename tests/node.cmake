# Integration and browser tests: node's built-in test runner (node:test) drives a
# real `kiln serve` (tests/integration/lib/kiln.mjs starts one per test file on a
# free loopback port with a temporary data directory). They train, so they run
# one at a time. npm packages come from node_modules (scripts/install-deps).
find_program(NODE_EXECUTABLE node)
if(NOT NODE_EXECUTABLE)
  message(WARNING "node not found: the integration and browser tests are not registered (run scripts/install-deps)")
  return()
endif()

# kiln_node_test(NAME FILE LABEL TIMEOUT): one test file, one ctest test.
function(kiln_node_test name file label timeout)
  add_test(NAME ${name}
    COMMAND ${NODE_EXECUTABLE} --test --test-reporter=spec ${file}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "KILN_BIN=$<TARGET_FILE:kiln>"
    LABELS ${label}
    TIMEOUT ${timeout}
    RUN_SERIAL TRUE)
endfunction()

kiln_node_test(integration_api    tests/integration/api.test.mjs    integration 900)
kiln_node_test(integration_upload tests/integration/upload.test.mjs integration 1200)
kiln_node_test(integration_sources tests/integration/sources.test.mjs integration 1800)
kiln_node_test(integration_summary tests/integration/summary.test.mjs integration 300)
kiln_node_test(integration_limits tests/integration/limits.test.mjs integration 600)
kiln_node_test(integration_import_limits tests/integration/import_limits.test.mjs integration 300)
kiln_node_test(integration_amp    tests/integration/amp.test.mjs    integration 600)
kiln_node_test(integration_demo   tests/integration/demo.test.mjs   integration 1800)
kiln_node_test(integration_lenet_accuracy tests/integration/lenet_accuracy.test.mjs integration 1800)
kiln_node_test(integration_amp_parity tests/integration/amp_parity.test.mjs integration 1800)
kiln_node_test(integration_explorer tests/integration/explorer.test.mjs integration 600)
kiln_node_test(integration_datasets tests/integration/datasets.test.mjs integration 600)
kiln_node_test(integration_infer  tests/integration/infer.test.mjs  integration 900)
kiln_node_test(integration_snapshots tests/integration/snapshots.test.mjs integration 900)
kiln_node_test(integration_auth   tests/integration/auth.test.mjs   integration 600)
kiln_node_test(integration_frontdoor tests/integration/frontdoor.test.mjs integration 300)
kiln_node_test(integration_queue  tests/integration/queue.test.mjs  integration 300)
kiln_node_test(browser_queue    tests/browser/queue.test.mjs    browser     300)
kiln_node_test(browser_dashboard  tests/browser/dashboard.test.mjs  browser     1200)
# ONNX export against ONNX Runtime; kiln's side is tests/tools/kiln_predict.
kiln_node_test(integration_onnx   tests/integration/onnx.test.mjs   integration 2400)
set_property(TEST integration_onnx APPEND PROPERTY ENVIRONMENT "KILN_PREDICT=$<TARGET_FILE:kiln_predict>")
kiln_node_test(integration_evaluations tests/integration/evaluations.test.mjs integration 1800)
kiln_node_test(browser_evaluation tests/browser/evaluation.test.mjs browser 1200)
# Job safety (issue 15): SSE replay in pages, the memory-fit 422, the job folder's lock, resume.
kiln_node_test(integration_jobsafe tests/integration/jobsafe.test.mjs integration 600)
set_property(TEST integration_jobsafe APPEND PROPERTY ENVIRONMENT "KILN_FILL_METRICS=$<TARGET_FILE:kiln_fill_metrics>")
# Live streams without gaps (issue 17): Last-Event-ID across restarts, log events, heartbeats.
kiln_node_test(integration_streams tests/integration/streams.test.mjs integration 300)
# The Slurm dispatcher (issue 18) on a one-machine cluster it starts; a skip with the reason where the daemons cannot start.
kiln_node_test(integration_slurm  tests/integration/slurm.test.mjs  integration 300)
kiln_node_test(browser_login      tests/browser/login.test.mjs      browser     600)
kiln_node_test(browser_resume     tests/browser/resume.test.mjs     browser     600)
kiln_node_test(browser_job_log    tests/browser/job_log.test.mjs    browser     300)
# kill -9 torture, short: tests/torture/kill9.mjs --kills 3 (the long runs: README, Torture and soak).
# Clone (issue 16): POST /jobs/{id}/clone with overrides, GET /jobs/{id}/request; the dashboard's Clone.
kiln_node_test(integration_clone  tests/integration/clone.test.mjs  integration 300)
kiln_node_test(browser_clone      tests/browser/clone.test.mjs      browser     300)
kiln_node_test(torture_kill9_short tests/torture/kill9_short.test.mjs integration 600)
# Hyper-parameter sweeps (issue 16): grid, random, asha, a failing trial, cancel, restart.
kiln_node_test(integration_sweeps tests/integration/sweeps.test.mjs integration 600)
kiln_node_test(browser_sweep      tests/browser/sweep.test.mjs      browser     600)
# Comparing runs (issue 16): the page's pure functions in node, then the page in Chromium.
kiln_node_test(web_compare        tests/unit/web_compare.test.mjs   unit        60)
kiln_node_test(browser_compare    tests/browser/compare.test.mjs    browser     600)
# The jobs list (issue 16): filters, search, sort, keyset paging, PATCH; the dashboard's table.
kiln_node_test(integration_jobs_list tests/integration/jobs_list.test.mjs integration 300)
set_property(TEST integration_jobs_list APPEND PROPERTY ENVIRONMENT "KILN_FILL_JOBS=$<TARGET_FILE:kiln_fill_jobs>")
kiln_node_test(browser_jobs_table tests/browser/jobs_table.test.mjs browser 300)
set_property(TEST browser_jobs_table APPEND PROPERTY ENVIRONMENT "KILN_FILL_JOBS=$<TARGET_FILE:kiln_fill_jobs>")
# Operations (issue 17): GET /api/v1/hardware (CPU here, GPUs through a fake NVML:
# tests/tools/fake_nvml.c, opened through KILN_NVML_LIBRARY) and GET /metrics
# checked by promtool (Debian's prometheus package).
add_library(kiln_fake_nvml SHARED ${CMAKE_SOURCE_DIR}/tests/tools/fake_nvml.c)
kiln_warnings(kiln_fake_nvml)
kiln_node_test(integration_hardware tests/integration/hardware.test.mjs integration 120)
set_property(TEST integration_hardware APPEND PROPERTY ENVIRONMENT "KILN_FAKE_NVML=$<TARGET_FILE:kiln_fake_nvml>")
kiln_node_test(integration_metrics tests/integration/metrics.test.mjs integration 300)
set_property(TEST integration_metrics APPEND PROPERTY ENVIRONMENT "KILN_FAKE_NVML=$<TARGET_FILE:kiln_fake_nvml>")
kiln_node_test(browser_hardware tests/browser/hardware.test.mjs browser 300)
set_property(TEST browser_hardware APPEND PROPERTY ENVIRONMENT "KILN_FAKE_NVML=$<TARGET_FILE:kiln_fake_nvml>")
# The Slurm cluster's nodes in GET /api/v1/hardware and the hardware card (issue 18): a one-machine
# cluster (tests/integration/lib/slurm.mjs); each test skips with the reason where its daemons cannot start.
kiln_node_test(integration_cluster_hardware tests/integration/cluster_hardware.test.mjs integration 180)
kiln_node_test(browser_cluster tests/browser/cluster.test.mjs browser 180)
# The new-job form's Nodes and Tasks per node under --dispatcher slurm, absent under local (issue 18).
kiln_node_test(browser_slurm_form tests/browser/slurm_form.test.mjs browser 120)
# Deployment (issue 17): KILN_* configuration, the access log, --base-path, SIGTERM; the dashboard under a prefix.
kiln_node_test(integration_deploy tests/integration/deploy.test.mjs integration 300)
kiln_node_test(browser_base_path tests/browser/base_path.test.mjs browser 300)
# The container images (docker/): lints both Dockerfiles, builds docker/Dockerfile.cpu with podman on a
# debootstrap'd Debian 12 base (cached outside the tree) and drives the container over HTTP. Skips (77)
# with the reason where podman, debootstrap or the kernel's container features are missing.
add_test(NAME container_images COMMAND bash tests/container/container_test.sh WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(container_images PROPERTIES LABELS container TIMEOUT 1800 SKIP_RETURN_CODE 77)
kiln_node_test(integration_mpdp tests/integration/mpdp.test.mjs integration 600)
