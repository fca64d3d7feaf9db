#!/usr/bin/env bash
# 14th session, call 1 (issue 18): the new binary (work-left shares) and the old one (HEAD 69c4cfe's
# scheduler, carried in .device/old/) built on the GPU machine, and the 8B checkpoint, all kept in
# /tmp of the warm machine for call 2.
cd "$(dirname "$0")/../../../.."
t0=$(date +%s)
mkdir -p /tmp/new /tmp/old $OUT
( [ -f /tmp/l8b/config.json ] || python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b \
    --dtype bf16 --out /tmp/l8b --quiet > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ckpt=$!
UP_GPU_TARGETS=uniprefill bash scripts/gpu_build.sh build /tmp/bld > $OUT/build_new.log 2>&1
echo "new build rc $? at $(( $(date +%s) - t0 )) s"; cp /tmp/bld/uniprefill /tmp/new/
cp src/engine/scheduler.cc /tmp/new_scheduler.cc && cp src/engine/scheduler.h /tmp/new_scheduler.h
cp .device/old/scheduler.cc .device/old/scheduler.h src/engine/
ninja -C /tmp/bld uniprefill > $OUT/build_old.log 2>&1
echo "old build rc $? at $(( $(date +%s) - t0 )) s"; cp /tmp/bld/uniprefill /tmp/old/
cp /tmp/new_scheduler.cc src/engine/scheduler.cc && cp /tmp/new_scheduler.h src/engine/scheduler.h
wait $ckpt
tail -3 $OUT/build_new.log; md5sum /tmp/new/uniprefill /tmp/old/uniprefill
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
