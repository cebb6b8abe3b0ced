#!/usr/bin/env bash
# Fetch one vLLM release's Python sources, the way setup.sh does, without the conformance venv:
#   .cache/wheels/vllm-<V>-*.whl   (pip download, no dependencies; about 280 MB)
#   .cache/vllm-<V>/               its .py files and dist-info (RECORD last: a whole tree)
# Usage: fetch_release.sh V [CACHE]   (CACHE defaults to the repository's .cache)
# PIP picks the pip (default: python3 -m pip). A second run does nothing.
set -euo pipefail
version="$1"
here="$(cd "$(dirname "$0")" && pwd)"
cache="${2:-$(cd "$here/../.." && pwd)/.cache}"
tree="$cache/vllm-$version"
pip="${PIP:-python3 -m pip}"
if [[ -f "$tree/vllm-$version.dist-info/RECORD" ]]; then
    exit 0
fi
wheels="$cache/wheels"
mkdir -p "$wheels"
wheel="$(ls "$wheels"/vllm-"$version"-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$wheel" ]]; then
    echo "fetch: downloading vllm==$version (about 280 MB)"
    $pip download -q "vllm==$version" --no-deps --only-binary=:all: -d "$wheels"
    wheel="$(ls "$wheels"/vllm-"$version"-*.whl | head -n1)"
fi
echo "fetch: unpacking the .py files of $(basename "$wheel")"
rm -rf "$tree.tmp" "$tree"
python3 - "$wheel" "$tree.tmp" <<'PY'
import sys
import zipfile

wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".py") or ".dist-info/" in n]
    z.extractall(dest, members=names)
print(f"  {len(names)} files")
PY
mv "$tree.tmp" "$tree"
