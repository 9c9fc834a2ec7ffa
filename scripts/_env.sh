# Shared set-up for scripts/serve and scripts/test: create .venv if missing and
# install the project (with the extras given in $SS_EXTRAS) when pyproject.toml
# changed since the last install. Sourced, not executed.
#
# Both scripts share .venv: scripts/serve installs without extras, scripts/test with
# the dev extras (a superset). Each install leaves a stamp per extras
# (.venv/.installed-base, .venv/.installed-dev); a dev install also satisfies
# scripts/serve, and a base install never removes what dev installed, so running
# them in either order leaves both working.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
_want="${SS_EXTRAS:-base}"
_current() {  # the stamp exists and is not older than pyproject.toml
  [ -f ".venv/.installed-$1" ] && [ ! pyproject.toml -nt ".venv/.installed-$1" ]
}
if ! _current "$_want" && ! { [ "$_want" = base ] && _current dev; }; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  if [ -n "${SS_EXTRAS:-}" ]; then
    .venv/bin/python -m pip install -q -e ".[${SS_EXTRAS}]"
  else
    .venv/bin/python -m pip install -q -e .
  fi
  touch ".venv/.installed-$_want"
fi
unset -f _current
unset _want
# tiktoken cannot download encodings here; the shared cache holds o200k_base and cl100k_base.
if [ -z "${TIKTOKEN_CACHE_DIR:-}" ] && [ -d "$ROOT/../shared/tiktoken" ]; then
  export TIKTOKEN_CACHE_DIR="$(cd "$ROOT/../shared/tiktoken" && pwd)"
fi
