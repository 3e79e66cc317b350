#!/usr/bin/env bash
# The project's device round: run it on a GPU machine after any change to measure/, run/, model/ or
# parallel/ (and put its table in the change's note). With no stage named it runs the round:
#   verify                      dspark-lab verify (its record under $OUT/verify/)
#   cuda1 cuda2 cuda3           the CUDA suite, three invocations (a test that passes only sometimes fails)
#   notebooks                   notebooks 01, 02, 04, 05 (and 06 where it exists) executed live
#   sweep                       the README's quick sweep, `dspark-lab sweep --preset quick`, as its README test runs it
# (the CUDA suite leaves out the README's measuring commands, marked readme_job: minutes; stage readme runs them all)
# Other stages, named explicitly (studies/ and scripts/): readme, cudaN (any N: one more CUDA-suite invocation),
# card (doctor --card --compare), gallery (GALLERY_ARGS: more arguments of scripts/gpu_gallery.py), blocked (the known-idle cases' syncs timed without a profiler), reference, traces, cold, where, live_stream, live_stream_alt,
# card_hazards, interference, inspect, torchrun, ep (two GPUs), field (the gallery at the queued scale, the
# hazards, notebook 06's step), order (three randomised-order reference runs), run_ahead,
# headroom (each gallery case's and the draft step's headroom beside its charge, and the race forms),
# trace_roundtrip (known-cost and draft-step traces read back through `dspark-lab trace`; TRACE_ROUNDTRIP_ARGS: more arguments, --rounds N),
# card_waits (the card with its wait and launch cells, compared with the recorded card), cuda_new (the CUDA
# tests named in NEW_CUDA_TESTS, default the wait/launch cells' and the races'), profiler_cost (the
# profiler's own host time per recorded event, measure/profiler_cost.py), lint_fixes_races (each lint fix
# applied to its gallery case under the race check), investigation (notebook 06's slow and fixed steps recorded).
#   OUT=/tmp/o bash scripts/device_round.sh               # the round
#   OUT=/tmp/o bash scripts/device_round.sh cuda1 gallery # chosen stages
# Wheels under .whl/ (jupyter, plotly: the GPU machines lack them) are installed first where present.
# Each stage is bounded; logs and files under a work folder, packed into $OUT/round.tgz, the logs also in
# $OUT; one table last: stage, exit status, seconds, and the stage's own last line.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export DSPARK_CACHE=${DSPARK_CACHE:-/tmp/dspark-cache}
FINAL=${OUT:?set OUT}
W=$(mktemp -d /tmp/dspark-round.XXXX)
mkdir -p "$FINAL"
if ls .whl/*.whl >/dev/null 2>&1; then
  # A warm machine keeps /tmp between calls: the same wheels are installed once (their names, stamped).
  stamp=$(ls .whl/*.whl | sha256sum | cut -c1-16)
  if [ "$(cat /tmp/site/.dspark-wheels 2>/dev/null)" != "$stamp" ]; then
    rm -rf /tmp/site && python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .whl/*.whl \
      && echo "$stamp" >/tmp/site/.dspark-wheels
  fi
  [ -f /tmp/site/.dspark-wheels ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
notebooks=${NOTEBOOKS:-01_onboarding.ipynb,02_tuning_new_gpu.ipynb,04_sync_gallery.ipynb,05_your_own_code.ipynb}
[ -z "${NOTEBOOKS:-}" ] && [ -f notebooks/06_investigation.ipynb ] && notebooks=$notebooks,06_investigation.ipynb
declare -A LIMIT=([verify]=400 [cuda]=570 [notebooks]=300 [sweep]=200 [readme]=600 [card_hazards]=130 [interference]=300
  [inspect]=110 [live_stream]=180 [live_stream_alt]=180 [torchrun]=70 [traces]=120 [where]=120 [card]=90
  [gallery]=260 [reference]=200 [cold]=220 [ep]=330
  [field]=200 [blocked]=240 [order]=200 [run_ahead]=120 [headroom]=230 [trace_roundtrip]=240 [card_waits]=120 [profiler_cost]=60 [lint_fixes_races]=90 [investigation]=90)
# gallery: about 190-210 s estimated at its default 10 rounds of 20 steps (scripts/gpu_gallery.py says how);
# 260 s and its 60 s test keep the stage under 330 s
run_stage() {  # stage: its command, under its limit, output in $log
  local stage=$1
  case $stage in
    verify) timeout "${LIMIT[verify]}" python3 -m dspark_lab.cli verify ${VERIFY_ONLY:+--only $VERIFY_ONLY} --out "$W/verify/$(date -u +%Y%m%d-%H%M)-verify.json" ;;
    cuda_new) timeout "${LIMIT[cuda]}" python3 -m pytest -q -m cuda -p no:cacheprovider --junitxml "$W/junit-$stage.xml" \
             ${NEW_CUDA_TESTS:-tests/test_card_primitives_cuda.py tests/test_races_cuda.py} ;;
    cuda*) timeout "${LIMIT[cuda]}" python3 -m pytest -q -m "cuda and not readme_job" -p no:cacheprovider \
             --junitxml "$W/junit-$stage.xml" ${CUDA_PYTEST_ARGS:-} ${CUDA_TESTS:-tests} ;;
    notebooks) DSPARK_NOTEBOOKS=$notebooks timeout "${LIMIT[notebooks]}" python3 scripts/gpu_session.py notebooks ;;
    sweep) timeout "${LIMIT[sweep]}" python3 -m pytest -q -s -m readme_job -k preset -p no:cacheprovider tests/test_readme_commands.py ;;
    readme) timeout "${LIMIT[readme]}" python3 -m pytest -q -s -m readme_job -p no:cacheprovider tests/test_readme_commands.py ;;
    blocked) OUT=$W timeout "${LIMIT[blocked]}" python3 -m studies.known_idle.blocked_without_profiler ;;
    traces) timeout "${LIMIT[traces]}" python3 -m studies.known_idle.traces ;;
    reference) OUT="$W/noise" timeout "${LIMIT[reference]}" python3 -m studies.noise.stages reference ;;
    cold) OUT=$W timeout "${LIMIT[cold]}" python3 -m studies.live_panel.cold_start ;;
    where) timeout "${LIMIT[where]}" python3 -m studies.live_panel.where_time_goes --tag first-process &&
           OUT=$W timeout "${LIMIT[where]}" python3 -m studies.live_panel.where_time_goes --tag second-process ;;
    live_stream) OUT=$W timeout "${LIMIT[live_stream]}" python3 -m studies.live_panel.benchmark ;;
    live_stream_alt) OUT=$W timeout "${LIMIT[live_stream_alt]}" python3 -m studies.live_panel.benchmark ${LIVE_STREAM_ALT:?set LIVE_STREAM_ALT} ;;
    card) mkdir -p "$W/card" && timeout "${LIMIT[card]}" python3 -m dspark_lab.cli doctor --card \
            --compare "${CARD_REF:-data/machines/h200-card-20261201.json}" --card-out "$W/card/h200-card-$(date -u +%Y%m%d-%H%M).json" ;;
    gallery) OUT=$W timeout "${LIMIT[gallery]}" python3 scripts/gpu_gallery.py ${GALLERY_ARGS:-} && timeout 60 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_field_third_round.py tests/test_charge_accounting.py ;;
    card_hazards) OUT=$W timeout "${LIMIT[card_hazards]}" python3 -m studies.card.card_and_hazards ;;
    interference) OUT=$W timeout "${LIMIT[interference]}" python3 -m studies.interference.hostile_check ;;
    inspect) OUT=$W timeout "${LIMIT[inspect]}" python3 -m studies.inspect.katas_and_diffs ;;
    torchrun) OUT=$W timeout "${LIMIT[torchrun]}" python3 -m studies.ep.torchrun_launch ;;
    ep) OUT=$W timeout "${LIMIT[ep]}" python3 -m studies.ep.real_ranks ;;
    field) OUT=$W timeout "${LIMIT[field]}" python3 -m studies.field.record_field --scale queued --budget-s "${FIELD_BUDGET_S:-120}" ;;
    order) OUT=$W timeout "${LIMIT[order]}" python3 -m studies.order.randomised_reference --time-cap "${ORDER_TIME_CAP_S:-10}" ;;
    headroom) OUT=$W timeout "${LIMIT[headroom]}" python3 -m studies.headroom.gallery_and_draft --budget-s "${HEADROOM_BUDGET_S:-90}" ;;
    lint_fixes_races) OUT=$W timeout "${LIMIT[lint_fixes_races]}" python3 -m studies.hazards.lint_fixes_races ;;
    investigation) OUT=$W timeout "${LIMIT[investigation]}" python3 -m studies.field.record_investigation ;;
    profiler_cost) OUT=$W timeout "${LIMIT[profiler_cost]}" python3 -m studies.profiler_cost.calibrate ;;
    trace_roundtrip) OUT=$W timeout "${LIMIT[trace_roundtrip]}" python3 -m studies.trace.known_cost_roundtrip ${TRACE_ROUNDTRIP_ARGS:-} ;;
    card_waits) mkdir -p "$W/data/machines" && timeout "${LIMIT[card_waits]}" python3 -m dspark_lab.cli doctor --card \
            --compare "${CARD_REF:-data/machines/h200-card-20261201-1406.json}" \
            --card-out "$W/data/machines/h200-card-$(date -u +%Y%m%d-%H%M).json" ;;
    run_ahead) mkdir -p "$W/run_ahead" && timeout "${LIMIT[run_ahead]}" python3 -m studies.run_ahead.reference_point --out "$W/run_ahead" ;;
    *) echo "unknown stage $stage (see the head of scripts/device_round.sh)"; false ;;
  esac
}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(verify cuda1 cuda2 cuda3 notebooks sweep)
mkdir -p "$W/verify"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$W/gpus.txt" 2>&1
rows=()
for stage in "${stages[@]}"; do
  t0=$SECONDS
  log="$W/log-$stage.txt"
  run_stage "$stage" >"$log" 2>&1
  rc=$?
  last=$(grep -v "USDT\|CPUAllocator\|profiler results will not\|^\s*$" "$log" | tail -n 1 | cut -c1-110)
  rows+=("$(printf '%-14s %4s %6s  %s' "$stage" "$rc" "$((SECONDS - t0))" "$last")")
  (cd "$W" && tar czf "$FINAL/round.tgz" . 2>/dev/null)  # after each stage: a call cut short keeps what ran
done
cp "$W"/log-*.txt "$FINAL"/ 2>/dev/null
for stage in "${stages[@]}"; do
  echo "===== $stage"; grep -v "USDT\|CPUAllocator\|profiler results will not" "$W/log-$stage.txt" | tail -n 12 | cut -c1-240
done
echo "===== the round ($(cat "$W/gpus.txt"))"
printf '%-14s %4s %6s  %s\n' stage rc s "last line"
printf '%s\n' "${rows[@]}"
