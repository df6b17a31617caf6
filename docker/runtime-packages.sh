#!/bin/sh
# Prints, one a line, the Debian (or Ubuntu) packages that own the shared
# libraries the given binaries load (ldd), so that an image's final stage can
# install exactly those and no -dev package or compiler. Libraries no package
# owns (e.g. CUDA's, from NVIDIA's base image) are skipped; the final stage's
# base provides them. Exits non-zero when ldd reports a missing library.
set -eu
ldd "$@" >/tmp/ldd.out
if grep -q 'not found' /tmp/ldd.out; then
  grep 'not found' /tmp/ldd.out >&2
  exit 1
fi
awk '$2 == "=>" && $3 ~ /^\// { print $3 }' /tmp/ldd.out | sort -u | while read -r lib; do
  dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true
done | cut -d: -f1 | sort -u
