#!/usr/bin/env bash
# Make the conformance environment from nothing; a second run does nothing.
#   .cache/wheels/vllm-<V>-*.whl   vLLM's wheel (pip download, no dependencies)
#   .cache/vllm-<V>/               its .py files and dist-info only, put on sys.path by the suite
#   .cache/vllm-env/               a venv with requirements.txt (CPU torch, no vllm package)
# <V> is tests/conformance/VLLM_VERSION, or SPECRACE_VLLM_VERSION to try another release.
# .cache/ is git-ignored. PYTHON picks the interpreter for the venv (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${SPECRACE_VLLM_VERSION:-$(tr -d '[:space:]' < "$here/VLLM_VERSION")}"
cache="$repo/.cache"
env="$cache/vllm-env"
tree="$cache/vllm-$version"
py="${PYTHON:-python3}"

# 1. The virtual environment, reinstalled whenever requirements.txt changes.
stamp="$env/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "conformance: installing requirements.txt into $env"
    test -x "$env/bin/python" || "$py" -m venv "$env"
    "$env/bin/python" -m pip install -q -r "$here/requirements.txt"
    echo "$want" > "$stamp"
fi

# 2. vLLM's Python sources, unpacked from the wheel into a temporary folder, then renamed
#    (RECORD is the wheel's last member: its presence means a whole tree).
if [[ ! -f "$tree/vllm-$version.dist-info/RECORD" ]]; then
    wheels="$cache/wheels"
    mkdir -p "$wheels"
    wheel="$(ls "$wheels"/vllm-"$version"-*.whl 2>/dev/null | head -n1 || true)"
    if [[ -z "$wheel" ]]; then
        echo "conformance: downloading vllm==$version (about 280 MB, once)"
        "$env/bin/python" -m pip download -q "vllm==$version" --no-deps \
            --only-binary=:all: -d "$wheels"
        wheel="$(ls "$wheels"/vllm-"$version"-*.whl | head -n1)"
    fi
    echo "conformance: unpacking the .py files of $(basename "$wheel")"
    rm -rf "$tree.tmp" "$tree"
    "$env/bin/python" - "$wheel" "$tree.tmp" <<'PY'
import sys
import zipfile

wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".py") or ".dist-info/" in n]
    z.extractall(dest, members=names)
print(f"  {len(names)} files")
PY
    mv "$tree.tmp" "$tree"
fi
echo "conformance: vLLM $version at $tree, environment $env"
