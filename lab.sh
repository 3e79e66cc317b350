#!/usr/bin/env bash
# The main job. With a CUDA GPU: the default sweep on it, saved under data/runs/ with the machine's
# fingerprint, then the report. Without one: the report from the runs recorded on real GPUs.
# Either way the standalone report lands in out/report.html. Extra arguments go to `dspark-lab main`.
set -euo pipefail
cd "$(dirname "$0")"
py=$(bash scripts/ensure_env.sh)
exec "$py" -m dspark_lab.cli main "$@"
