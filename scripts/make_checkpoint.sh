#!/usr/bin/env bash
# Re-make the shipped checkpoint explainer/checkpoints/spell_numbers.{pt,json} (CPU, 2 threads, ~10 min).
# OMP_WAIT_POLICY=PASSIVE only stops idle OpenMP threads from spinning (it matters on a busy machine);
# it does not change any number. Extra arguments go to `python -m explainer.model.train` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_WAIT_POLICY=PASSIVE
exec "$PY" -m explainer.model.train --steps 2000 --seed 0 --out explainer/checkpoints --force "$@"
