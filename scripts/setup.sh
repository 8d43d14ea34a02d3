#!/usr/bin/env bash
# Sets up everything explainer needs on a Debian-like machine and says what it does, one line per phase
# with its time (long phases print a progress line every 10 s):
#   wheelhouse  (with WHEELHOUSE=DIR) checks the room kit `make wheelhouse` made (its manifest against KIT_SHA256
#            when given, then that it covers this Python), copies the wheels it lists to a private folder, checking
#            each one there; pip then installs from that folder alone, with no index and no network
#   apt      the graphviz `dot` binary and, on Linux, bubblewrap's `bwrap` (for tests also Debian's chromium and npm)
#            when missing
#   venv     a virtual environment ($VENV, default .venv)
#   torch    torch==2.13.0, the CPU build; stops with instructions if pip would pull the multi-GB CUDA build
#   pip      the package with its extras: lab = what the notebooks need (notebooks, hf); test = that + test tools
#   kernel   the venv's Jupyter kernel
#   lab      JupyterLab settings in the venv (no news pop-up; saving a notebook keeps its stored widgets; its
#            kernels report the language version the notebooks store, so opening one changes nothing)
#   trust    the notebooks, so JupyterLab shows their stored outputs and widgets before anything runs
# Usage: scripts/setup.sh [lab|test]
# Environment: VENV (default .venv), PYTHON (default python3), APT_LOCK_TIMEOUT (seconds to wait for apt's lock,
#   default 120), EXPLAINER_ALLOW_CUDA_TORCH=1 (accept pip's CUDA build of torch when no CPU wheel is found),
#   WHEELHOUSE=DIR (lab only: install from that room kit, with no network), KIT_SHA256=HEX (the digest of the kit's
#   manifest.json that the instructor published; set-up refuses a kit whose manifest differs).
#   For the hub (scripts/setup-hub.sh): EXTRAS=hub adds that extra, and PACKAGE=copy installs a copy of the package
#   (not a link to this checkout, which the learners' accounts may not be able to read).
# Runs on bash 3.2 (macOS) as well: no empty-array expansions under set -u.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-test}
case $want in lab|test) ;; *) echo "setup: unknown target '$want'; accepted: lab, test" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
APT_LOCK_TIMEOUT=${APT_LOCK_TIMEOUT:-120}
WHEELHOUSE=${WHEELHOUSE:-}
KIT_SHA256=${KIT_SHA256:-}
EXTRAS=${EXTRAS:-}
PACKAGE=${PACKAGE:-editable}
case $PACKAGE in editable|copy) ;; *) echo "setup: PACKAGE=$PACKAGE: accepted editable, copy" >&2; exit 2 ;; esac
T0=$SECONDS
LOG=$(mktemp "${TMPDIR:-/tmp}/explainer-setup.XXXXXX")
CHILD=""
TMPD=""
KITD=""
cleanup() {
  [ -n "$CHILD" ] && kill "$CHILD" 2>/dev/null || true
  [ -n "$TMPD" ] && rm -rf "$TMPD"
  [ -n "$KITD" ] && rm -rf "$KITD"
  rm -f "$LOG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PHASE=setup
PHASE_T0=$SECONDS
say() { echo "setup: $*"; }
phase() { PHASE=$1; PHASE_T0=$SECONDS; }
done_phase() { say "[$PHASE] $* ($((SECONDS - PHASE_T0)) s)"; }
fail() { echo "setup: [$PHASE] $*" >&2; exit 1; }

# run_logged CMD...: output to $LOG; every 10 s one line with the time so far and the command's latest line.
run_logged() {
  : >"$LOG"
  "$@" >>"$LOG" 2>&1 </dev/null &
  CHILD=$!
  local n=0 rc=0 last
  while kill -0 "$CHILD" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $((n % 10)) -eq 0 ] && kill -0 "$CHILD" 2>/dev/null; then
      last=$(grep -v '^WARNING: Location' "$LOG" 2>/dev/null | tail -n 1 | tr -d '\r' | sed 's/^ *//' | cut -c1-90)
      say "[$PHASE]   ... $((SECONDS - PHASE_T0)) s so far${last:+; last output: $last}"
    fi
  done
  wait "$CHILD" || rc=$?
  CHILD=""
  return $rc
}

