#!/usr/bin/env bash
# Prepared in the 22nd session: what each part of a served step costs on the H200, measured by
# difference with `uniprefill bench step` (one forward of a given mix, repeated; the 8B shape,
# prepared for a 2048-row step budget as serve prepares it) instead of fitted from served traces
# (tools/serve_step_fit.py, where the parts vary together). Questions, one group of mixes each:
#   the forward's constant and per-row cost of dense chunks over 16K cached tokens (c256..c2048);
#   a decode at 32K and at 1K beside a 1024-row chunk, and alone;
#   a second prompt's chunk (128, 64 and 256 rows over 2K) beside a chunk of the same total rows;
#   the layers only decodes run: a segment-0 chunk (layers up to the first drop layer's
#   attention) alone and beside 4 decodes, against the dense chunk beside them;
#   the LM head: a prompt's last chunk against a chunk before its last;
#   then the two-prompt mixes again with UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1;
#   deep chunks (256-512 rows over 60-104K keys) as the 130K dense prompt's served steps;
#   then 10 of call L's served forwards replayed alone (tools/trace_to_mixes.py).
# Reuses build-dev-new from calls K / L when the machine stayed warm.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
if [ ! -x build-dev-new/uniprefill ]; then
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"
fi
B=build-dev-new/uniprefill
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
COMMON="--device cuda --shape llama-3.1-8b --budget 2048 --warmup 2 --repeats 7 --commit $COMMIT"
MIXES="c1024@16384; c256@16384; c512@16384; c1024@16384; c1536@16384; c2048@16384; l1024@16384;"
MIXES+=" d1@32768; d4@32768; c1024@16384+d1@32768; c1024@16384+d4@32768;"
MIXES+=" d16@1024; c1024@16384+d16@1024;"
MIXES+=" c896@16384+c128@2048; c960@16384+c64@2048; c768@16384+c256@2048;"
MIXES+=" s1024@16384; s1024@16384+d4@32768; s2048@16384+d4@32768; c2048@16384+d4@32768"
left=$(( 585 - ($(date +%s) - t0) ))
UNIPREFILL_CUDA_STEP_TRACE=$OUT/trace_steps.jsonl timeout $left \
  $B bench step $COMMON --mixes "$MIXES" --json $OUT/step.json > $OUT/step.txt 2> $OUT/step.err
echo "bench step rc $? at $(( $(date +%s) - t0 )) s"
# The same binary with a step's prompts' chunks in one launch of our attention kernel (22nd
# session, written without a GPU; CudaPrefixInPlaceTest.ChunksOfSeveralPromptsShareOneLaunch-
# WhenAsked in call K checks it): the two-prompt mixes and their one-prompt baseline.
left=$(( 585 - ($(date +%s) - t0) ))
UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1 timeout $left $B bench step $COMMON \
  --mixes "c1024@16384; c896@16384+c128@2048; c960@16384+c64@2048; c768@16384+c256@2048" \
  --json $OUT/step_onelaunch.json > $OUT/step_onelaunch.txt 2>> $OUT/step.err
echo "bench step (one launch) rc $? at $(( $(date +%s) - t0 )) s"
cat $OUT/step.txt $OUT/step_onelaunch.txt; tail -3 $OUT/step.err
python3 tools/step_marginals.py $OUT/step.json $OUT/step_onelaunch.json
# Deep chunks as the 130K dense prompt's served steps ran them (call G's trace: 256-512 rows over
# 60-104K keys beside ~9 short decodes took 1.2-1.3x what whole-prefill rates predict): fewer
# repeats, each repeat prefills its prefix again (~8 s at 104K).
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left $B bench step --device cuda --shape llama-3.1-8b --budget 2048 --warmup 1 \
  --repeats 3 --commit $COMMIT \
  --mixes "c512@60160; c384@80256; d9@600; c384@80256+d9@600; c256@103808" \
  --json $OUT/step_deep.json > $OUT/step_deep.txt 2>> $OUT/step.err
echo "bench step (deep) rc $? at $(( $(date +%s) - t0 )) s"; cat $OUT/step_deep.txt
python3 tools/step_marginals.py $OUT/step_deep.json
# Served steps replayed alone: 10 forwards of call L's chunked 4 x 32K trace (when this machine
# is the one call L ran on) timed as bench step mixes, against their served GPU times.
if [ -f /tmp/s/trace_chunked.jsonl ]; then
  python3 tools/trace_to_mixes.py mixes /tmp/s/trace_chunked.jsonl $OUT/replay_served.json \
    --count 10 > /tmp/replay_mixes.txt
  left=$(( 585 - ($(date +%s) - t0) ))
  # (bench step times wall clock from an idle GPU; the replay's own trace holds its GPU times)
  UNIPREFILL_CUDA_STEP_TRACE=$OUT/trace_replay.jsonl timeout $left \
    $B bench step --device cuda --shape llama-3.1-8b --budget 2048 --warmup 1 \
    --repeats 5 --commit $COMMIT --mixes "$(cat /tmp/replay_mixes.txt)" \
    --json $OUT/replay.json > $OUT/replay.txt 2>> $OUT/step.err
  echo "replay rc $? at $(( $(date +%s) - t0 )) s"
  python3 tools/trace_to_mixes.py compare $OUT/replay_served.json $OUT/replay.json
fi
xz -9 $OUT/trace_steps.jsonl $OUT/trace_replay.jsonl 2>/dev/null
