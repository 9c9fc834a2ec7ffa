# Shared set-up for scripts/serve and scripts/test: create .venv if missing and
# install the project (with the extras given in $SS_EXTRAS) when pyproject.toml
# changed since the last install. Sourced, not executed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.installed-${SS_EXTRAS:-base}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  if [ -n "${SS_EXTRAS:-}" ]; then
    .venv/bin/python -m pip install -q -e ".[${SS_EXTRAS}]"
  else
    .venv/bin/python -m pip install -q -e .
  fi
  touch "$stamp"
fi
# tiktoken cannot download encodings here; the shared cache holds o200k_base and cl100k_base.
if [ -z "${TIKTOKEN_CACHE_DIR:-}" ] && [ -d "$ROOT/../shared/tiktoken" ]; then
  export TIKTOKEN_CACHE_DIR="$(cd "$ROOT/../shared/tiktoken" && pwd)"
fi
