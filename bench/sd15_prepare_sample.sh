#!/usr/bin/env bash
# `zest data prepare images` and `zest sample` at SD1.5 size on the GPU machine (bench/RESULTS.md): a random
# SD1.5-size pipeline folder and N captioned pictures (bench/make_sd15_pipeline.py, from the references'
# save_pretrained), encoded at 512², then one prompt sampled at 512² with 30 DDIM steps, 1 and 4 pictures.
# Logs and the sampled grid go to OUT. Usage, checkout root: bench/sd15_prepare_sample.sh ZEST OUT [N]
set -uo pipefail
zest=$1 out=$2 count=${3:-256}
work=$(mktemp -d)
python3 bench/make_sd15_pipeline.py --ref-src .anchor/ref_src.tar.gz "$work/sd15" --images "$work/images" \
  --count "$count" > "$out/make_pipeline.log" 2>&1 || { tail -5 "$out/make_pipeline.log"; exit 1; }
timed() {  # LOG COMMAND...: the exit code and wall milliseconds in the log's last line
  local log=$1; shift
  local t0; t0=$(date +%s%N)
  "$@" > "$log" 2>&1; local rc=$?
  echo "rc=$rc wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >> "$log"; tail -3 "$log"
}
timed "$out/prepare.log" "$zest" data prepare images --pretrained "$work/sd15" --images "$work/images" \
  --out "$work/dataset" --resolution 512
timed "$out/sample1.log" "$zest" sample --pretrained "$work/sd15" --prompt "a red lighthouse at dusk, watercolor" \
  --steps 30 -n 1 -o "$out/sd15_sample1.png"
timed "$out/sample4.log" "$zest" sample --pretrained "$work/sd15" --prompt "a red lighthouse at dusk, watercolor" \
  --steps 30 -n 4 -o "$out/sd15_sample4.png"
rm -rf "$work"
