#!/usr/bin/env bash
# Writes `railscope doctor --json --from` of every node image under tests/images/ (the example image
# spectrumx-2rail-healthy among them) into DIR, one file per image (exit status on the first line), to compare two commits:
#   scripts/doctor_all.sh /tmp/before; git checkout X; scripts/doctor_all.sh /tmp/after; diff -r /tmp/before /tmp/after
set -u
out=${1:?usage: doctor_all.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
for img in tests/images/*/; do
  [ -d "$img" ] || continue
  name=$(basename "$img")
  { python3 -m agent.cli doctor --from "$img" --json; echo "exit $?"; } >"$out/$name.json" 2>/dev/null
done
echo "$(ls "$out" | wc -l) images -> $out"
