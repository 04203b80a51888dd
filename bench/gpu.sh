#!/usr/bin/env bash
# Everything the GPU machine checks and measures, in one call (figures and commands: bench/RESULTS.md):
#   bench/gpu.sh OUT_DIR [BUILD_DIR] [STAGE...]
# STAGE: tests (GPU unit and parity tests), launch-step-suite (the same with the one-launch
# batch-1 step off, HARK_CUDA_STEP_KERNEL=0), large (large-v3 parity against transformers fp16/fp32),
# bench (hark bench on large-v3 / turbo, f16 and q8_0), transformers (the same workload with
# transformers, for the ratios), parakeet (hark bench and bench/transformers_parakeet.py on
# parakeet-tdt-0.6b-v2 and parakeet-ctc-1.1b, bf16, and hark bench --products), parakeet-oracle (tools/oracle/parakeet.py:
# the Parakeet reference models, packed into OUT_DIR/parakeet-oracle.tar.gz), profile (hark bench
# with HARK_CUDA_PROFILE: GPU time by stage, Parakeet and large-v3), nsys (Nsight Systems' kernel
# table for the Parakeet batch, where nsys is installed), ncu (Nsight Compute: every kernel of
# the runs hark bench brackets, large-v3 batch 1, 16, 64 and 120 (F16, the last int8-auto; Q8_0
# at 1 and 16) and the Parakeet batch, summed by name by bench/ncu_summary.py, and for Whisper
# the last decode step's alone), sections (Nsight Compute's sections for one kernel: HARK_NCU_KERNEL,
# HARK_NCU_RUN; see the stage), stalls (where that kernel's warps wait, by reason and by SASS
# instruction: bench/ncu_stalls.py), experiments (the step's products each way, against the
# default: large-v3's step at batch 1-32; HARK_EXP_BASELINE adds a second binary), hour (an hour of audio through hark run with random-weight
# large-v3-turbo and large-v3 checkpoints), short (30-s and 5-min files through hark run in the
# sequential mode, same checkpoints). Default: the first four. Full logs go
# to OUT_DIR; a short summary is printed last. BUILD_DIR (default build-gpu) holds hark and tests/hark_tests, built with
# scripts/build-gpu.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu.sh OUT_DIR [BUILD_DIR] [STAGE...]}
build=${2:-build-gpu}
shift $(( $# >= 2 ? 2 : 1 ))
stages=${*:-tests large bench transformers}
mkdir -p "$out"

source scripts/cublas-path.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
summary="$out/summary.txt"
: > "$summary"

has() { [[ " $stages " == *" $1 "* ]]; }
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)  # the ncu, sections and stalls stages
# The sections and stalls stages' kernel (a regex on demangled names) and hark bench run.
ncu_kernel=${HARK_NCU_KERNEL:-decode_attention_kernel<__half, signed char}
ncu_run=${HARK_NCU_RUN:---model large-v3 --type f16 --batches 64 --tokens 3 --windows 1}

if has parakeet-oracle; then
  echo "== Parakeet oracle (transformers references)" | tee -a "$summary"
  oracle_dir=$(mktemp -d)
  PYTHONUNBUFFERED=1 timeout 400 python3 tools/oracle/parakeet.py "$oracle_dir" > "$out/parakeet-oracle.log" 2>&1
  echo "exit $?" >> "$summary"
  tail -5 "$out/parakeet-oracle.log" >> "$summary"
  # The run tool brings back few files: one archive, without the library sources it packs.
  tar czf "$out/parakeet-oracle.tar.gz" -C "$oracle_dir" --exclude='transformers-*src*' .
  rm -rf "$oracle_dir"
fi

if has tests; then
  echo "== GPU tests" | tee -a "$summary"
  timeout 400 "$build/tests/hark_tests" \
    --gtest_filter='*Cuda*:*Parity*cuda*' > "$out/tests.log" 2>&1
  echo "exit $?" >> "$summary"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran" "$out/tests.log" | tail -40 >> "$summary"
fi

if has launch-step-suite; then
  # The GPU tests with every step launch per op (HARK_CUDA_STEP_KERNEL=0), where by default a
  # batch-1 step over native K/V runs as one launch.
  echo "== GPU tests, the one-launch step off" | tee -a "$summary"
  HARK_CUDA_STEP_KERNEL=0 timeout 400 "$build/tests/hark_tests" \
    --gtest_filter='*Cuda*:*Parity*cuda*' > "$out/launch-step-suite.log" 2>&1
  echo "exit $?" >> "$summary"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran" "$out/launch-step-suite.log" \
    | tail -40 >> "$summary"
fi

if has large; then
  echo "== large-v3 parity (random weights, transformers fp16/fp32)" | tee -a "$summary"
  large_dir=$(mktemp -d)
  timeout 300 python3 tools/oracle/whisper_large.py "$large_dir" > "$out/large.log" 2>&1
  HARK_LARGE_V3_DIR="$large_dir" timeout 300 "$build/tests/hark_tests" \
    --gtest_filter='*Large*' >> "$out/large.log" 2>&1
  echo "exit $?" >> "$summary"
  grep -E "vs transformers|equals|agree|OK \]|FAILED|Failure" "$out/large.log" | tail -20 >> "$summary"
  rm -rf "$large_dir"
fi

if has hour || has short; then
  # Audio through hark run, as a user runs it: WAV parsing, resampling, the log-mel, the windows,
  # text. Random-weight checkpoints of the real shapes (tools/oracle/whisper_large.py
  # --checkpoint-only), converted by hark convert; greedy, --max-tokens 120 (random weights rarely
  # end a window early), no fallback. The audio is 44.1-kHz stereo noise.
  # HARK_HOUR_BASELINE: another hark binary to run the same way (a build before a change).
  # cuBLASLt's tuning cache starts empty in a folder of the stage's own: each binary's first run
  # of a model times the products' candidates, later runs find them in the cache.
  # hour: an hour in batches of 120 windows, twice; then a 30-s file; and the bare process.
  # short: what a user with short files waits for in the default, sequential mode (--batch-size
  # 1): a 30-s file with an empty cache and again, three in one process, five minutes, and a
  # 30-s file with every kernel module loaded up front (CUDA_MODULE_LOADING=EAGER).
  echo "== Audio through hark run (random-weight checkpoints; stages: $stages)" | tee -a "$summary"
  runs_dir=$(mktemp -d)
  python3 -c "
import sys, wave, numpy
rng = numpy.random.default_rng(3)
def noise(path, seconds):
    with wave.open(path, 'wb') as f:
        f.setnchannels(2); f.setsampwidth(2); f.setframerate(44100)
        for start in range(0, seconds, 60):
            frames = 44100 * min(60, seconds - start)
            f.writeframes(rng.integers(-3000, 3000, size=(frames, 2), dtype=numpy.int16).tobytes())
if sys.argv[2] == 'hour':
    noise(sys.argv[1] + '/hour.wav', 3600)
noise(sys.argv[1] + '/short.wav', 30)
noise(sys.argv[1] + '/short2.wav', 30)
noise(sys.argv[1] + '/short3.wav', 30)
noise(sys.argv[1] + '/five.wav', 300)
" "$runs_dir" "$(has hour && echo hour)"
  if has hour; then
    # The process alone: start, the libraries' loading, exit.
    for repeat in 1 2 3; do
      start=$(date +%s.%N)
      "$build/hark" --version > /dev/null
      end=$(date +%s.%N)
      echo "hark --version: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }') s wall" | tee -a "$summary"
    done
  fi
  # One run (LABEL BINARY MODEL AUDIO... -- [options]): its wall time and the -v lines that say
  # where the time went, to the summary; the whole log to runs.log.
  timed_run() {
    local label=$1 binary=$2 model=$3 start end status audio=()
    shift 3
    while [ "$1" != -- ]; do audio+=("$runs_dir/$1"); shift; done
    shift
    start=$(date +%s.%N)
    HARK_CUDA_TUNING_CACHE="$runs_dir/$(basename "$binary")-$model.tune" \
    timeout 300 "$binary" run "$runs_dir/$model.gguf" "${audio[@]}" --device cuda \
      --max-tokens 120 --no-fallback --language en --timestamps none -v "$@" \
      > "$runs_dir/out.txt" 2> "$runs_dir/err.txt"
    status=$?
    end=$(date +%s.%N)
    echo "$model, $(basename "$binary"), $label: exit $status, $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s wall," \
      "$(wc -w < "$runs_dir/out.txt") words" | tee -a "$summary"
    grep -E "s of audio|loaded|ready|encoded and decoded|decoded in" "$runs_dir/err.txt" \
      | head -24 | tee -a "$summary"
    { echo "== $model, $binary, $label"; cat "$runs_dir/err.txt"; } >> "$out/runs.log"
  }
  for model in "large-v3-turbo 4" "large-v3 32"; do
    set -- $model
    timeout 300 python3 tools/oracle/whisper_large.py "$runs_dir/$1" --checkpoint-only \
      --decoder-layers "$2" >> "$out/runs.log" 2>&1
    timeout 300 "$build/hark" convert "$runs_dir/$1" -o "$runs_dir/$1.gguf" --type f16 \
      >> "$out/runs.log" 2>&1
    rm -rf "${runs_dir:?}/$1"
    for binary in "$build/hark" ${HARK_HOUR_BASELINE:-}; do
      if has hour; then
        timed_run "hour, run 1" "$binary" "$1" hour.wav -- --batch-size 120
        timed_run "hour, run 2" "$binary" "$1" hour.wav -- --batch-size 120
        timed_run "30 s" "$binary" "$1" short.wav --
      fi
      if has short; then
        rm -f "$runs_dir/$(basename "$binary")-$1.tune"
        timed_run "30 s, empty cache" "$binary" "$1" short.wav --
        timed_run "30 s" "$binary" "$1" short.wav --
        timed_run "3 x 30 s" "$binary" "$1" short.wav short2.wav short3.wav --
        timed_run "5 min" "$binary" "$1" five.wav --
        CUDA_MODULE_LOADING=EAGER timed_run "30 s, eager modules" "$binary" "$1" short.wav --
      fi
    done
  done
  rm -rf "$runs_dir"
fi

if has bench; then
  echo "== hark bench" | tee -a "$summary"
  for run in "large-v3 f16 1,16,64" "large-v3-turbo f16 1,16,64" "large-v3 q8_0 1,16"; do
    set -- $run
    timeout 300 "$build/hark" bench --device cuda --model "$1" --type "$2" --batches "$3" \
      --tokens 120 --windows 5 >> "$out/bench.log" 2>&1
    echo "exit $? ($run)" >> "$out/bench.log"
  done
  cat "$out/bench.log" >> "$summary"
fi

if has experiments; then
  # The default against the other ways of the step's products (bench/RESULTS.md, thirty-first
  # session), in one binary; the default runs first and last, so that the GPU's clocks drifting
  # shows. A run takes about 25 s: HARK_EXP_VARIANTS (names separated by spaces) picks some,
  # HARK_EXP_ROUNDS (1) repeats them, HARK_EXP_MODEL (large-v3), HARK_EXP_CROSS_KV (int8) and
  # HARK_EXP_BATCHES (1,4,8,16,32) change the run. step-decode-linear and step-skinny put every
  # batch of the fused step on one kernel (the default switches at 8 sequences, 10 with Q8_0);
  # query-launch gives the cross-attention's query a launch of its own at every batch (the default
  # computes it inside the attention only with native K/V: HARK_EXP_CROSS_KV=native);
  # int8-registers and int8-staged put every batch's INT8 cross-attention on one form (the default
  # stages from 8 sequences of large-v3); int8-frames attends over INT8 frames instead of the
  # storage HARK_EXP_CROSS_KV names (a variant's settings come after it and win); int8-auto takes
  # INT8 frames from 60 windows and INT8 K/V below; native runs batch 1 as one persistent launch
  # (decoder_step_sm90.h, the default over native K/V), native-launches launch per op; step-kernel
  # is native with CTA 0's time by phase in its log; step-kernel-16 and -128 keep 16 or 128 KB
  # of its copies in flight a CTA (64 by default); step-kernel-poll-256 and -1000 sleep that many
  # ns between a tagged vector's tries (32 by default); step-kernel-copies, -weights and -work
  # time one side of it alone (HARK_CUDA_STEP_ONLY: the copies with nothing computed, the same
  # without the attentions' keys and values, the phases with nothing copied; the last with CTA
  # 0's time by phase).
  # HARK_EXP_DEADLINE (seconds since the script started) skips the runs that would start after
  # it, so that the summary is written before the call's time runs out. The runs' logs go to
  # OUT_DIR/experiments.tar.gz.
  # HARK_EXP_BASELINE names a second hark binary (a build before a change, carried beside
  # BUILD_DIR's): each variant then runs with it too, right before, as "name@baseline".
  echo "== experiments: the step's products, each way (step ms by batch)" | tee -a "$summary"
  mkdir -p "$out/experiments"
  # name | weights | environment
  variants=(
    "default|f16|"
    "norm-kernels|f16|HARK_CUDA_SKINNY_NORM=0"
    "append-kv|f16|HARK_CUDA_SKINNY_SCATTER=0"
    "step-decode-linear|f16|HARK_CUDA_SKINNY_STEP=0"
    "step-skinny|f16|HARK_CUDA_SKINNY_STEP=1"
    "products-to-8|f16|HARK_CUDA_FUSED_STEP_MAX_BATCH=0"
    "query-launch|f16|HARK_CUDA_FUSED_QUERY=0"
    "int8-registers|f16|HARK_CUDA_INT8_STAGED=0"
    "int8-staged|f16|HARK_CUDA_INT8_STAGED=1"
    "int8-frames|f16|HARK_CUDA_CROSS_KV=int8-frames"
    "int8-auto|f16|HARK_CUDA_CROSS_KV=int8-auto"
    "native|f16|HARK_CUDA_CROSS_KV=native"
    "native-launches|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_KERNEL=0"
    "step-kernel|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_TIMING=1"
    "step-kernel-16|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_IN_FLIGHT=16"
    "step-kernel-128|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_IN_FLIGHT=128"
    "step-kernel-poll-256|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_POLL_NS=256"
    "step-kernel-poll-1000|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_POLL_NS=1000"
    "step-kernel-copies|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_ONLY=copies"
    "step-kernel-weights|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_ONLY=weights"
    "step-kernel-work|f16|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_ONLY=work HARK_CUDA_STEP_TIMING=1"
    "q8-default|q8_0|"
    "q8-native-launches|q8_0|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_KERNEL=0"
    "q8-native|q8_0|HARK_CUDA_CROSS_KV=native"
    "q8-step-kernel-timing|q8_0|HARK_CUDA_CROSS_KV=native HARK_CUDA_STEP_TIMING=1"
    "q8-step-decode-linear|q8_0|HARK_CUDA_SKINNY_STEP=0"
    "q8-step-skinny|q8_0|HARK_CUDA_SKINNY_STEP=1"
    "default-last|f16|"
  )
  for round in $(seq "${HARK_EXP_ROUNDS:-1}"); do
    for variant in "${variants[@]}"; do
      IFS='|' read -r name type settings <<< "$variant"
      [[ -n "${HARK_EXP_VARIANTS:-}" && " $HARK_EXP_VARIANTS " != *" $name "* ]] && continue
      for binary in ${HARK_EXP_BASELINE:+"$HARK_EXP_BASELINE"} "$build/hark"; do
        label=$name
        [ "$binary" != "$build/hark" ] && label="$name@baseline"
        if [ -n "${HARK_EXP_DEADLINE:-}" ] && [ "$SECONDS" -ge "$HARK_EXP_DEADLINE" ]; then
          echo "-- $label, round $round: skipped (past HARK_EXP_DEADLINE at $SECONDS s)" >> "$summary"
          continue
        fi
        log="$out/experiments/$label-$round.log"
        env HARK_CUDA_CROSS_KV="${HARK_EXP_CROSS_KV:-int8}" $settings timeout 300 "$binary" \
          bench --device cuda --model "${HARK_EXP_MODEL:-large-v3}" --type "$type" \
          --batches "${HARK_EXP_BATCHES:-1,4,8,16,32}" --tokens 60 --windows 1 > "$log" 2>&1
        echo "-- $label, round $round (exit $?): $type $settings" >> "$summary"
        # The table's rows: batch first.
        grep -E "^ *[0-9]+ " "$log" >> "$summary"
      done
    done
  done
  # A call brings back at most 8 files: the runs' logs go as one archive.
  tar czf "$out/experiments.tar.gz" -C "$out" experiments && rm -rf "$out/experiments"
fi

if has parakeet; then
  echo "== Parakeet: hark bench and transformers (same GPU, same pattern)" | tee -a "$summary"
  for model in parakeet-tdt-0.6b-v2 parakeet-ctc-1.1b; do
    timeout 300 "$build/hark" bench --device cuda --model "$model" --type bf16 --batches 64 \
      --seconds 20 --repeats 3 --mixed 3600 >> "$out/parakeet.log" 2>&1
    echo "exit $? (hark $model)" >> "$out/parakeet.log"
    timeout 300 python3 bench/transformers_parakeet.py --model "$model" --batch 64 --seconds 20 \
      --repeats 3 >> "$out/parakeet.log" 2>&1
    echo "exit $? (transformers $model)" >> "$out/parakeet.log"
  done
  # Larger offline batches (hark alone): 20-s utterances 128 at a time, 10-s ones 128 and 256;
  # an hour of 10-30-s utterances in batches of 128 and 256.
  for run in "20 128" "10 128,256"; do
    set -- $run
    timeout 300 "$build/hark" bench --device cuda --model parakeet-tdt-0.6b-v2 --type bf16 \
      --batches "$2" --seconds "$1" --repeats 3 $([ "$1" = 10 ] && echo --mixed 3600) \
      >> "$out/parakeet.log" 2>&1
    echo "exit $? (hark parakeet-tdt-0.6b-v2, $2 x $1 s)" >> "$out/parakeet.log"
  done
  # The feed-forward products with their activation, three ways (cuBLASLt, + the activation
  # kernel, the Hopper kernel with the activation in its epilogue).
  timeout 120 "$build/hark" bench --device cuda --products >> "$out/parakeet.log" 2>&1
  echo "exit $? (hark bench --products)" >> "$out/parakeet.log"
  grep -vE "^\{|^JSON|warn|_VF|RNN module" "$out/parakeet.log" | tail -64 >> "$summary"
fi

if has profile; then
  echo "== GPU time by stage (HARK_CUDA_PROFILE: eager decode steps, events between stages)" \
    | tee -a "$summary"
  HARK_CUDA_PROFILE=1 timeout 300 "$build/hark" bench --device cuda --model parakeet-tdt-0.6b-v2 \
    --type bf16 --batches 64 --seconds 20 --repeats 2 --pipeline 1 >> "$out/profile.log" 2>&1
  echo "exit $? (parakeet-tdt-0.6b-v2)" >> "$out/profile.log"
  HARK_CUDA_PROFILE=1 timeout 300 "$build/hark" bench --device cuda --model parakeet-tdt-0.6b-v2 \
    --type bf16 --batches 1 --seconds 10 --repeats 5 >> "$out/profile.log" 2>&1
  echo "exit $? (parakeet-tdt-0.6b-v2, one 10-s clip)" >> "$out/profile.log"
  for batches in 1 16; do
    HARK_CUDA_PROFILE=1 timeout 300 "$build/hark" bench --device cuda --model large-v3 --type f16 \
      --batches "$batches" --tokens 40 --windows 2 >> "$out/profile.log" 2>&1
    echo "exit $? (large-v3, batch $batches)" >> "$out/profile.log"
  done
  cat "$out/profile.log" >> "$summary"
fi

if has nsys; then
  echo "== Nsight Systems: GPU kernels by total time (Parakeet batch of 64 x 20 s)" | tee -a "$summary"
  if command -v nsys > /dev/null; then
    nsys_dir=$(mktemp -d)
    timeout 300 nsys profile -o "$nsys_dir/parakeet" --force-overwrite true "$build/hark" bench \
      --device cuda --model parakeet-tdt-0.6b-v2 --type bf16 --batches 64 --seconds 20 \
      --repeats 2 > "$out/nsys.log" 2>&1
    nsys stats --report cuda_gpu_kern_sum --format csv "$nsys_dir/parakeet.nsys-rep" \
      >> "$out/nsys.log" 2>&1
    head -40 "$out/nsys.log" | cut -c1-250 >> "$summary"
    rm -rf "$nsys_dir"
  else
    echo "nsys is not installed on this machine" | tee -a "$summary"
  fi
fi

if has ncu; then
  # Every kernel of the runs hark bench brackets (cudaProfilerStart/Stop: the last timed runs),
  # timed alone by Nsight Compute at the GPU's own clocks; a table per run by bench/ncu_summary.py.
  echo "== Nsight Compute: kernel times (bracketed runs of hark bench)" | tee -a "$summary"
  for run in "whisper-b1 --model large-v3 --type f16 --batches 1 --tokens 3 --windows 1" \
             "whisper-b16 --model large-v3 --type f16 --batches 16 --tokens 3 --windows 1" \
             "whisper-b64 --model large-v3 --type f16 --batches 64 --tokens 3 --windows 1" \
             "whisper-b120 --model large-v3 --type f16 --batches 120 --tokens 3 --windows 1 --cross-kv int8-auto" \
             "whisper-q8-b1 --model large-v3 --type q8_0 --batches 1 --tokens 3 --windows 1" \
             "whisper-q8-b16 --model large-v3 --type q8_0 --batches 16 --tokens 3 --windows 1" \
             "parakeet-b64 --model parakeet-tdt-0.6b-v2 --type bf16 --batches 64 --seconds 20 --pipeline 1"; do
    set -- $run
    name=$1
    shift
    # HARK_NCU_RUNS (names separated by spaces) picks some of the runs.
    [[ -n "${HARK_NCU_RUNS:-}" && " $HARK_NCU_RUNS " != *" $name "* ]] && continue
    timeout 400 "$ncu" --profile-from-start off --clock-control none --csv \
      --metrics gpu__time_duration.sum "$build/hark" bench --device cuda "$@" \
      > "$out/ncu-$name.csv" 2> "$out/ncu-$name.err"
    echo "-- $name (exit $?)" >> "$summary"
    python3 bench/ncu_summary.py "$out/ncu-$name.csv" 30 >> "$summary" 2>&1
    if [[ $name == whisper-* ]]; then
      python3 bench/ncu_summary.py "$out/ncu-$name.csv" 30 --last-step >> "$summary" 2>&1
    fi
  done
fi

if has sections; then
  # Why one kernel runs as fast as it does: Nsight Compute's throughput, scheduler, warp-state and
  # occupancy sections for the first launch whose demangled name matches HARK_NCU_KERNEL (a
  # regex; default the INT8 cross-attention of a decode step), in the runs hark bench brackets
  # with the arguments HARK_NCU_RUN (default large-v3 at batch 64; INT8 K/V unless the
  # environment's HARK_CUDA_CROSS_KV says otherwise).
  echo "== Nsight Compute: sections of one kernel" | tee -a "$summary"
  HARK_CUDA_CROSS_KV=${HARK_CUDA_CROSS_KV:-int8} timeout 400 "$ncu" --profile-from-start off \
    --clock-control none --kernel-name-base demangled --kernel-name "regex:$ncu_kernel" \
    --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section Occupancy "$build/hark" bench --device cuda $ncu_run > "$out/sections.log" 2>&1
  echo "-- $ncu_kernel in: $ncu_run (exit $?)" >> "$summary"
  grep -E "^  [^ ].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Achieved Active Warps|Block Limit" \
    "$out/sections.log" | cut -c1-160 >> "$summary"
fi

if has stalls; then
  # Where one kernel's warps wait: Nsight Compute's stall reasons and its warp samples by SASS
  # instruction for the first launch matching HARK_NCU_KERNEL after HARK_NCU_SKIP (default 3)
  # others, in the runs hark bench brackets with HARK_NCU_RUN (the sections stage's defaults),
  # summed by bench/ncu_stalls.py. E.g. the one-launch step: HARK_NCU_KERNEL=decoder_step_kernel
  # HARK_NCU_RUN='--model large-v3 --type f16 --batches 1 --tokens 12 --windows 1'
  # HARK_CUDA_CROSS_KV=native (bench/RESULTS.md, forty-fifth session).
  echo "== Nsight Compute: warp stalls of one kernel" | tee -a "$summary"
  report="$out/stalls"
  HARK_CUDA_CROSS_KV=${HARK_CUDA_CROSS_KV:-int8} timeout 400 "$ncu" --profile-from-start off \
    --clock-control none --kernel-name-base demangled --kernel-name "regex:$ncu_kernel" \
    --launch-skip "${HARK_NCU_SKIP:-3}" --launch-count 1 --section SourceCounters \
    --section WarpStateStats --metrics 'regex:smsp__warp_issue_stalled_.*_per_warp_active.pct$' \
    -o "$report" "$build/hark" bench --device cuda $ncu_run > "$out/stalls.log" 2>&1
  echo "-- $ncu_kernel in: $ncu_run (exit $?)" >> "$summary"
  "$ncu" -i "$report.ncu-rep" --page raw --csv > "$out/stalls-raw.csv" 2>> "$out/stalls.log"
  "$ncu" -i "$report.ncu-rep" --page source --csv --print-source sass > "$out/stalls-sass.csv" \
    2>> "$out/stalls.log"
  python3 bench/ncu_stalls.py "$out/stalls-raw.csv" "$out/stalls-sass.csv" 20 >> "$summary" 2>&1
fi

if has transformers; then
  echo "== transformers (same GPU, same workload)" | tee -a "$summary"
  for model in large-v3 large-v3-turbo; do
    timeout 300 python3 bench/transformers_whisper.py --model "$model" --batches 1,16 \
      >> "$out/transformers.log" 2>&1
  done
  grep -vE "^\{" "$out/transformers.log" | tail -30 >> "$summary"
fi

cat "$summary"
