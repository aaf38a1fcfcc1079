#!/usr/bin/env bash
# The fused kernel's one GPU run (issue 32), prepared on the CPU (issue 27). At most 8 minutes, no network:
# each stage runs under its own `timeout`, and every result is appended as it is measured to
# $OUT/gpu_check.jsonl (one JSON line each; "ok": false marks a failed check), the output to $OUT/gpu_check.log.
#
#   bash scripts/gpu_check.sh              # on the GPU machine (device tool: carry ".whl" holding the beartype wheel)
#   bash scripts/gpu_check.sh --dry-run    # here, on the CPU: interpreter, short lengths, the same stages
#
# Stages (seconds): 0 environment (15), 1 wheels and the package (30); then side by side: 2 correctness on pinned
# configs against float64 with cuDNN's and FlashAttention-2's errors as yardstick (150), 3 the GPU-marked tests
# (120, own log), 4 the randomized sweep against float64 (scripts/gpu_check/sweep.py, 6 processes, 150; own JSON
# lines and log), the model's checks (scripts/gpu_check/model.py: eager parity, a tiny Llama through the Hugging
# Face function, the SDPA registry and the drop-in, torch.compile's recompiles; 150, own log); then alone, as they
# time things: 5 speed, autotuned, beside cuDNN and FlashAttention-2, host time per call, head_dim 256 (130),
# 6 head_dim 80/96: the padded tile against the split into power-of-two pieces (50), 7 the base model's training
# tokens/s against torch.nn.Transformer (model.py --parts speed, 150: its warm-up autotunes the three attention keys).
# 15+30+150+130+50+150 = 525 s at most; a stage cut short keeps every result it appended before.
# A dry run takes about 3 minutes here (the interpreter, 2 cores).
#
# To rerun a part on a machine still warm (each stage's name as in the JSON lines; the environment and install
# stages always run): ONLY="speed model_speed" bash scripts/gpu_check.sh
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
ONLY=${ONLY:-}
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
RESULTS=$OUT/gpu_check.jsonl
LOG=$OUT/gpu_check.log
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
note() { echo "{\"check\": \"stage\", \"time\": \"$(date -u +%H:%M:%S)\", $1}" | tee -a "$RESULTS" >>"$LOG"; }
stage() {  # stage NAME SECONDS COMMAND...: run it under timeout (output to $STAGE_LOG), record its exit status
  local name=$1 limit=$2
  shift 2
  case " environment install $ONLY " in *" $name "*) ;; *) [ -n "$ONLY" ] && return 0 ;; esac
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >>"${STAGE_LOG:-$LOG}" 2>&1
  local rc=$?
  note "\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - start)), \"timed_out\": $([ $rc = 124 ] && echo true || echo false)"
}

if [ $DRY = 1 ]; then
  export TRITON_INTERPRET=1
  DRYFLAG=--dry-run
  LIMITS=(60 180 300 120 150 300 180 300)
else
  unset TRITON_INTERPRET
  DRYFLAG=
  LIMITS=(15 30 150 120 150 130 50 150)
fi

# 0: what machine, driver and versions
stage environment "${LIMITS[0]}" bash -c "date -u; (nvidia-smi || echo 'no nvidia-smi'); $PYTHON -c 'import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__, \"cuda\", torch.cuda.is_available())'"

# 1: beartype (and any other carried wheel) into /tmp/site; the package as a symlink tree (kernels/ is
# transformer.kernels once installed: the tree makes it so without building anything)
SITE=${SITE:-/tmp/gpu_check_site}
install() {
  mkdir -p "$SITE"
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || return 1
  else
    echo "no .whl/ here: beartype must already be importable"
  fi
  rm -rf "$SITE/transformer"
  cp -rs "$ROOT/transformer" "$SITE/transformer" || return 1
  if [ -d "$ROOT/kernels" ]; then  # a checkout (an installed layout has transformer/kernels already)
    rm -rf "$SITE/transformer/kernels" && ln -s "$ROOT/kernels" "$SITE/transformer/kernels" || return 1
  fi
  PYTHONPATH=$SITE $PYTHON -c "import beartype, transformer.kernels as k; print('beartype', beartype.__version__, k.__file__)"
}
export -f install
export SITE ROOT PYTHON
stage install "${LIMITS[1]}" bash -c install
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

# 2, 3, 4 side by side (none of them times anything): correctness on pinned configs (no autotuning: the same bits
# in every run), the GPU-marked tests (own log), the randomized sweep (own JSON lines and log) and the model's
# checks that time nothing (eager parity, the integrations on a tiny Llama, torch.compile's recompiles; own log)
if [ $DRY = 1 ]; then
  TESTS=(tests/kernels/test_capture_and_guards.py)  # skipped without CUDA: in a dry run, one CPU test file instead
  MARK=()
  WORKERS=2
else
  TESTS=(tests/kernels tests/test_sdpa_registry.py tests/test_triton_backend.py)
  MARK=(-m gpu)
  WORKERS=6
fi
STAGE_LOG=$OUT/tests.log stage tests "${LIMITS[3]}" $PYTHON -m pytest -q -p no:cacheprovider "${MARK[@]}" "${TESTS[@]}" &
STAGE_LOG=$OUT/sweep.log stage sweep "${LIMITS[4]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/sweep.py --out "$OUT/sweep.jsonl" --workers $WORKERS --seconds $((LIMITS[4] - 30)) $DRYFLAG &
STAGE_LOG=$OUT/model.log stage model_checks "${LIMITS[2]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/model.py --parts train_decode huggingface compile --out "$RESULTS" $DRYFLAG &
stage correctness "${LIMITS[2]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/checks.py correctness --out "$RESULTS" $DRYFLAG
wait

# 5: speed, autotuned (per-config timings recorded), beside cuDNN and FlashAttention-2; host time; head_dim 256
stage speed "${LIMITS[5]}" $PYTHON scripts/gpu_check/checks.py speed --out "$RESULTS" $DRYFLAG

# 6: head_dim 80 and 96, padded 128-wide tile against two power-of-two pieces (issue 27): errors, then forward and
# forward + backward times of both, on pinned configs (the same first config that fits, no autotuning)
stage head_dim_split "${LIMITS[6]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/split_head_dim.py --out "$RESULTS" $DRYFLAG

# 7: training tokens/s of the base model against torch.nn.Transformer, autotuned as a user would run it
stage model_speed "${LIMITS[7]}" $PYTHON scripts/gpu_check/model.py --parts speed --out "$RESULTS" $DRYFLAG

FAILED=$(cat "$RESULTS" "$OUT/sweep.jsonl" 2>/dev/null | grep -c '"ok": false')
SWEPT=$(grep -c '"check": "sweep_case"' "$OUT/sweep.jsonl" 2>/dev/null)
TIMED_OUT=$(grep -c '"timed_out": true' "$RESULTS")
note "\"stage\": \"summary\", \"failed_checks\": $FAILED, \"sweep_cases\": ${SWEPT:-0}, \"timed_out_stages\": $TIMED_OUT, \"seconds\": $SECONDS"
tail -n 1 "$RESULTS"
