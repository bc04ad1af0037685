#!/usr/bin/env bash
# The rooms' arrows check (scripts/check-includes --arrows, docs/rooms.txt) passes on this tree and fails on a
# copy of it with a forbidden arrow planted: an #include up from kernels/ into train/, an include between two
# rooms with no arrow between them (launch/ → models/), and a library linked against the arrows in
# CMakeLists.txt. Each failure must name the file, the line and the arrow.
# Usage: tests/check_arrows.sh SOURCE_DIR (CTest: check_arrows)
set -euo pipefail
src=$(cd "${1:?usage: check_arrows.sh SOURCE_DIR}" && pwd)
check="$src/scripts/check-includes"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$check" --arrows "$src" > "$tmp/clean.log" || { cat "$tmp/clean.log"; echo "FAIL: the tree itself breaks its arrows"; exit 1; }

# A copy of what the check reads: the table, CMakeLists.txt and the rooms' folders.
copy() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree/docs"
  cp "$src/docs/rooms.txt" "$tmp/tree/docs/"
  cp "$src/CMakeLists.txt" "$tmp/tree/"
  for room in $(sed 's/#.*//; /:/!d; s/:.*//' "$src/docs/rooms.txt"); do cp -r "$src/$room" "$tmp/tree/"; done
}

# expect_failure WHAT PATTERN...: the check fails and its output holds every pattern.
expect_failure() {
  local what=$1
  shift
  if "$check" --arrows "$tmp/tree" > "$tmp/planted.log" 2>&1; then
    cat "$tmp/planted.log"
    echo "FAIL: $what: the check passed"
    exit 1
  fi
  for pattern in "$@"; do
    grep -qF -- "$pattern" "$tmp/planted.log" || { cat "$tmp/planted.log"; echo "FAIL: $what: no '$pattern'"; exit 1; }
  done
  echo "ok: $what: $(head -1 "$tmp/planted.log")"
}

copy
line=$(($(wc -l < "$tmp/tree/kernels/linear_op.cpp") + 1))
echo '#include "train/trainer.h"' >> "$tmp/tree/kernels/linear_op.cpp"
expect_failure "kernels/ including train/" "kernels/linear_op.cpp:$line:" "forbidden arrow kernels → train"

copy
sed -i '0,/^#include "/s//#include "models\/registry.h"\n#include "/' "$tmp/tree/launch/launcher.h"
line=$(grep -n '"models/registry.h"' "$tmp/tree/launch/launcher.h" | cut -d: -f1)
[ -n "$line" ] || { echo "FAIL: no #include planted in launch/launcher.h"; exit 1; }
expect_failure "launch/ including models/" "launch/launcher.h:$line:" "forbidden arrow launch → models"

copy
sed -i 's/^zest_library(zest_kernels DIRS kernels DEPS zest_engine)/zest_library(zest_kernels DIRS kernels DEPS zest_engine zest_models)/' \
  "$tmp/tree/CMakeLists.txt"
grep -q 'DEPS zest_engine zest_models)' "$tmp/tree/CMakeLists.txt" || { echo "FAIL: zest_kernels' line not found"; exit 1; }
expect_failure "zest_kernels linking zest_models" "zest_kernels links zest_models: forbidden arrow kernels → models"

echo "check_arrows: the check passes on the tree and fails on each planted arrow"
