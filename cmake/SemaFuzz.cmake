# SPDX-License-Identifier: MIT
# SemaFuzz.cmake - fuzz targets for the untrusted input semad parses (fuzz/fuzz_*.c).
#
# Always (with the server and the tests): fuzz/replay.c runs every file of
# fuzz/corpus/<target>/ through the target, registered as the CTest test fuzz.<target>
# (label fuzz), so any compiler and every sanitizer build replays the corpus.
# With clang and -DSEMA_BUILD_FUZZ=ON: real libFuzzer programs build/fuzz/fuzz_<target>, and
# the whole build gets ASan+UBSan and coverage instrumentation (see fuzz/README.md).
# Included before the targets are defined (for the build-wide flags); the fuzz programs
# themselves are defined at the end of the top directory, once semad_core exists.

option(SEMA_BUILD_FUZZ "Build libFuzzer programs for fuzz/ (clang only)" OFF)

set(SEMA_FUZZ_LIBFUZZER OFF)
if(SEMA_BUILD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(WARNING "SEMA_BUILD_FUZZ needs clang (CC=clang); building only the corpus replays")
  elseif(SEMA_SANITIZE MATCHES "thread")
    message(WARNING "SEMA_BUILD_FUZZ does not mix with SEMA_SANITIZE=thread; libFuzzer skipped")
  else()
    set(SEMA_FUZZ_LIBFUZZER ON)
    # Coverage feedback needs the code under test instrumented, not just the fuzz programs.
    add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                        -fno-sanitize-recover=all)
    add_link_options(-fsanitize=address,undefined)
  endif()
endif()

function(sema_fuzz_define)
  if(NOT TARGET semad_core)
    return()
  endif()
  set(dir ${PROJECT_SOURCE_DIR}/fuzz)
  file(GLOB targets CONFIGURE_DEPENDS ${dir}/fuzz_*.c)
  foreach(src ${targets})
    get_filename_component(name ${src} NAME_WE)
    string(REGEX REPLACE "^fuzz_" "" short ${name})
    set(common ${src} ${dir}/route_check.c)

    add_executable(${name}_replay ${dir}/replay.c ${common})
    set_target_properties(${name}_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    target_include_directories(${name}_replay PRIVATE ${dir})
    target_compile_options(${name}_replay PRIVATE ${SEMA_WARNINGS})
    target_link_libraries(${name}_replay PRIVATE semad_core)
    if(SEMA_BUILD_TESTS)
      add_test(NAME fuzz.${short} COMMAND ${name}_replay ${dir}/corpus/${short})
      set_tests_properties(fuzz.${short} PROPERTIES TIMEOUT 60 LABELS fuzz
        ENVIRONMENT "${SEMA_TEST_ENV}")
    endif()

    if(SEMA_FUZZ_LIBFUZZER)
      add_executable(${name} ${common})
      set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
      target_include_directories(${name} PRIVATE ${dir})
      target_compile_options(${name} PRIVATE ${SEMA_WARNINGS} -fsanitize=fuzzer)
      target_link_options(${name} PRIVATE -fsanitize=fuzzer)
      target_link_libraries(${name} PRIVATE semad_core)
    endif()
  endforeach()
endfunction()

cmake_language(DEFER CALL sema_fuzz_define)
