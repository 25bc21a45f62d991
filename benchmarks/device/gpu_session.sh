#!/usr/bin/env bash
# One prepared run on a lent GPU machine (the `device` tool of this workplace; by hand: any
# CUDA host with torch). It writes under $OUT:
#   gpu.csv            nvidia-smi: name, memory, power limits, clocks, driver
#   samples.json       the full calibration suite's raw samples (planner calibrate --samples-out)
#   measured.json      the profile fitted from them (planner calibrate --out)
#   closed_loop.txt    measured training steps of shipped dense GPTs on the GPU (time and the
#                      allocator's peaks), predicted under the measured profile and the shipped
#                      public-figure profile
#   <model>-s2048.json.gz  profiler traces of two steps each, for planner compare-trace
#   log.txt            everything printed, with SDPA's own backend choice and the float8
#                      GEMM table (benchmarks/device/sdpa_choice.py, fp8_scaling.py)
# About 2.5 minutes on an H200 (suite 69 s, closed loops 26 s, traces 24 s, the rest less).
# The machine's image lacks pydantic: its wheels travel in .whl/ (see docs/calibration.md).
# Usage: OUT=/some/dir ACCEL=h200-sxm-141gb CLUSTER=dgx-h200 bash benchmarks/device/gpu_session.sh
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
ACCEL=${ACCEL:-h200-sxm-141gb}
CLUSTER=${CLUSTER:-dgx-h200}
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
log() { tee -a "$OUT/log.txt"; }
PLANNER=(python3 -c "import sys; from planner.cli import main; sys.exit(main(sys.argv[1:]))")
nvidia-smi --query-gpu=name,memory.total,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,driver_version \
  --format=csv > "$OUT/gpu.csv" 2>&1
cat "$OUT/gpu.csv" | log
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" 2>&1 | log
start=$(date +%s)
timeout "${CAL_TIMEOUT:-300}" "${PLANNER[@]}" calibrate --device cuda --accelerator "$ACCEL" \
  --id "$ACCEL-measured" --out "$OUT/measured.json" --samples-out "$OUT/samples.json" 2>&1 | log
echo "calibrate: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | log
if [ ! -s "$OUT/measured.json" ]; then  # the full suite failed or ran out of time: the quick one
  timeout 150 "${PLANNER[@]}" calibrate --device cuda --quick --accelerator "$ACCEL" \
    --id "$ACCEL-measured-quick" --out "$OUT/measured.json" --samples-out "$OUT/samples.json" 2>&1 | log
fi
[ "${LOOP_TIMEOUT:-180}" = 0 ] && exit 0
start=$(date +%s)
profiles=("calibration/profiles/$ACCEL.json")
[ -s "$OUT/measured.json" ] && profiles=("$OUT/measured.json" "${profiles[@]}")
timeout "${LOOP_TIMEOUT:-180}" python3 benchmarks/closed_loop.py --device cuda --ddp 1 \
  --model gpt3-1.3b gpt-3.6b --seq-len 1024 2048 --micro-batch 4 --steps 6 \
  --profile "${profiles[@]}" 2>&1 | tee "$OUT/closed_loop.txt" | log
echo "closed loop: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" | log
timeout "${EXTRA_TIMEOUT:-120}" python3 benchmarks/device/sdpa_choice.py 2>&1 | log
timeout "${EXTRA_TIMEOUT:-120}" python3 benchmarks/device/fp8_scaling.py 2>&1 | log
timeout "${EXTRA_TIMEOUT:-120}" python3 benchmarks/device/trace_closed_loop.py --out "$OUT" \
  --model gpt3-1.3b gpt-3.6b --seq-len 2048 2>&1 | grep -v USDT | log
