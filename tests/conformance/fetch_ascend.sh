#!/usr/bin/env bash
# Fetch one vllm-ascend release's sdist from PyPI (vllm-ascend publishes no pure-Python wheel):
#   .cache/wheels/vllm_ascend-<V>.tar.gz   (about 15 MB; ascend_rules.py --sdist reads it as is)
# Usage: fetch_ascend.sh V [CACHE]   (V defaults to 0.23.0.post1; CACHE to the repository's .cache)
# A second run does nothing.
#
# `pip download` of an sdist prepares its metadata, which runs vllm-ascend's setup.py: that needs
# setuptools_scm and a SOC_VERSION (any Ascend SoC name; nothing is built), and with build
# isolation pip would try to build numpy and cmake from source. So the download runs from a
# small venv (.cache/ascend-fetch-env: setuptools, setuptools_scm, wheel) without isolation.
set -euo pipefail
version="${1:-0.23.0.post1}"
here="$(cd "$(dirname "$0")" && pwd)"
cache="${2:-$(cd "$here/../.." && pwd)/.cache}"
wheels="$cache/wheels"
sdist="$wheels/vllm_ascend-$version.tar.gz"
if [[ -f "$sdist" ]]; then
    exit 0
fi
env="$cache/ascend-fetch-env"
if [[ ! -x "$env/bin/python" ]]; then
    python3 -m venv "$env"
    "$env/bin/python" -m pip install -q setuptools setuptools_scm wheel
fi
mkdir -p "$wheels"
echo "fetch: downloading the vllm-ascend==$version sdist (about 15 MB)"
SOC_VERSION="${SOC_VERSION:-ascend910b1}" "$env/bin/python" -m pip download -q --no-deps \
    --no-binary :all: --no-build-isolation "vllm-ascend==$version" -d "$wheels"
test -f "$sdist"
