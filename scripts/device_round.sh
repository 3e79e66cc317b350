#!/usr/bin/env bash
# One device-machine call: the GPU stages named (below), each bounded, their logs and files under $OUT,
# all of $OUT also as one tarball ($OUT/round.tgz): the stages write under a work folder beside $OUT,
# and only the tarball and the logs land in $OUT (the device tool brings back few, shallow files).
# Tails printed last.
#   OUT=/tmp/o bash scripts/device_round.sh interference card_hazards torchrun
# Stages: card_hazards, interference, inspect, live_stream (and live_stream_alt, its arguments in
# $LIVE_STREAM_ALT), torchrun, where, cold (studies/), cuda (pytest -m cuda), nb01 (notebook 01 live),
# traces (the known-idle traces), card (doctor --card --compare), gallery, reference.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
FINAL=${OUT:?set OUT}
OUT=$(mktemp -d /tmp/dspark-round.XXXX)
mkdir -p "$FINAL"
declare -A LIMIT=([card_hazards]=130 [interference]=300 [inspect]=110 [live_stream]=180 [live_stream_alt]=180 [torchrun]=70 [cuda]=240 [nb01]=180 [traces]=60 [where]=120 [card]=90 [gallery]=150 [reference]=200 [cold]=220)
summary=()
for stage in "$@"; do
  t0=$SECONDS
  log="$OUT/log-$stage.txt"
  case $stage in
    cuda) timeout "${LIMIT[cuda]}" python3 -m pytest -q -m cuda -p no:cacheprovider ${CUDA_TESTS:-tests} >"$log" 2>&1 ;;
    nb01) DSPARK_NOTEBOOKS=01_onboarding.ipynb timeout "${LIMIT[nb01]}" python3 scripts/gpu_session.py notebooks >"$log" 2>&1 ;;
    traces) timeout "${LIMIT[traces]}" python3 -m studies.known_idle.traces >"$log" 2>&1 ;;
    reference) OUT="$OUT/noise" timeout "${LIMIT[reference]}" python3 -m studies.noise.stages reference >"$log" 2>&1 ;;
    cold) OUT=$OUT timeout "${LIMIT[cold]}" python3 -m studies.live_panel.cold_start >"$log" 2>&1 ;;
    where) (timeout "${LIMIT[where]}" python3 -m studies.live_panel.where_time_goes --tag first-process && OUT=$OUT timeout "${LIMIT[where]}" python3 -m studies.live_panel.where_time_goes --tag second-process) >"$log" 2>&1 ;;
    live_stream_alt) OUT=$OUT timeout "${LIMIT[live_stream_alt]}" python3 -m studies.live_panel.benchmark ${LIVE_STREAM_ALT:?set LIVE_STREAM_ALT} >"$log" 2>&1 ;;
    card) mkdir -p "$OUT/card/data/machines" && timeout "${LIMIT[card]}" python3 -m dspark_lab.cli doctor --card --compare "${CARD_REF:-data/machines/h200-card-20261201.json}" --card-out "$OUT/card/data/machines/h200-card-$(date -u +%Y%m%d-%H%M).json" >"$log" 2>&1 ;;
    gallery) timeout "${LIMIT[gallery]}" python3 scripts/gpu_gallery.py >"$log" 2>&1 ;;
    card_hazards) OUT=$OUT timeout "${LIMIT[card_hazards]}" python3 -m studies.card.card_and_hazards >"$log" 2>&1 ;;
    interference) OUT=$OUT timeout "${LIMIT[interference]}" python3 -m studies.interference.hostile_check >"$log" 2>&1 ;;
    inspect) OUT=$OUT timeout "${LIMIT[inspect]}" python3 -m studies.inspect.katas_and_diffs >"$log" 2>&1 ;;
    live_stream) OUT=$OUT timeout "${LIMIT[live_stream]}" python3 -m studies.live_panel.benchmark >"$log" 2>&1 ;;
    torchrun) OUT=$OUT timeout "${LIMIT[torchrun]}" python3 -m studies.ep.torchrun_launch >"$log" 2>&1 ;;
    *) echo "unknown stage $stage (see the head of scripts/device_round.sh)" >"$log"; false ;;
  esac
  rc=$?
  summary+=("$stage rc=$rc $((SECONDS - t0)) s")
done
(cd "$OUT" && tar czf "$FINAL/round.tgz" . 2>/dev/null)
cp "$OUT"/log-*.txt "$FINAL"/ 2>/dev/null
for stage in "$@"; do echo "===== $stage"; tail -n 25 "$OUT/log-$stage.txt" | cut -c1-220; done
printf '%s\n' "${summary[@]}"
