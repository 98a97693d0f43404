#!/bin/sh
# Installs what the build, tests and benchmark need and this machine lacks (Debian + PyPI).
# Idempotent and quiet when everything is present; safe to run on every `make run` / `make test`.
set -e
need_apt=""
command -v cc >/dev/null 2>&1 || need_apt="$need_apt build-essential"
# OpenBLAS for the benchmark's naive-attention peer. A cblas.h alone is not enough: Debian's
# libblas-dev puts the slow netlib one at /usr/include/<arch>/cblas.h.
has_openblas=""
for f in /usr/include/*/openblas-pthread/cblas.h /usr/include/*/openblas-openmp/cblas.h /usr/include/openblas/cblas.h; do
  if [ -e "$f" ]; then has_openblas=1; fi
done
[ -n "$has_openblas" ] || need_apt="$need_apt libopenblas-dev"
if [ -n "$need_apt" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing$need_apt"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need_apt >/dev/null
  else
    echo "setup: missing$need_apt (install them; continuing without)"
  fi
fi
if command -v python3 >/dev/null 2>&1; then
  if ! python3 -c "import numpy, pytest, ml_dtypes" >/dev/null 2>&1; then
    echo "setup: pip installing numpy pytest ml_dtypes"
    python3 -m pip install -q numpy pytest ml_dtypes || echo "setup: pip install failed; Python tests will be skipped"
  fi
  # `make test` (setup.sh test) also wants torch and transformers for the autograd, flash_attn,
  # Transformers and ring-attention tests. PyPI has only the CUDA build of torch (~3.5 GB with its
  # nvidia wheels, about 3 minutes here); the tests that need it skip if this fails.
  if [ "${1:-}" = test ] && ! python3 -c "import torch, transformers" >/dev/null 2>&1; then
    echo "setup: pip installing torch transformers (for the Python tests)"
    python3 -m pip install -q torch transformers || echo "setup: torch/transformers install failed; their tests will be skipped"
  fi
fi
