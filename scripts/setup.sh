#!/usr/bin/env bash
# Sets up everything explainer needs on a fresh Debian-like machine:
#   a virtual environment in .venv with torch==2.13.0 (CPU wheel), the package and its extras,
#   and the system binaries (graphviz `dot`; for tests also Debian's chromium) via apt when missing.
# Usage: scripts/setup.sh [lab|test]
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-test}
PY=${PYTHON:-python3}
VENV=.venv

apt_install() {  # apt_install BINARY PACKAGE...
  local bin=$1; shift
  command -v "$bin" >/dev/null 2>&1 && return 0
  echo "setup: '$bin' is missing; installing Debian package(s) $* with apt-get" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo -n"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get here. Install $* with your package manager (or conda: python-graphviz) and re-run." >&2
    exit 1
  fi
  if [ -z "${_APT_UPDATED:-}" ]; then
    $sudo apt-get update -qq </dev/null >/dev/null || { echo "setup: apt-get update failed; install $* by hand." >&2; exit 1; }
    _APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null \
    || { echo "setup: could not install $* (need root or passwordless sudo); install it by hand and re-run." >&2; exit 1; }
}

apt_install dot graphviz
if [ "$want" = test ]; then
  command -v chromium >/dev/null 2>&1 || apt_install chromium chromium fonts-dejavu-core
  # --backend hosts tests (root only; they skip elsewhere) need iproute2's `ip`
  if [ "$(id -u)" -eq 0 ]; then command -v ip >/dev/null 2>&1 || apt_install ip iproute2; fi
fi

stamp=$VENV/.explainer-$want-$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  [ -x $VENV/bin/python ] || $PY -m venv $VENV
  # torch first and pinned: the CPU wheel of exactly this version is on the machine's disk.
  log=$(mktemp)
  pip_q() { $VENV/bin/pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; exit 1; }; }
  pip_q torch==2.13.0
  if [ "$want" = test ]; then extras="test,hf,notebooks,docs,lint"; else extras="notebooks"; fi
  pip_q -e ".[$extras]"
  rm -f "$log"
  $VENV/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
  rm -f $VENV/.explainer-$want-*
  touch "$stamp"
fi
# Static-HTML export of notebooks (browser test): the widget html-manager and require.js, from the npm registry.
js=$VENV/share/explainer-js
if [ "$want" = test ] && [ ! -f $js/dist/embed-amd.js ]; then
  command -v npm >/dev/null 2>&1 || apt_install npm npm
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @jupyter-widgets/html-manager@1.0.15 requirejs@2.3.8 >/dev/null </dev/null \
     && tar xzf jupyter-widgets-html-manager-1.0.15.tgz && mkdir -p req && tar xzf requirejs-2.3.8.tgz -C req) \
    || { echo "setup: npm pack of @jupyter-widgets/html-manager failed" >&2; rm -rf "$tmp"; exit 1; }
  mkdir -p $js && cp -r "$tmp/package/dist" $js/ && cp "$tmp/req/package/require.js" $js/
  rm -rf "$tmp"
fi
echo "setup: ready ($want): $($VENV/bin/python -m explainer version)"
