# SPDX-License-Identifier: MIT
# embed_lua.cmake: writes ${OUT}, the script ${IN} as the C string rs__lua (included by
# CMakeLists.txt with IN and OUT set).
file(READ ${IN} lua)
string(REPLACE "\\" "\\\\" lua "${lua}")
string(REPLACE "\"" "\\\"" lua "${lua}")
string(REPLACE "\n" "\\n\"\n    \"" lua "${lua}")
file(WRITE ${OUT} "/* Generated from sema.lua by embed_lua.cmake: do not edit. */\n"
  "extern const char rs__lua[];\nconst char rs__lua[] =\n    \"${lua}\";\n")
