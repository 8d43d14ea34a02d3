#!/usr/bin/env bash
# Runs a command with no network: in a new network namespace whose only interface is loopback (needs root,
# util-linux's unshare and iproute2's ip). Where that cannot be made it says why in one line and runs the
# command as it is. `make test` builds .venv-lab from the wheelhouse and runs its notebooks under nbval this way.
# Usage: scripts/no-network.sh COMMAND [ARG...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/no-network.sh COMMAND [ARG...]" >&2; exit 2; }
why=""
if [ "$(id -u)" -ne 0 ]; then why="not root"
elif ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then why="no unshare or ip"
elif ! unshare --net true 2>/dev/null; then why="unshare --net is refused here"
fi
if [ -n "$why" ]; then
  echo "no-network: no network namespace ($why): running with the network: $*" >&2
  exec "$@"
fi
exec unshare --net -- sh -c 'ip link set lo up && exec "$@"' no-network "$@"
