#!/usr/bin/env bash
# One prepared GPU run (<= 8 minutes on one H200): full calibration suite, measured profile,
# closed loop with a ~1B model. Writes under $OUT (the device tool brings it back).
#   run: bash benchmarks/gpu_check.sh     (with torch and the project installed on the device)
set -euo pipefail
OUT="${OUT:-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv" || true
timeout 300 planner calibrate --device cuda --accelerator h200-sxm-141gb --id h200-measured \
  --out "$OUT/h200-measured.json" --samples-out "$OUT/h200-samples.json" 2>&1 | tee "$OUT/calibrate.log"
timeout 150 python benchmarks/closed_loop.py --device cuda --model gpt3-1.3b --ddp 1 \
  --profile "$OUT/h200-measured.json" 2>&1 | tee "$OUT/closed_loop.log"
