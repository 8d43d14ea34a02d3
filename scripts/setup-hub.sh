#!/usr/bin/env bash
# `make hub`: sets up the room's JupyterHub on this Linux machine (an optional extra: `make lab` does not grow), one
# line per phase with its time:
#   check    root, Linux, useradd, and a Python the learners' accounts can run ($PYTHON, default Debian's
#            /usr/bin/python3: a Python under /root, pyenv's default as root, is not readable by them)
#   venv     $HUB_PREFIX/venv built as `make lab` builds it (scripts/setup.sh lab: torch CPU, explainer[notebooks,hf],
#            its kernel, lab settings, trusted notebooks), plus the hub extra (jupyterhub, jupyterhub-idle-culler)
#            and a copy of the package (not a link to this checkout, which may sit in a 0700 folder)
#   proxy    configurable-http-proxy (npm) in $HUB_PREFIX/proxy: online from npm, or from the room kit's tarball
#   notebooks  the notebooks and the exercises (never the solutions) in $HUB_PREFIX/notebooks: each learner's
#            account starts with its own copy of them
#   access   $HUB_PREFIX root-owned, readable and runnable by every account, writable by none; then checked: the
#            user `nobody` imports explainer and jupyterhub from the venv
#   share    (make test only, SHARE_FROM=.venv-lab) a fresh venv gets the packages that venv installed from the same
#            kit (hard links or copies, console scripts pointed at this venv's python; never its link to the checkout), so
#            pip, next, installs only the hub extra and the package: about two minutes less on two cores
# Usage: scripts/setup-hub.sh. Environment: HUB_PREFIX (default /opt/explainer-hub), PYTHON (default
#   /usr/bin/python3), WHEELHOUSE=DIR (install from the room kit `make wheelhouse` made, with no network),
#   SHARE_FROM=VENV (above).
set -euo pipefail
cd "$(dirname "$0")/.."
HUB_PREFIX=${HUB_PREFIX:-/opt/explainer-hub}
PY=${PYTHON:-/usr/bin/python3}
WHEELHOUSE=${WHEELHOUSE:-}
SHARE_FROM=${SHARE_FROM:-}
CHP=configurable-http-proxy@5.3.0
CHP_KIT=configurable-http-proxy-5.3.0-node_modules.tgz   # scripts/wheelhouse.py puts it in the kit
T0=$SECONDS
PHASE=check
PHASE_T0=$SECONDS
TMPD=""
trap '[ -n "$TMPD" ] && rm -rf "$TMPD"' EXIT
trap 'exit 130' INT TERM
say() { echo "setup-hub: $*"; }
phase() { PHASE=$1; PHASE_T0=$SECONDS; }
done_phase() { say "[$PHASE] $* ($((SECONDS - PHASE_T0)) s)"; }
fail() { echo "setup-hub: [$PHASE] $*" >&2; exit 1; }

