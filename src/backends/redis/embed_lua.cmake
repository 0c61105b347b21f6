# SPDX-License-Identifier: MIT
# embed_lua.cmake: writes ${OUT}, the library ${IN} as the C string rs__lua, with the line
# "-- @PROTO@" replaced by the constants in ${PROTO} (redis_luagen's output). Run at build time:
# cmake -DIN=... -DPROTO=... -DOUT=... -P embed_lua.cmake
cmake_minimum_required(VERSION 3.25)
file(READ ${IN} lua)
file(READ ${PROTO} proto)
string(FIND "${lua}" "-- @PROTO@\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${IN} has no line \"-- @PROTO@\" for the generated constants")
endif()
string(REPLACE "-- @PROTO@\n" "${proto}" lua "${lua}")
string(REPLACE "\\" "\\\\" lua "${lua}")
string(REPLACE "\"" "\\\"" lua "${lua}")
string(REPLACE "\n" "\\n\"\n    \"" lua "${lua}")
file(WRITE ${OUT}.tmp "/* Generated from sema.lua and redis_proto.h by embed_lua.cmake: do not edit. */\n"
  "extern const char rs__lua[];\nconst char rs__lua[] =\n    \"${lua}\";\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