# explain_failure WHAT: the log's tail, and "permission" when that is what went wrong.
explain_failure() {
  tail -n 25 "$LOG" | sed 's/^/  | /' >&2
  if grep -qiE "permission denied|errno 13|operation not permitted|are you root" "$LOG"; then
    fail "$1 failed: permission denied (see above). Is $(pwd) or $VENV owned by another user (e.g. made by sudo)? Fix the owner or use a folder you own."
  fi
  fail "$1 failed (last lines above)."
}

# lock_holders FILE...: "pid N (command)" for each process holding a POSIX lock on one of the files (/proc/locks).
lock_holders() {
  local f ino pid out=""
  for f in "$@"; do
    [ -e "$f" ] || continue
    ino=$(stat -c %i "$f")
    for pid in $(sed 's/->//' /proc/locks | awk -v ino="$ino" '{n = split($6, a, ":"); if (a[n] == ino) print $5}' | sort -u); do
      out="${out:+$out, }pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?')) on $f"
    done
  done
  echo "$out"
}

have() { local p; p=$(type -P "$1" 2>/dev/null) && [ -x "$p" ]; }   # bash's command -v also names non-executables
APT_UPDATED=""
PRESENT=""
INSTALLED=""
apt_install() {  # apt_install BINARY PACKAGE...
  local bin=$1 sudo="" holders
  shift
  if have "$bin"; then PRESENT="$PRESENT $bin"; return 0; fi
  [ -z "$WHEELHOUSE" ] || fail "'$bin' is missing, and set-up from a wheelhouse uses no network: install $* first (sudo apt-get install $*; on a Mac: brew install $*), then re-run."
  have apt-get || fail "'$bin' is missing and there is no apt-get here: install $* with your package manager (README: \"Without apt\") and re-run."
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      fail "permission: installing $* needs root. Run: sudo apt-get install $* ; then re-run."
    fi
  fi
  say "[$PHASE] '$bin' is missing: apt-get install $* (waits up to ${APT_LOCK_TIMEOUT} s for apt's lock)"
  local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT")
  local ok=1
  if [ -z "$APT_UPDATED" ]; then
    run_logged "${apt[@]}" update || ok=0
    APT_UPDATED=1
  fi
  [ $ok = 1 ] && { run_logged "${apt[@]}" install -y --no-install-recommends "$@" || ok=0; }
  if [ $ok = 1 ]; then INSTALLED="$INSTALLED $*"; return 0; fi
  if grep -qiE "could not get lock|unable to acquire|unable to lock" "$LOG"; then
    holders=$(lock_holders /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
    grep -iE "could not get lock|unable to" "$LOG" | head -n 2 | sed 's/^/  | /' >&2
    fail "apt's lock is still held after ${APT_LOCK_TIMEOUT} s by ${holders:-another process (named in the lines above)}. Let it finish (or end it), then re-run; APT_LOCK_TIMEOUT=600 waits longer."
  fi
  explain_failure "apt-get install $*"
}

# torch_choice: which torch==2.13.0 pip would take here, without downloading it: "cpu|cuda VERSION URL".
torch_choice() {
  "$VENV/bin/pip" install --dry-run --ignore-installed --no-deps --quiet --progress-bar off --report "$LOG.json" \
      "torch==2.13.0" >"$LOG" 2>&1 || return 1
  "$VENV/bin/python" - "$LOG.json" <<'EOF'
import json, sys
from pip._vendor.packaging.requirements import Requirement
item = json.load(open(sys.argv[1]))["install"][0]
reqs = [Requirement(r) for r in item["metadata"].get("requires_dist") or []]
cuda = any(r.name.startswith("nvidia-") and (r.marker is None or r.marker.evaluate({"extra": ""})) for r in reqs)
print("cuda" if cuda else "cpu", item["metadata"]["version"], item["download_info"]["url"])
EOF
  rm -f "$LOG.json"
}

# a copy of the package is installed again whenever one of its files changes
stamped=(pyproject.toml scripts/setup.sh)
if [ "$PACKAGE" = copy ]; then stamped+=(explainer); fi
stamp=$VENV/.explainer-$want-$( (echo "$EXTRAS $PACKAGE"; find "${stamped[@]}" -type f ! -name '*.pyc' -print0 | sort -z \
  | xargs -0 cat) | cksum | cut -d" " -f1)

# --- wheelhouse: a room kit (make wheelhouse), and pip sees nothing else -----------------------------
if [ -n "$WHEELHOUSE" ] && [ -f "$stamp" ]; then
  phase wheelhouse
  done_phase "$VENV is set up already: the kit is not read"
elif [ -n "$WHEELHOUSE" ]; then
  phase wheelhouse
  [ "$want" = lab ] || fail "WHEELHOUSE holds what make lab installs; make test needs the network."
  [ -d "$WHEELHOUSE" ] || fail "WHEELHOUSE=$WHEELHOUSE is not a folder (an instructor makes one with: make wheelhouse WHEELHOUSE=DIR)."
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  have "$PY" || fail "no '$PY' on PATH: install Python 3.10+ (or set PYTHON=/path/to/python3)."
  # pip gets a private copy of exactly the listed wheels, each checked as it is copied (not the stick's folder:
  # a file the manifest does not list, or one changed after the check, never reaches pip)
  KITD=$(mktemp -d "${TMPDIR:-/tmp}/explainer-kit.XXXXXX")
  say "[wheelhouse] checking the kit and copying the wheels it lists to $KITD (about 300 MB)"
  "$PY" scripts/wheelhouse.py stage "$WHEELHOUSE" "$KITD" ${KIT_SHA256:+--manifest-sha256 "$KIT_SHA256"} >"$LOG" 2>&1 \
    || fail "$(sed 's/^wheelhouse: //' "$LOG")"
  # no index, no pip configuration of this user or machine: only those files (a file: URL, as a path with a
  # space would be split in PIP_FIND_LINKS)
  for v in $(env | sed -n 's/^\(PIP_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
  PIP_FIND_LINKS=$("$PY" -c 'import pathlib, sys; print(pathlib.Path(sys.argv[1]).as_uri())' "$KITD")
  export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_FIND_LINKS
  done_phase "$(sed 's/^wheelhouse: //' "$LOG")"
fi

# --- apt ------------------------------------------------------------------------------------------
phase apt
apt_install dot graphviz
# bubblewrap: the workshop checks' jail for the learner's code (Flatpak's sandbox: no daemon, Linux
# namespaces, works unprivileged); without it checks run under rlimits only and say they are not isolated.
# Linux only: elsewhere there are no such namespaces (the doctor says "not available here").
if [ "$(uname -s)" = Linux ]; then apt_install bwrap bubblewrap; fi
if [ "$want" = test ]; then
  apt_install chromium chromium fonts-dejavu-core
  [ -f "$VENV/share/explainer-js/dist/embed-amd.js" ] || apt_install npm npm
  # --backend hosts tests (root only; they skip elsewhere) need iproute2's `ip`
  if [ "$(id -u)" -eq 0 ]; then apt_install ip iproute2; fi
fi
done_phase "${PRESENT:+present:$PRESENT}${INSTALLED:+; installed:$INSTALLED}"

if [ ! -f "$stamp" ]; then
  INSTALL_T0=$SECONDS
  # --- venv ---------------------------------------------------------------------------------------
  phase venv
  if [ -x "$VENV/bin/python" ]; then
    done_phase "$VENV exists ($("$VENV/bin/python" -V 2>&1))"
  else
    have "$PY" || fail "no '$PY' on PATH: install Python 3.10+ (or set PYTHON=/path/to/python3)."
    run_logged "$PY" -m venv "$VENV" || {
      grep -q ensurepip "$LOG" && fail "'$PY -m venv' needs Debian's venv module: sudo apt-get install python3-venv ; then re-run."
      explain_failure "$PY -m venv $VENV"; }
    done_phase "created $VENV with $("$VENV/bin/python" -V 2>&1)"
  fi
  pip=("$VENV/bin/pip" install --disable-pip-version-check --progress-bar off)

  # --- torch: the CPU build; never a silent multi-GB CUDA download --------------------------------
  phase torch
  have=$("$VENV/bin/python" -c 'from importlib import metadata as m; d = m.distribution("torch")
print("cuda" if any(r.startswith("nvidia-") for r in d.requires or []) else "cpu", d.version)' 2>/dev/null || true)
  if [ -n "$have" ] && [ "${have#* }" != "${have#* 2.13.0}" ]; then
    done_phase "torch ${have#* } (${have%% *} build) already in $VENV"
  else
    say "[torch] asking pip which torch 2.13.0 wheel it would take (nothing is downloaded)"
    choice=$(torch_choice) || explain_failure "asking pip which torch 2.13.0 it would install"
    read -r kind version url <<<"$choice"
    if [ "$kind" = cuda ] && [ -z "${EXPLAINER_ALLOW_CUDA_TORCH:-}" ]; then
      {
        say "[torch] pip would download torch $version WITH CUDA (about 5 GB with its nvidia-* packages):"
        say "[torch]   $url"
        say "[torch] no CPU wheel of torch 2.13.0 is visible to pip for user '$(id -un)' (pip's sources are per user:"
        say "[torch] 'pip config list' shows them). Nothing was downloaded. Choose one and re-run:"
        say "[torch]   CPU build from PyTorch's index (about 200 MB):  PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make $want"
        say "[torch]   a folder that holds the CPU wheel:              PIP_FIND_LINKS=/path/to/wheels make $want"
        say "[torch]   keep pip's CUDA build anyway:                   EXPLAINER_ALLOW_CUDA_TORCH=1 make $want"
      } >&2
      exit 1
    fi
    say "[torch] installing torch $version ($kind build) from ${url%%\?*}"
    run_logged "${pip[@]}" "torch==2.13.0" || explain_failure "pip install torch==2.13.0"
    done_phase "torch $version ($kind build) installed"
  fi

  # --- pip: the package and what the notebooks (and tests) need -----------------------------------
  phase pip
  if [ "$want" = test ]; then extras="test,hf,notebooks,docs,lint"; else extras="notebooks,hf"; fi
  extras=$extras${EXTRAS:+,$EXTRAS}
  if [ "$PACKAGE" = copy ]; then   # built from a clean copy of the tree (no build/ or egg-info left in the checkout)
    TMPD=$(mktemp -d)
    cp -r explainer pyproject.toml README.md LICENSE "$TMPD/"
    find "$TMPD" -name __pycache__ -prune -exec rm -rf {} +
    say "[pip] installing a copy of explainer[$extras] into $VENV"
    run_logged "${pip[@]}" --force-reinstall --no-deps "$TMPD" || explain_failure "pip install (a copy of) explainer"
    run_logged "${pip[@]}" "$TMPD[$extras]" || explain_failure "pip install (a copy of) explainer[$extras]"
    rm -rf "$TMPD"; TMPD=""
  else
    say "[pip] installing explainer[$extras] into $VENV"
    run_logged "${pip[@]}" -e ".[$extras]" || explain_failure "pip install -e .[$extras]"
  fi
  done_phase "explainer[$extras] installed"

  phase kernel
  run_logged "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 || explain_failure "ipykernel install"
  done_phase "Jupyter kernel 'python3' -> $VENV/bin/python"
  rm -f "$VENV"/.explainer-*
  touch "$stamp"
  if [ -n "$WHEELHOUSE" ]; then   # what the install could reach: tests/test_wheelhouse.py reads it
    ifaces=$(awk -F: 'NR > 2 {gsub(/ /, "", $1); printf "%s ", $1}' /proc/net/dev 2>/dev/null || true)
    "$VENV/bin/python" -c 'import json, sys; print(json.dumps({"wheelhouse": sys.argv[1], "seconds": int(sys.argv[2]),
"interfaces": sys.argv[3].split(), "authenticated": sys.argv[4] == "1"}))' "$WHEELHOUSE" $((SECONDS - INSTALL_T0)) \
      "$ifaces" "$([ -n "$KIT_SHA256" ] && echo 1 || echo 0)" >"$VENV/.explainer-wheelhouse.json"
  fi