# --- check ------------------------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] || fail "the hub runs on Linux (it makes a Unix account per learner); this is $(uname -s)."
[ "$(id -u)" -eq 0 ] || fail "the hub makes a Unix account per learner and runs their servers as them: run it as root (sudo make hub)."
command -v useradd >/dev/null && command -v userdel >/dev/null || fail "useradd/userdel are missing: apt-get install passwd"
case $HUB_PREFIX in /*) ;; *) fail "HUB_PREFIX=$HUB_PREFIX: expected an absolute path such as /opt/explainer-hub" ;; esac
PY=$(command -v "$PY") || fail "no '${PYTHON:-/usr/bin/python3}': install Debian's python3 and python3-venv (apt-get install python3-venv)"
real=$(readlink -f "$PY")
runuser -u nobody -- "$real" -c 'import venv' 2>/dev/null \
  || fail "$real cannot be run (or has no venv module) by an ordinary account (a Python under /root is not readable by them): use Debian's: PYTHON=/usr/bin/python3 (apt-get install python3-venv)"
done_phase "root; $("$real" -V 2>&1) at $real runs as an ordinary account"

# --- share: make test's shortcut: the packages a venv set up from the same kit already installed -------
mkdir -p "$HUB_PREFIX"
chmod 0755 "$HUB_PREFIX"
minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
if [ -n "$SHARE_FROM" ] && [ ! -x "$HUB_PREFIX/venv/bin/python" ] && [ -x "$SHARE_FROM/bin/python" ] \
   && [ "$(minor "$SHARE_FROM/bin/python")" = "$(minor "$real")" ]; then
  phase share
  v=$(minor "$real")
  "$real" -m venv --without-pip "$HUB_PREFIX/venv"       # pip too comes from the shared venv
  site=$HUB_PREFIX/venv/lib/python$v/site-packages
  # the packages: hard links where both sit on one file system (pip replaces a file, never writes into one), else
  # copies; share/ and etc/ (kernel spec, Jupyter's settings, which set-up rewrites in place): always copies
  cp -al "$SHARE_FROM/lib/python$v/site-packages/." "$site/" 2>/dev/null \
    || { rm -rf "$site" && mkdir -p "$site" && cp -a "$SHARE_FROM/lib/python$v/site-packages/." "$site/"; }
  for d in share etc; do
    if [ -d "$SHARE_FROM/$d" ]; then mkdir -p "$HUB_PREFIX/venv/$d" && cp -a "$SHARE_FROM/$d/." "$HUB_PREFIX/venv/$d/"; fi
  done
  # the shared venv's own install of this package is a link to its checkout, and its trust store is its own
  rm -rf "$site"/__editable__* "$site"/explainer-*.dist-info "$site/explainer" "$HUB_PREFIX/venv/share/jupyter/explainer-trust"
  old=$(cd "$SHARE_FROM" && pwd)
  for f in "$SHARE_FROM"/bin/*; do                 # console scripts: the same, started by this venv's python
    name=$(basename "$f")
    case $name in python*|activate*|Activate*) continue ;; esac
    if head -c 2 "$f" | grep -q '^#!' && head -n 1 "$f" | grep -q "^#!$old/bin/python"; then
      sed "1s|^#!$old/bin/python[0-9.]*|#!$HUB_PREFIX/venv/bin/python|" "$f" >"$HUB_PREFIX/venv/bin/$name"
      chmod 0755 "$HUB_PREFIX/venv/bin/$name"
    fi
  done
  done_phase "$HUB_PREFIX/venv made with $real, holding the packages $SHARE_FROM installed from the same kit"
fi

# --- venv: as `make lab` builds it, with the hub extra and a copy of the package ---------------------
phase venv
VENV=$HUB_PREFIX/venv PYTHON=$real EXTRAS=hub PACKAGE=copy WHEELHOUSE=$WHEELHOUSE scripts/setup.sh lab \
  | sed -u 's/^setup: /setup-hub: [venv] /'
phase venv
done_phase "$HUB_PREFIX/venv: $("$HUB_PREFIX/venv/bin/jupyterhub" --version 2>/dev/null | tail -n 1 | sed 's/^/jupyterhub /')"

# --- proxy: configurable-http-proxy from npm (or the kit) --------------------------------------------
phase proxy
proxy=$HUB_PREFIX/proxy/node_modules/.bin/configurable-http-proxy
if [ -x "$proxy" ] && "$proxy" --version 2>/dev/null | grep -qx 5.3.0; then
  done_phase "$CHP already in $HUB_PREFIX/proxy"
else
  command -v node >/dev/null || fail "node is missing (configurable-http-proxy runs on it): apt-get install nodejs npm"
  TMPD=$(mktemp -d)
  if [ -n "$WHEELHOUSE" ]; then
    [ -f "$WHEELHOUSE/$CHP_KIT" ] || fail "$WHEELHOUSE has no $CHP_KIT: collect the kit again with make wheelhouse (online, once)"
    cp "$WHEELHOUSE/$CHP_KIT" "$TMPD/"                # checked against the kit's manifest, then unpacked
    "$real" -c 'import hashlib, json, sys; f = next(f for f in json.load(open(sys.argv[1]))["files"] if f["file"] == sys.argv[3])
sys.exit(hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest() != f["sha256"])' \
      "$WHEELHOUSE/manifest.json" "$TMPD/$CHP_KIT" "$CHP_KIT" || fail "$CHP_KIT differs from the kit's manifest: copy the kit again"
    tar xzf "$TMPD/$CHP_KIT" -C "$TMPD"
    how="from the kit ($CHP_KIT)"
  else
    command -v npm >/dev/null || fail "npm is missing: apt-get install npm (or set up from the kit: make hub WHEELHOUSE=DIR)"
    npm install --prefix "$TMPD" --no-fund --no-audit --loglevel=error "$CHP" >/dev/null || fail "npm install $CHP failed"
    how="from npm"
  fi
  rm -rf "$HUB_PREFIX/proxy"
  mkdir -p "$HUB_PREFIX/proxy"
  cp -r "$TMPD/node_modules" "$HUB_PREFIX/proxy/"
  "$proxy" --version >/dev/null || fail "$proxy does not run"
  done_phase "$CHP in $HUB_PREFIX/proxy $how"
fi

# --- notebooks: what each learner's account starts with ---------------------------------------------
phase notebooks
rm -rf "$HUB_PREFIX/notebooks.new"
mkdir -p "$HUB_PREFIX/notebooks.new/workshop"
cp notebooks/*.ipynb notebooks/*.md "$HUB_PREFIX/notebooks.new/"
cp notebooks/workshop/exercises.ipynb "$HUB_PREFIX/notebooks.new/workshop/"
rm -rf "$HUB_PREFIX/notebooks"
mv "$HUB_PREFIX/notebooks.new" "$HUB_PREFIX/notebooks"
done_phase "$(find "$HUB_PREFIX/notebooks" -type f | wc -l) files in $HUB_PREFIX/notebooks (the exercises without their solutions)"

# --- access: readable and runnable by every account, writable by root only ---------------------------
phase access
chown -R root:root "$HUB_PREFIX"
chmod -R u+rwX,go+rX,go-w "$HUB_PREFIX"
runuser -u nobody -- "$HUB_PREFIX/venv/bin/python" -c 'import explainer, jupyterhub, torch' \
  || fail "the user nobody cannot import explainer, jupyterhub and torch from $HUB_PREFIX/venv"
done_phase "$HUB_PREFIX: root's, read and run by every account (checked as nobody)"

say "ready in $((SECONDS - T0)) s: python -m explainer hub serve   (or $HUB_PREFIX/venv/bin/python -m explainer hub serve)"
