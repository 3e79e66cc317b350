#!/usr/bin/env bash
# One device-machine call: the GPU scripts named (issue numbers, or "cuda" for pytest -m cuda, or
# "nb01" for notebook 01 live, "where" and "cold" for issue 24's diagnoses, "card" for doctor --card --compare), each bounded, their logs and files under $OUT, all of $OUT also as
# one tarball ($OUT/round.tgz): the stages write under a work folder beside $OUT, and only the tarball
# and the logs land in $OUT (the device tool brings back few, shallow files). Tails printed last.
#   OUT=/tmp/o bash scripts/device_round.sh 21 20 25
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
FINAL=${OUT:?set OUT}
OUT=$(mktemp -d /tmp/dspark-round.XXXX)
mkdir -p "$FINAL"
declare -A LIMIT=([20]=130 [21]=300 [23]=110 [24]=180 [24alt]=180 [25]=70 [cuda]=240 [nb01]=180 [traces]=60 [where]=120 [card]=90 [gallery]=150 [reference]=200 [cold]=220)
summary=()
for stage in "$@"; do
  t0=$SECONDS
  log="$OUT/log-$stage.txt"
  case $stage in
    cuda) timeout "${LIMIT[cuda]}" python3 -m pytest -q -m cuda -p no:cacheprovider ${CUDA_TESTS:-tests} >"$log" 2>&1 ;;
    nb01) DSPARK_NOTEBOOKS=01_onboarding.ipynb timeout "${LIMIT[nb01]}" python3 scripts/gpu_session.py notebooks >"$log" 2>&1 ;;
    traces) timeout "${LIMIT[traces]}" python3 scripts/gpu_known_idle_traces.py >"$log" 2>&1 ;;
    reference) OUT="$OUT/noise" timeout "${LIMIT[reference]}" python3 scripts/gpu_noise.py reference >"$log" 2>&1 ;;
    cold) OUT=$OUT timeout "${LIMIT[cold]}" python3 scripts/gpu_issue24_cold.py >"$log" 2>&1 ;;
    where) (timeout "${LIMIT[where]}" python3 scripts/gpu_issue24_where.py --tag first-process && OUT=$OUT timeout "${LIMIT[where]}" python3 scripts/gpu_issue24_where.py --tag second-process) >"$log" 2>&1 ;;
    24alt) timeout "${LIMIT[24alt]}" python3 scripts/gpu_issue24.py ${ISSUE24_ALT:?set ISSUE24_ALT} >"$log" 2>&1 ;;
    card) mkdir -p "$OUT/card/data/machines" && timeout "${LIMIT[card]}" python3 -m dspark_lab.cli doctor --card --compare "${CARD_REF:-data/machines/h200-card-20261201.json}" --card-out "$OUT/card/data/machines/h200-card-$(date -u +%Y%m%d-%H%M).json" >"$log" 2>&1 ;;
    gallery) timeout "${LIMIT[gallery]}" python3 scripts/gpu_gallery.py >"$log" 2>&1 ;;
    *) timeout "${LIMIT[$stage]}" python3 "scripts/gpu_issue$stage.py" >"$log" 2>&1 ;;
  esac
  rc=$?
  summary+=("$stage rc=$rc $((SECONDS - t0)) s")
done
(cd "$OUT" && tar czf "$FINAL/round.tgz" . 2>/dev/null)
cp "$OUT"/log-*.txt "$FINAL"/ 2>/dev/null
for stage in "$@"; do echo "===== $stage"; tail -n 25 "$OUT/log-$stage.txt" | cut -c1-220; done
printf '%s\n' "${summary[@]}"
