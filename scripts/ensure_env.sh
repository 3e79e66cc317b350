#!/usr/bin/env bash
# Creates .venv where it is missing and prints its python. Idempotent: a second run installs nothing.
# - A machine whose python3 already has a CUDA torch (a GPU box): the venv sees system packages, so
#   that torch is kept, and pip finds its requirement already met.
# - Anywhere else: torch==2.13.0 (the CPU wheel) is installed first, so no CUDA build is pulled.
# stdout: the venv's python, last and alone (callers read it with $(...)); progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${DSPARK_VENV:-$root/.venv}
py=${PYTHON:-python3}
marker="$venv/.dspark-env-ok"
# Notebooks stay clean in git when used (JupyterLab's autosave writes outputs into them): the
# ecosystem's way, nbstripout as a git filter (.gitattributes names it; this clone's config defines it,
# with cell ids kept and the kernel's language_info dropped, so a saved notebook reads as committed).
strip_filter() {
  [ -x "$venv/bin/python" ] && git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || return 0
  local cmd="'$venv/bin/python' -m nbstripout --keep-id --extra-keys metadata.language_info"
  local have; have=$(git -C "$root" config --get filter.nbstripout.clean || true)
  # Already this venv's filter (every run after the first): nothing to check, no python started.
  [ "$have" = "$cmd" ] && return 0
  if "$venv/bin/python" -c 'import nbstripout' 2>/dev/null; then
    # Kept while the python it names exists: a throwaway venv (a test's) must not re-point the clone's filter.
    if [ -n "$have" ]; then
      local py_have; py_have=$(printf '%s' "$have" | sed -n "s/^'\([^']*\)'.*/\1/p")
      if [ -n "$py_have" ] && [ -x "$py_have" ] && "$py_have" -c 'import nbstripout' 2>/dev/null; then return 0; fi
    fi
    git -C "$root" config filter.nbstripout.clean "$cmd"
    git -C "$root" config filter.nbstripout.smudge cat
    git -C "$root" config diff.ipynb.textconv "$cmd -t"
  fi
}
if [ -f "$marker" ] && [ "$marker" -nt "$root/pyproject.toml" ]; then
  strip_filter
  echo "$venv/bin/python"; exit 0
fi
t0=$SECONDS
step() { echo "[env ${1}] $2 (at $((SECONDS - t0)) s)" >&2; }
{
  echo "setting up the environment in $venv (once; about a minute on a fresh clone)"
  if [ ! -x "$venv/bin/python" ]; then
    if "$py" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
      echo "keeping the system's CUDA torch: $("$py" -c 'import torch; print(torch.__version__)')"
      step 1/4 "creating .venv (sees the system's packages)"
      "$py" -m venv --system-site-packages "$venv"
    else
      step 1/4 "creating .venv"
      "$py" -m venv "$venv"
    fi
  fi
  step 2/4 "upgrading pip"
  "$venv/bin/python" -m pip install -q --upgrade pip
  if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    step 3/4 "installing torch 2.13.0 (CPU wheel)"
    "$venv/bin/python" -m pip install -q torch==2.13.0
  else
    step 3/4 "torch already present: $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  fi
  step 4/4 "installing dspark-lab, JupyterLab and the test tools"
  "$venv/bin/python" -m pip install -q -e "$root[kit,notebooks,dev]"
  strip_filter
  touch "$marker"
  echo "environment ready in $((SECONDS - t0)) s: $venv"
} 1>&2
echo "$venv/bin/python"
