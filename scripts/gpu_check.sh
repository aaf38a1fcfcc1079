#!/usr/bin/env bash
# The fused kernel's one GPU run (issue 32), prepared on the CPU (issue 27). At most 8 minutes, no network:
# each stage runs under its own `timeout`, and every result is appended as it is measured to
# $OUT/gpu_check.jsonl (one JSON line each; "ok": false marks a failed check), the output to $OUT/gpu_check.log.
#
#   bash scripts/gpu_check.sh              # on the GPU machine (device tool: carry ".whl" holding the beartype wheel)
#   bash scripts/gpu_check.sh --dry-run    # here, on the CPU: interpreter, short lengths, the same stages
#
# Stages (seconds): 0 environment (20), 1 wheels and the package (60), 2 correctness on pinned configs against
# float64 with cuDNN's and FlashAttention-2's errors as yardstick (150), 3 the GPU-marked tests (70), 4 speed,
# autotuned, beside cuDNN and FlashAttention-2, host time per call, head_dim 256 (130), 5 head_dim 80/96: the padded
# tile against the split into power-of-two pieces, errors and times on pinned configs (50). 20+60+150+70+130+50 =
# 480 s at most (the issue's 8 minutes); a stage cut short keeps every result it appended before. A dry run takes about 6 minutes here (the interpreter).
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
RESULTS=$OUT/gpu_check.jsonl
LOG=$OUT/gpu_check.log
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
note() { echo "{\"check\": \"stage\", \"time\": \"$(date -u +%H:%M:%S)\", $1}" | tee -a "$RESULTS" >>"$LOG"; }
stage() {  # stage NAME SECONDS COMMAND...: run it under timeout, record its exit status
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  note "\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - start)), \"timed_out\": $([ $rc = 124 ] && echo true || echo false)"
}

if [ $DRY = 1 ]; then
  export TRITON_INTERPRET=1
  DRYFLAG=--dry-run
  LIMITS=(60 180 300 120 300 180)
else
  unset TRITON_INTERPRET
  DRYFLAG=
  LIMITS=(20 60 150 70 130 50)
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
  cp -rs "$ROOT/transformer" "$SITE/transformer" && rm -rf "$SITE/transformer/kernels" &&
    ln -s "$ROOT/kernels" "$SITE/transformer/kernels" || return 1
  PYTHONPATH=$SITE $PYTHON -c "import beartype, transformer.kernels as k; print('beartype', beartype.__version__, k.__file__)"
}
export -f install
export SITE ROOT PYTHON
stage install "${LIMITS[1]}" bash -c install
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

# 2: correctness first, on pinned configs (no autotuning: the same bits in every run)
stage correctness "${LIMITS[2]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/checks.py correctness --out "$RESULTS" $DRYFLAG

# 3: the repository's GPU-marked tests (skipped without CUDA: in a dry run, one CPU test file instead)
if [ $DRY = 1 ]; then
  stage tests "${LIMITS[3]}" $PYTHON -m pytest -q -x -p no:cacheprovider tests/kernels/test_capture_and_guards.py
else
  stage tests "${LIMITS[3]}" $PYTHON -m pytest -q -x -p no:cacheprovider -m gpu tests/kernels
fi

# 4: speed, autotuned (per-config timings recorded), beside cuDNN and FlashAttention-2; host time; head_dim 256
stage speed "${LIMITS[4]}" $PYTHON scripts/gpu_check/checks.py speed --out "$RESULTS" $DRYFLAG

# 5: head_dim 80 and 96, padded 128-wide tile against two power-of-two pieces (issue 27): errors, then forward and
# forward + backward times of both, on pinned configs (the same first config that fits, no autotuning)
stage head_dim_split "${LIMITS[5]}" env TYPED_TRANSFORMER_KERNEL_CONFIGS=first \
  $PYTHON scripts/gpu_check/split_head_dim.py --out "$RESULTS" $DRYFLAG

FAILED=$(grep -c '"ok": false' "$RESULTS")
TIMED_OUT=$(grep -c '"timed_out": true' "$RESULTS")
note "\"stage\": \"summary\", \"failed_checks\": $FAILED, \"timed_out_stages\": $TIMED_OUT, \"seconds\": $SECONDS"
tail -n 1 "$RESULTS"
