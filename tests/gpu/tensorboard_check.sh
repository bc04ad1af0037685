#!/usr/bin/env bash
# The TensorBoard part of issue 41 on a machine with the `tensorboard` Python package (the GPU machine):
# makes three run folders with the given zest binary and reads each back with TensorBoard's own loader
# (tests/gpu/tensorboard_check.py): a HY-Motion tiny run with a traced step range, resumed once (two event
# files), an SD tiny run with validation pictures, and a `zest bench --profile` trace folder.
# Usage: tests/gpu/tensorboard_check.sh [ZEST_BINARY] [WORK_DIR]   (defaults: build-gpu/zest, /tmp/zest_tb_check)
set -euo pipefail
cd "$(dirname "$0")/../.."
zest=$(realpath "${1:-build-gpu/zest}")
work=${2:-/tmp/zest_tb_check}
repo=$PWD
rm -rf "$work" && mkdir -p "$work" && cd "$work"

# HY-Motion tiny: steps 3-5 traced (kernels on a GPU), 12 steps, then resumed to 16 (a second event file).
"$zest" data synth --config "$repo/configs/hymotion_tiny.toml" --out hy_data --samples 64
cat > hy.toml <<TOML
[model]
name = "hymotion_tiny"
[data]
dir = "hy_data"
batch_size = 4
seq_len = 32
num_workers = 1
[engine]
accumulation_steps = 2
[optimizer]
lr = 3e-3
[train]
max_steps = 12
log_every = 2
run_dir = "hy_run"
[checkpoint]
every_steps = 5
merge_at_end = false
[profile]
steps = [3, 5]
TOML
"$zest" train hy.toml
"$zest" train hy.toml --set train.max_steps=16

# SD tiny with validation pictures every 2 steps (the committed tiny pipeline).
cat > sd.toml <<TOML
[model]
pretrained = "$repo/tests/data/sd_tiny/sd15/unet"
[data]
dir = "sd_data"
batch_size = 2
num_workers = 1
[optimizer]
lr = 1e-3
[train]
max_steps = 4
log_every = 1
run_dir = "sd_run"
[checkpoint]
merge_at_end = false
[sample]
every_steps = 2
prompts = ["a red fox", "a lighthouse", "a red fox"]
steps = 2
size = "16x8"
num_images = 2
[profile]
steps = [3, 4]
TOML
"$zest" data synth --config sd.toml --out sd_data --samples 16
"$zest" train sd.toml

# A bench trace (kernels and tables on a GPU).
"$zest" bench "$repo/bench/configs/hymotion_tiny.toml" --steps 2 --warmup 1 --profile bench_prof > bench.json

status=0
python3 "$repo/tests/gpu/tensorboard_check.py" hy_run || status=1
python3 "$repo/tests/gpu/tensorboard_check.py" sd_run --trace-dir bench_prof || status=1
ls hy_run/tensorboard sd_run/tensorboard bench_prof
exit $status