fi

# --- lab settings and trust: every run (cheap), so re-executed notebooks are trusted again -----------
phase lab
venv_abs=$(cd "$VENV" && pwd)
settings=$venv_abs/share/jupyter/lab/settings
mkdir -p "$settings" "$venv_abs/etc/jupyter" "$venv_abs/etc/ipython" "$venv_abs/share/jupyter/explainer-trust"
# saveState stays false: @jupyter-widgets/jupyterlab-manager 5.0 saves only the widget models with a live kernel
# comm and marks a notebook modified as soon as it restores the stored ones, so with it on, opening a notebook
# and letting autosave run wipes its stored steppers. The server's pre-save hook keeps them whatever the setting.
cat >"$settings/overrides.json" <<'EOF'
{
  "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false},
  "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": false}
}
EOF
cat >"$venv_abs/etc/jupyter/jupyter_server_config.json" <<'EOF'
{"ContentsManager": {"pre_save_hook": "explainer.notebook_file.keep_stored_widgets"}}
EOF
# The venv's kernels report language_info.version "3", as the stored notebooks do: with the interpreter's patch
# release (ipykernel's default), JupyterLab marks a notebook modified the moment a kernel of another Python starts.
cat >"$venv_abs/etc/ipython/ipython_kernel_config.json" <<'EOF'
{"IPKernelApp": {"kernel_class": "explainer.notebook_kernel.NotebookKernel"}}
EOF
# One signature store per venv, read by `jupyter trust` and by the lab server alike (every Jupyter app
# loads jupyter_config.json from the venv's etc/jupyter), whoever runs it and whatever their home folder.
cat >"$venv_abs/etc/jupyter/jupyter_config.json" <<EOF
{"NotebookNotary": {"db_file": "$venv_abs/share/jupyter/explainer-trust/nbsignatures.db",
                    "secret_file": "$venv_abs/share/jupyter/explainer-trust/notebook_secret"}}
