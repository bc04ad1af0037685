#!/usr/bin/env bash
# Runs a multi-rank GPU suite only where every rank has its own GPU: "needs_gpus.sh N COMMAND..." exits 77
# (ctest's "skipped", SKIP_RETURN_CODE in tests/CMakeLists.txt) with one line when the machine has fewer than N;
# otherwise it runs COMMAND. NCCL refuses two ranks on one device, and a rank whose device does not exist waits.
set -u
needed=$1; shift
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${have:-0}" -lt "$needed" ]; then
  echo "skipped: this suite runs one rank per GPU and needs $needed GPUs; this machine has ${have:-0}"
  exit 77
fi
exec "$@"
