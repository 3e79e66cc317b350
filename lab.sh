#!/usr/bin/env bash
# Opens the kit: JupyterLab on notebook 01, on 127.0.0.1 only, behind a printed token, on a free port
# (dspark_lab/cli/launch.py). The environment (.venv) is built on the first run, with progress on stderr.
#   bash lab.sh                 JupyterLab (Ctrl-C stops it); DSPARK_NO_BROWSER=1: print the URL only
#   bash lab.sh report [ARGS]   the report from the recorded runs (out/report.html) and a summary table
#   bash lab.sh sweep [ARGS]    with a CUDA GPU: the default sweep into data/runs/, then the report
#                               (without one: says so and reports the recorded runs); ARGS: --preset ...
#   bash lab.sh cli ARGS        the dspark-lab command line (also at .venv/bin/dspark-lab)
set -euo pipefail
cd "$(dirname "$0")"
py=$(bash scripts/ensure_env.sh)
case "${1:-}" in
  report) shift; exec "$py" -m dspark_lab.cli report --summary "$@" ;;
  sweep)  shift; exec "$py" -m dspark_lab.cli main "$@" ;;
  cli)    shift; exec "$py" -m dspark_lab.cli "$@" ;;
  *)      exec "$py" -m dspark_lab.cli.launch "$@" ;;
esac
