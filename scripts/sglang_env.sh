#!/usr/bin/env bash
# Runs the SGLang conformance tests (pytest -m sglang) in a SEPARATE venv holding sglang==0.5.23.
#
#   bash scripts/sglang_env.sh            # create/reuse the venv, then run the sglang-marked tests
#   bash scripts/sglang_env.sh -k fields  # extra arguments go to pytest
#   DSPARK_SGLANG_VENV=/some/dir bash scripts/sglang_env.sh
#   DSPARK_SGLANG_INSTALL_ONLY=1 bash scripts/sglang_env.sh   # build the venv, run nothing
#
# Why a venv of its own: sglang pins torch==2.14.1 (a CUDA build, ~10 GB with its nvidia-* wheels)
# and ~80 other packages; the lab's own env keeps its CPU torch. The venv is made with the
# project installed editable with the kit but no other extra (`pip install -e .[kit]`), plus pytest.
#
# Idempotent: a marker file in the venv records a finished install; it is redone only when the
# marker is missing or older than pyproject.toml. The venv gets its own .gitignore ("*"), so git
# ignores it wherever it lies.
#
# Needs: Python 3.11 exactly (the 0.5.23 wheel is cp311 only); ~11 GB of disk; the package index.
# Measured on a 2-core CPU-only machine with torch's wheel on local disk: install 172 s, tests 11 s.
# No GPU is needed: sglang and the modules the adapter calls import on a CPU-only machine with
# no env tweaks (sglang only warns: AWQ/GGUF unsupported, Triton falls back to CPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DSPARK_SGLANG_VENV:-$root/.venv-sglang}
sglang_version=0.5.23
marker="$venv/.dspark-sglang-$sglang_version-ok"

pick_python() {
  for c in "${PYTHON:-}" python3.11 python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  echo "sglang_env.sh: sglang $sglang_version ships a cp311 wheel only; no Python 3.11 found" \
    "(set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ -f "$marker" ] && [ "$marker" -nt "$root/pyproject.toml" ]; then
  echo "sglang_env.sh: reusing $venv" >&2
else
  py=$(pick_python)
  start=$(date +%s)
  echo "sglang_env.sh: installing sglang==$sglang_version into $venv (this takes many minutes)" >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  printf '*\n' >"$venv/.gitignore"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # One resolver run for everything, so the project's `torch>=2.3` meets sglang's torch==2.14.1.
  # A machine-wide pip constraints file (pip.conf `constraint = ...`) capping torch at 2.14.1 or
  # above admits the pin; one capping it lower makes the resolver fail. Then rerun with
  # DSPARK_SGLANG_NO_CONSTRAINT=1: PIP_CONSTRAINT=/dev/null replaces the configured file for
  # these pip commands only (an empty PIP_CONSTRAINT= does NOT lift it).
  if [ "${DSPARK_SGLANG_NO_CONSTRAINT:-0}" = 1 ]; then
    export PIP_CONSTRAINT=/dev/null
  fi
  "$venv/bin/python" -m pip install --progress-bar off "sglang==$sglang_version" -e "$root[kit]" pytest
  "$venv/bin/python" -c 'import sglang.version as v; print("sglang", v.__version__)' >&2
  touch "$marker"
  echo "sglang_env.sh: install took $(($(date +%s) - start)) s" >&2
fi

if [ "${DSPARK_SGLANG_INSTALL_ONLY:-0}" = 1 ]; then
  exit 0
fi
cd "$root"
start=$(date +%s)
set +e
# The adapter's test file and any other test file that marks tests sglang. Only those files are
# collected: other test files may import packages (notebook or browser extras) this venv lacks.
mapfile -t files < <(
  { echo tests/test_sglang_adapter.py; grep -rl 'mark\.sglang' tests --include='test_*.py' || true; } | sort -u
)
"$venv/bin/python" -m pytest -m sglang -rs "${files[@]}" "$@"
rc=$?
set -e
echo "sglang_env.sh: tests took $(($(date +%s) - start)) s" >&2
exit $rc
