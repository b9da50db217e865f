#!/usr/bin/env bash
# dpa developer entry point. Sets everything up on a fresh machine (idempotent), then:
#   ./run.sh main [args]   the main job: skewed per-key work read through Spark on Ray, dpa vs hash vs Spark
#   ./run.sh test [args]   the test suite (unit, integration on Ray, Spark on Ray)
#   ./run.sh setup         set-up only
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv

setup() {
  if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "[setup] Java not found: installing OpenJDK 17 (needed by Spark)" >&2
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    fi
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV" >&2
    "$PY" -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c "import dpa, ray, raydp, pyspark, pytest, hypothesis" >/dev/null 2>&1 \
     || [ pyproject.toml -nt "$VENV/.dpa-installed" ]; then
    echo "[setup] installing dpa and its dependencies into $VENV" >&2
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    touch "$VENV/.dpa-installed"
  fi
  # Bytecode for the project's packages (pip does this for an installed package; an editable
  # install under PYTHONDONTWRITEBYTECODE=1 would compile them again in every process,
  # every Ray worker among them). Only changed files are compiled.
  "$VENV/bin/python" -m compileall -q dpa spark_bridge workloads benchmarks
}

cmd=${1:-main}
shift || true
case "$cmd" in
  setup) setup ;;
  main)  setup; exec "$VENV/bin/python" -m workloads.skewed_job "$@" ;;
  test)  setup; exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests "$@" ;;
  *) echo "usage: ./run.sh [main|test|setup] [args...]" >&2; exit 2 ;;
esac
