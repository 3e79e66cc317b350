#!/usr/bin/env bash
# Creates .venv where it is missing and prints its python. Idempotent: a second run installs nothing.
# - A machine whose python3 already has a CUDA torch (a GPU box): the venv sees system packages, so
#   that torch is kept, and pip finds its requirement already met.
# - Anywhere else: torch==2.13.0 (the CPU wheel) is installed first, so no CUDA build is pulled.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DSPARK_VENV:-$root/.venv}
py=${PYTHON:-python3}
marker="$venv/.dspark-env-ok"
if [ -f "$marker" ] && [ "$marker" -nt "$root/pyproject.toml" ]; then
  echo "$venv/bin/python"; exit 0
fi
{
  if [ ! -x "$venv/bin/python" ]; then
    if "$py" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
      echo "keeping the system's CUDA torch: $("$py" -c 'import torch; print(torch.__version__)')"
      "$py" -m venv --system-site-packages "$venv"
    else
      "$py" -m venv "$venv"
    fi
  fi
  "$venv/bin/python" -m pip install -q --upgrade pip
  if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    "$venv/bin/python" -m pip install -q torch==2.13.0
  fi
  "$venv/bin/python" -m pip install -q -e "$root[notebooks,dev]"
  touch "$marker"
} 1>&2
echo "$venv/bin/python"
