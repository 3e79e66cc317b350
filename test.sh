#!/usr/bin/env bash
# The whole test suite, in two halves, each in an environment of its own:
#   1. core: the project's own (.venv: CPU torch here, the machine's CUDA torch on a GPU box), all tests
#      but the sglang conformance ones; CUDA tests skip cleanly without a GPU;
#   2. sglang: sglang in an environment of its own (.venv-sglang, built once by scripts/sglang_env.sh;
#      its size and build time: README, "Set-up"), the conformance tests. DSPARK_SKIP_SGLANG=1 leaves it out.
# Both halves run (a failed core half does not hide the sglang one; only an interrupt stops there); the
# last lines say which half ran and how it ended, and the exit status is the first failed half's.
# Extra arguments go to the first pytest run. DSPARK_VENV / DSPARK_SGLANG_VENV: the two environments.
set -uo pipefail
cd "$(dirname "$0")"
py=$(bash scripts/ensure_env.sh) || exit
# The browser test drives Debian's chromium; install it where it is missing and we may.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium could not be installed: the browser test will skip" >&2
fi
# Two workers (pytest-xdist). `--dist loadfile` keeps each test file on one worker, so a file's
# module fixtures and the notebooks (executed once, for tests/test_notebooks.py) are built once.
# The one place the order is set: tests/conftest.py's LONGEST_FILES (the files that take longest in
# the suite's --durations, longest first: the browser test, the README commands, the notebooks...)
# go out first, every other file after them in collection order, so no long file starts last and
# runs alone. (`loadgroup` would let files share a worker, but with pytest 9.2 it ignores
# xdist_group marks: pytest-xdist #1386.)
# DSPARK_TEST_WORKERS=0: serial.
"$py" -m pytest -m "not sglang" -n "${DSPARK_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
core=$?

ended() { if [ "$1" = 0 ]; then echo "passed"; else echo "failed (exit $1)"; fi; }
if [ "${DSPARK_SKIP_SGLANG:-0}" = 1 ]; then
  sglang=0; sglang_said="not run (DSPARK_SKIP_SGLANG=1)"
elif [ "$core" -ge 128 ]; then  # Ctrl-C or a signal: the user stopped the suite
  sglang=0; sglang_said="not run (the core half was interrupted)"
else
  bash scripts/sglang_env.sh
  sglang=$?
  sglang_said="ran: $(ended "$sglang")"
fi
echo "test.sh: core half (pytest -m \"not sglang\"): ran: $(ended "$core")" >&2
echo "test.sh: sglang half (scripts/sglang_env.sh): $sglang_said" >&2
if [ "$core" != 0 ]; then exit "$core"; fi
exit "$sglang"