EOF
done_phase "JupyterLab settings: no news pop-up; saving keeps the notebooks' stored widgets; opening one on any Python 3 leaves it unmodified ($settings/overrides.json, $venv_abs/etc/jupyter/jupyter_server_config.json, $venv_abs/etc/ipython/ipython_kernel_config.json)"

phase trust
run_logged "$VENV/bin/jupyter" trust notebooks/*.ipynb notebooks/workshop/*.ipynb || explain_failure "jupyter trust"
done_phase "$(ls notebooks/*.ipynb notebooks/workshop/*.ipynb | wc -l) notebooks trusted (signatures in $venv_abs/share/jupyter/explainer-trust)"

# --- test only: the widget html-manager and require.js for the static-HTML export test, from npm ----
js=$VENV/share/explainer-js
if [ "$want" = test ] && [ ! -f "$js/dist/embed-amd.js" ]; then
  phase npm
  TMPD=$(mktemp -d)
  run_logged sh -c "cd '$TMPD' && npm pack --silent @jupyter-widgets/html-manager@1.0.15 requirejs@2.3.8 \
      && tar xzf jupyter-widgets-html-manager-1.0.15.tgz && mkdir -p req && tar xzf requirejs-2.3.8.tgz -C req" \
    || explain_failure "npm pack of @jupyter-widgets/html-manager"
  mkdir -p "$js" && cp -r "$TMPD/package/dist" "$js/" && cp "$TMPD/req/package/require.js" "$js/"
  done_phase "widget html-manager 1.0.15 and require.js 2.3.8 in $js"
fi

say "ready ($want) in $((SECONDS - T0)) s: $("$VENV/bin/python" -m explainer version)"
