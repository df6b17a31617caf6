# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# Writes OUT: `const char NAME[]` holding IN's bytes plus a NUL, and `NAME_len`.
file(READ "${IN}" _hex HEX)
string(LENGTH "${_hex}" _hexlen)
math(EXPR _len "${_hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" _bytes "${_bytes}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${IN} by server/embed.cmake; do not edit. */\n"
  "#include <stddef.h>\n"
  "const char ${NAME}[] = {\n${_bytes}0x00 };\n"
  "const size_t ${NAME}_len = ${_len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
