# SPDX-License-Identifier: MIT
# SemaTests.cmake - registers every test case as its own CTest test.
#
# tests/unit/test_*.c      one program each; every `TEST(name)` line becomes the test
#                          unit.<file>.<name>, run as `<program> <name>`.
# tests/integration/test_*.py   every `def test_<name>(` becomes integration.<file>.<name>,
#                          run as `python3 <file> <name>`.
# tests/integration/test_*.sh   one test per file.
# Integration tests find the programs through the environment: SEMAD, SEMA_BIN,
# SEMA_BUILD_DIR, SEMA_SOURCE_DIR.

set(SEMA_TEST_TIMEOUT 120 CACHE STRING "Default timeout of one test case, in seconds")
find_package(Python3 COMPONENTS Interpreter)

set(SEMA_TEST_ENV
  "SEMA_BUILD_DIR=${CMAKE_BINARY_DIR}"
  "SEMA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  "SEMA_SANITIZE=${SEMA_SANITIZE}")
if(TARGET semad)
  list(APPEND SEMA_TEST_ENV "SEMAD=$<TARGET_FILE:semad>")
endif()
if(TARGET sema_cli)
  list(APPEND SEMA_TEST_ENV "SEMA_BIN=$<TARGET_FILE:sema_cli>")
endif()
if(SEMA_SANITIZE)
  # Sanitized code runs 3-20x slower: stress loops shrink, timeouts stay.
  list(APPEND SEMA_TEST_ENV "SEMA_TEST_SCALE=0.2")
  if(SEMA_SANITIZE MATCHES "thread")
    list(APPEND SEMA_TEST_ENV "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1")
  else()
    list(APPEND SEMA_TEST_ENV "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1"
         "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endif()

# sema_add_cases(PREFIX FILE COMMAND...  [LABELS l...] [ENV v...] [TIMEOUT s]): every case of
# FILE as the CTest test PREFIX.<short>.<case>, run as `COMMAND... <case>`, where <short> is
# FILE's name without test_ and its extension, and the cases are its `TEST(name)` lines (a .c
# file) or its `def test_name(` lines (a .py file). Exit 77 is a skip. TIMEOUT defaults to
# SEMA_TEST_TIMEOUT.
function(sema_add_cases prefix src)
  cmake_parse_arguments(A "" "LOCK;TIMEOUT" "COMMAND;LABELS;ENV" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT ${SEMA_TEST_TIMEOUT})
  endif()
  get_filename_component(file ${src} NAME_WE)
  string(REGEX REPLACE "^test_" "" short ${file})
  if(src MATCHES "\\.c$")
    set(re "^TEST\\(([A-Za-z0-9_]+)\\)")
  else()
    set(re "^def test_([A-Za-z0-9_]+)\\(")
  endif()
  file(STRINGS ${src} lines REGEX "${re}")
  set(env ${SEMA_TEST_ENV} ${A_ENV})
  foreach(line ${lines})
    string(REGEX REPLACE "${re}.*" "\\1" case "${line}")
    add_test(NAME ${prefix}.${short}.${case} COMMAND ${A_COMMAND} ${case})
    set_tests_properties(${prefix}.${short}.${case} PROPERTIES TIMEOUT ${A_TIMEOUT}
      LABELS "${A_LABELS}" SKIP_RETURN_CODE 77 ENVIRONMENT "${env}")
    if(A_LOCK)
      set_tests_properties(${prefix}.${short}.${case} PROPERTIES RESOURCE_LOCK ${A_LOCK})
    endif()
  endforeach()
endfunction()

# Unit tests: one program per tests/unit/test_*.c, linked with the support library
# (tests/support/: the scenario runner, the engine fixture and other helpers).
file(GLOB SEMA_TEST_SUPPORT CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/support/*.c)
add_library(sema_test_support STATIC ${PROJECT_SOURCE_DIR}/tests/test_main.c ${SEMA_TEST_SUPPORT})
target_include_directories(sema_test_support PUBLIC ${PROJECT_SOURCE_DIR}/tests
  ${PROJECT_SOURCE_DIR}/tests/support ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/lib)
target_link_libraries(sema_test_support PUBLIC sema_static)
target_compile_definitions(sema_test_support PRIVATE
  SEMA_SCENARIO_FILE="${PROJECT_SOURCE_DIR}/tests/cases/scenarios.txt")

# The engine's conformance suites (test_engine*.c, through engine.h only) run once more
# against the Redis back end, each case beside a redis-server of its own
# (tests/support/with_redis.py: a free loopback port, no persistence, a temporary
# directory), as redis.<file>.<name>; so does test_redis.c (what only Redis has), which runs
# there alone. The embedded back end's own suites are test_embedded_*.c.
file(GLOB SEMA_UNIT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${SEMA_UNIT_TESTS})
  get_filename_component(prog ${src} NAME_WE)
  add_executable(${prog} ${src})
  set_target_properties(${prog} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${prog} PRIVATE ${SEMA_WARNINGS} -Wno-missing-prototypes)
  target_link_libraries(${prog} PRIVATE sema_test_support ${SEMA_TEST_LIBS} m)
  # A stress program's steps wait for real timers (expiries, a rate's refill): on a busy
  # machine (sanitized, or starved of CPU: 98 s seen on Redis against 4-18 s quiet) it needs
  # more than the default time, sanitized even with its loops shrunk.
  set(timeout ${SEMA_TEST_TIMEOUT})
  if(prog MATCHES "_stress$")
    set(timeout 300)
  endif()
  if(prog STREQUAL "test_redis_cluster")
    # Redis Cluster's routing, beside a cluster of its own (tests/support/with_redis_cluster.py:
    # three primaries and their replicas, and the faults the cases ask for): cluster.<name>
    if(SEMA_WITH_REDIS AND TARGET semad_core)
      sema_add_cases(cluster ${src} LABELS redis LOCK redis_cluster COMMAND ${Python3_EXECUTABLE}
        ${PROJECT_SOURCE_DIR}/tests/support/with_redis_cluster.py $<TARGET_FILE:${prog}>)
    endif()
  elseif(NOT prog STREQUAL "test_redis")
    sema_add_cases(unit ${src} COMMAND ${prog} LABELS unit TIMEOUT ${timeout})
  endif()
  if((prog MATCHES "^test_engine" OR prog STREQUAL "test_redis") AND SEMA_WITH_REDIS
     AND TARGET semad_core)
    sema_add_cases(redis ${src} LABELS redis TIMEOUT ${timeout} COMMAND ${Python3_EXECUTABLE}
      ${PROJECT_SOURCE_DIR}/tests/support/with_redis.py $<TARGET_FILE:${prog}>)
  endif()
endforeach()

# A leak and a slowdown that test_soak_verdict.py preloads into semad (LD_PRELOAD), to show
# that bench/soak fails on them; never linked into sema. Not with a sanitizer, whose runtime
# must come first.
if(TARGET semad AND NOT SEMA_SANITIZE)
  add_library(sema_soak_fault MODULE ${PROJECT_SOURCE_DIR}/tests/fault/soak_fault.c)
  set_target_properties(sema_soak_fault PROPERTIES PREFIX ""
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(sema_soak_fault PRIVATE ${SEMA_WARNINGS})
  target_link_libraries(sema_soak_fault PRIVATE PkgConfig::LIBUV ${CMAKE_DL_LIBS})
endif()

# Integration tests (real processes: semad, sema, redis-server), one per `def test_`.
# test_redis_*.py: semad on Redis (real redis-server and redis-sentinel processes), label
# redis too; they skip (77) when semad has no Redis back end.
file(GLOB SEMA_PY_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/integration/test_*.py)
foreach(src ${SEMA_PY_TESTS})
  set(labels integration)
  if(src MATCHES "/test_redis")
    set(labels "integration;redis")
  endif()
  if(src MATCHES "/test_semad_cluster")
    # semad on a Redis Cluster of its own per case, one cluster at a time: cluster.*
    sema_add_cases(cluster ${src} COMMAND ${Python3_EXECUTABLE} ${src}
      LABELS "integration;redis" LOCK redis_cluster)
    continue()
  endif()
  sema_add_cases(integration ${src} COMMAND ${Python3_EXECUTABLE} ${src} LABELS ${labels})
endforeach()
# bench/soak's verdict beside a fresh semad: a minute and a half of load each, more on a
# loaded machine. Lock `heavy`: one at a time of the tests that start a browser or judge
# timings beside a reference, so that a verdict never shares the machine with a browser.
foreach(case a_healthy_semad_passes_the_checks_judged_beside_a_fresh_one
    a_leaking_and_slowing_semad_fails)
  set_tests_properties(integration.soak.${case} PROPERTIES TIMEOUT 300 RESOURCE_LOCK heavy)
endforeach()

# The HTTP suites once more, normal builds only (the sanitizer builds run the same server
# code through the suites above):
# - on semad's Redis back end (tests/integration/redis_fixture.py): redis.<file>.<name>
#   against one instance on a fresh redis-server, redis3.<file>.<name> against three
#   instances on one redis-server with each request sent to the next instance (an acquire on
#   one, its release on another, a wait on a third); the random-clients checker
#   (test_concurrency) on three instances only; they skip (77) without a Redis back end;
# - behind a validating proxy that checks every reply against docs/openapi.yaml (prism from
#   tests/openapi/, installed by `scripts/deps.sh test`; see semad_fixture.py):
#   openapi.<file>.<name>. Cases that check what a proxy hides (the connection itself,
#   disconnects, event streams) skip themselves.
set(SEMA_REDIS_SUITES v1 legacy scenarios_http tickets limits_model)
set(SEMA_OPENAPI_PROXY_SUITES v1 legacy scenarios_http limits tickets)
if(NOT SEMA_SANITIZE)
  set(it ${PROJECT_SOURCE_DIR}/tests/integration)
  foreach(short ${SEMA_REDIS_SUITES})
    sema_add_cases(redis ${it}/test_${short}.py COMMAND ${Python3_EXECUTABLE}
      ${it}/test_${short}.py LABELS integration redis ENV SEMA_TEST_REDIS=1)
  endforeach()
  foreach(short ${SEMA_REDIS_SUITES} concurrency)
    sema_add_cases(redis3 ${it}/test_${short}.py COMMAND ${Python3_EXECUTABLE}
      ${it}/test_${short}.py LABELS integration redis ENV SEMA_TEST_REDIS=3)
  endforeach()
  # - on a Redis Cluster (three primaries and their replicas, one per case, one at a time),
  #   three instances with each request sent to the next: cluster3.<file>.<name>
  foreach(short ${SEMA_REDIS_SUITES})
    sema_add_cases(cluster3 ${it}/test_${short}.py COMMAND ${Python3_EXECUTABLE}
      ${it}/test_${short}.py LABELS integration redis ENV SEMA_TEST_CLUSTER=3 LOCK redis_cluster)
  endforeach()
  # (every legacy case gets three instances on an emptied cluster: about a second each)
  set_tests_properties(cluster3.legacy.cases PROPERTIES TIMEOUT 400)
  # (each case starts its own prism, a few seconds of Node.js start-up that a busy machine
  # stretches past a minute: semad_fixture.py waits up to PRISM_START_S for it)
  foreach(short ${SEMA_OPENAPI_PROXY_SUITES})
    sema_add_cases(openapi ${it}/test_${short}.py COMMAND ${Python3_EXECUTABLE}
      ${it}/test_${short}.py LABELS integration openapi ENV SEMA_TEST_OPENAPI_PROXY=1
      TIMEOUT 300)
  endforeach()
  # a ticket's token, across three instances
  set(case tickets_belong_to_the_token_that_took_them)
  add_test(NAME redis3.auth.${case} COMMAND ${Python3_EXECUTABLE} ${it}/test_auth.py ${case})
  set_tests_properties(redis3.auth.${case} PROPERTIES TIMEOUT ${SEMA_TEST_TIMEOUT}
    LABELS "integration;redis" SKIP_RETURN_CODE 77
    ENVIRONMENT "${SEMA_TEST_ENV};SEMA_TEST_REDIS=3")
endif()
# docs/openapi.yaml under Redocly's OpenAPI linter (@redocly/cli, pinned in tests/openapi/):
# no errors. Normal builds only, like the proxy suites.
if(NOT SEMA_SANITIZE)
  add_test(NAME openapi.lint COMMAND bash ${PROJECT_SOURCE_DIR}/tests/openapi/lint.sh)
  set_tests_properties(openapi.lint PROPERTIES TIMEOUT ${SEMA_TEST_TIMEOUT} LABELS openapi)
endif()

file(GLOB SEMA_SH_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/integration/test_*.sh)
foreach(src ${SEMA_SH_TESTS})
  get_filename_component(file ${src} NAME_WE)
  string(REGEX REPLACE "^test_" "" short ${file})
  add_test(NAME integration.${short} COMMAND bash ${src})
  set_tests_properties(integration.${short} PROPERTIES TIMEOUT ${SEMA_TEST_TIMEOUT}
    LABELS integration SKIP_RETURN_CODE 77 ENVIRONMENT "${SEMA_TEST_ENV}")
endforeach()

# Source checks: banned functions, exported symbols, formatting.
add_test(NAME check.source COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-source.sh ${PROJECT_SOURCE_DIR})
add_test(NAME check.exports COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-exports.sh
  $<TARGET_FILE:sema_shared>)
# The folders of src/ are layers and every #include goes down (docs/architecture.md).
add_test(NAME check.layers COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check-layers.py
  ${PROJECT_SOURCE_DIR})
set_tests_properties(check.source check.exports check.layers PROPERTIES LABELS check
  SKIP_RETURN_CODE 77)
if(TARGET sema_client_shared)
  add_test(NAME check.exports_client COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-exports.sh
    $<TARGET_FILE:sema_client_shared>)
  set_tests_properties(check.exports_client PROPERTIES LABELS check SKIP_RETURN_CODE 77)
endif()

# The JS client (clients/js, @sema/client): its node --test suite against this build's
# semad (npm ci when needed, tsc build, the README's examples type-checked and run).
# Normal builds only; clients/js/test/run.sh exits 77 (skip) without Node.js >= 18.
if(NOT SEMA_SANITIZE AND TARGET semad)
  # builds the client, then runs its suite once per transport: ~80 s, three or four times
  # that on a machine loaded well past its cores
  add_test(NAME js.client COMMAND bash ${PROJECT_SOURCE_DIR}/clients/js/test/run.sh)
  set_tests_properties(js.client PROPERTIES TIMEOUT 360
    LABELS "js" SKIP_RETURN_CODE 77 ENVIRONMENT "${SEMA_TEST_ENV}")
  # The waiting-room example in a real browser (chromium headless, puppeteer-core): 20 pages
  # against a capacity of 2. Builds clients/js first, so it runs after js.client.
  add_test(NAME example.waiting_room COMMAND bash
    ${PROJECT_SOURCE_DIR}/examples/waiting-room/test/run.sh)
  set_tests_properties(example.waiting_room PROPERTIES TIMEOUT 220 DEPENDS js.client
    LABELS "js;browser" SKIP_RETURN_CODE 77 RESOURCE_LOCK heavy
    # the screenshot goes to the build tree; SCREENSHOT= unset writes the README's copy
    ENVIRONMENT "${SEMA_TEST_ENV};SCREENSHOT=${PROJECT_BINARY_DIR}/waiting-room-screenshot.png")
  # the same on semad's Redis back end, beside a redis-server of its own
  add_test(NAME example.waiting_room_redis COMMAND ${Python3_EXECUTABLE}
    ${PROJECT_SOURCE_DIR}/tests/support/with_redis.py bash
    ${PROJECT_SOURCE_DIR}/examples/waiting-room/test/run.sh)
  set_tests_properties(example.waiting_room_redis PROPERTIES TIMEOUT 220
    DEPENDS example.waiting_room LABELS "js;browser;redis" SKIP_RETURN_CODE 77
    RESOURCE_LOCK heavy
    ENVIRONMENT "${SEMA_TEST_ENV};SCREENSHOT=${PROJECT_BINARY_DIR}/waiting-room-screenshot-redis.png")
  # semad's dashboard (/ui) in a real browser (chromium headless, puppeteer-core, axe-core)
  # against real semad processes: ~60 s quiet, more when loaded. The screenshots go to the
  # build tree; SCREENSHOTS= unset writes the README's copies (docs/). One `heavy` test at a
  # time: each starts a browser and loads the machine.
  add_test(NAME dashboard.browser COMMAND bash ${PROJECT_SOURCE_DIR}/tests/dashboard/run.sh)
  set_tests_properties(dashboard.browser PROPERTIES TIMEOUT 300 LABELS "browser;dashboard"
    SKIP_RETURN_CODE 77 RESOURCE_LOCK heavy
    ENVIRONMENT "${SEMA_TEST_ENV};SCREENSHOTS=${PROJECT_BINARY_DIR}/dashboard-screenshots")
  # the same on semad's Redis back end, beside a redis-server of its own
  add_test(NAME dashboard.browser_redis COMMAND ${Python3_EXECUTABLE}
    ${PROJECT_SOURCE_DIR}/tests/support/with_redis.py bash ${PROJECT_SOURCE_DIR}/tests/dashboard/run.sh)
  set_tests_properties(dashboard.browser_redis PROPERTIES TIMEOUT 300
    LABELS "browser;dashboard;redis" SKIP_RETURN_CODE 77 RESOURCE_LOCK heavy
    ENVIRONMENT "${SEMA_TEST_ENV};SCREENSHOTS=${PROJECT_BINARY_DIR}/dashboard-screenshots-redis")
endif()
