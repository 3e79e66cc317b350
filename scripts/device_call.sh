#!/usr/bin/env bash
# One device-machine call: run the named stages, each under its own time limit, logs and results
# under $OUT/w/, packed into $OUT/results.tar.gz (the device tool returns at most 8 files), and
# each stage's table printed last.
#   bash scripts/device_call.sh ep gallery cuda_tests      (stages below; default: all, in order)
# Stages: ep (2 GPUs, studies.ep.real_ranks), gallery, sync_cost, cuda_tests, reference, noise (reference, live,
# overhead), sweep (the default sweep), notebooks (01 and 04 live; carried wheels in .whl/).
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu}
W=$OUT/w
mkdir -p "$W"
export DSPARK_CACHE=${DSPARK_CACHE:-/tmp/dspark-cache}
py=${PY:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
stage() {  # name, time limit (s), command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  mkdir -p "$W/$name"
  OUT=$W/$name timeout --kill-after=10 "$limit" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  echo "[$name] rc $rc in $((SECONDS - t0)) s" | tee -a "$W/summary.txt"
  tar czf "$OUT/results.tar.gz" -C "$W" . 2>/dev/null  # after each stage: a call cut short keeps what ran
}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(ep gallery sync_cost cuda_tests noise sweep notebooks)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >"$W/gpus.txt" 2>&1
for s in "${stages[@]}"; do
  case $s in
    ep) stage ep 330 $py -m studies.ep.real_ranks ;;
    gallery) stage gallery 150 $py scripts/gpu_gallery.py ;;
    sync_cost) stage sync_cost 150 $py -m studies.sync_cost.point_types ;;
    cuda_tests) stage cuda_tests 240 $py scripts/gpu_session.py cuda_tests ;;
    noise) stage noise 190 $py -m studies.noise.stages reference live overhead ;;
    reference) stage reference 150 $py -m studies.noise.stages reference ;;
    sweep) stage sweep 260 $py scripts/gpu_session.py sweep ;;
    notebooks) DSPARK_NOTEBOOKS=01_onboarding.ipynb,04_sync_gallery.ipynb stage notebooks 120 $py scripts/gpu_session.py notebooks ;;
    *) echo "unknown stage $s" | tee -a "$W/summary.txt" ;;
  esac
done
tar czf "$OUT/results.tar.gz" -C "$W" . 2>/dev/null
for s in "${stages[@]}"; do
  echo "======== $s"
  [ -f "$W/$s.log" ] && grep -v "USDT\|CPUAllocator\|profiler results will not" "$W/$s.log" | tail -n 22
done
echo "======== summary"; cat "$W/gpus.txt" "$W/summary.txt"
