# SPDX-License-Identifier: MIT
# embed_ui.cmake: writes ${OUT}, the dashboard's files (every file of ${DIR}, by name) as the
# C table ui__files of http/ui.h: each file's bytes, length and ETag (the first 16 hex digits
# of its SHA-256). Run at build time (src/http/CMakeLists.txt), so an edited file is in the
# next semad without a configure.
file(GLOB names RELATIVE ${DIR} ${DIR}/*)
list(SORT names)
set(arrays "")
set(rows "")
set(i 0)
foreach(name ${names})
  if(IS_DIRECTORY ${DIR}/${name})
    continue()
  endif()
  file(READ ${DIR}/${name} hex HEX)
  file(SHA256 ${DIR}/${name} sum)
  string(SUBSTRING ${sum} 0 16 etag)
  # every byte as \xNN (so no escape runs into the next character), 32 bytes a line
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" esc "${hex}")
  string(REPEAT "\\\\x.." 32 line)
  string(REGEX REPLACE "(${line})" "\\1\"\n    \"" esc "${esc}")
  string(APPEND arrays "static const char f${i}[] =\n    \"${esc}\";\n")
  string(APPEND rows "    {\"${name}\", f${i}, sizeof f${i} - 1, \"\\\"${etag}\\\"\"},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT} "/* Generated from src/http/ui by embed_ui.cmake: do not edit. */\n"
  "#include \"http/ui.h\"\n\n${arrays}\nconst ui_file_t ui__files[] = {\n${rows}};\n"
  "const size_t ui__nfiles = ${i};\n")
