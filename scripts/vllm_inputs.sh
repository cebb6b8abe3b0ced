#!/usr/bin/env bash
# Build the folder the GPU machine needs for `python -m gpu_check vllm-run` (run it here, on
# the workstation, with network; the GPU machine has none). A second run reuses the downloads.
#   scripts/vllm_inputs.sh [DEST]          DEST defaults to .vllmcarry (list it in .git/info/exclude
#                                          and name it in the run's carry)
#   SPECRACE_VLLM_VERSION=0.33.0 ...       another vLLM release (default 0.24.0); 0.34.0 and later
#                                          have MRv2 only: run there with RUN_ARGS=--runner v2
#   SRC_REV=HEAD ...                       src/ from that commit (git archive), not the work tree,
#                                          so uncommitted edits in a shared tree stay behind
#   WHEEL_CACHE=dir ...                    where vLLM's wheel is looked for (and downloaded to if
#                                          absent; default .cache/wheels): another checkout's
#                                          cache is only read when the wheel is there
#   TRITON_TGZ=path/triton_cache.tgz ...   a Triton cache from an earlier call (SAVE_TRITON=1 in
#                                          run.sh): MRv2 compiles its kernels cold, 165-183 s
#   PACK=path/payload.tar.xz ...           also one xz tar, half the carry (14 MB for 0.34.0, not
#                                          27): vLLM already unpacked and adjusted, the wheels
#                                          already installed (cp312), this folder with an empty
#                                          zip and no wheels so carry.prepare finds both done. On
#                                          the GPU machine, carried: python3 -c "import tarfile;
#                                          tarfile.open('PAYLOAD').extractall('/')" then
#                                          cd /tmp/specrace-carry-<V> && ... bash run.sh
# DEST then holds (gpu_check/vllm/carry.py says what each part stands in for):
#   vllm-<V>.zip  the wheel's .py files + dist-info: no .so, no vendored headers, no tuned JSON
#   whl/          the small wheels `import vllm` needs that the GPU image lacks, pinned, + simpy
#   stubs/        import stubs for the structured-output backends (never used by the run)
#   src/          this checkout's sim/, gpu_check/ and specrace/ (the code the GPU machine runs;
#                 specrace/ holds the vLLM plugin vllm-plugin-bench measures)
#   run.sh        scripts/vllm_device.sh
#   bench.sh      scripts/vllm_plugin_bench.sh (vllm-plugin-bench in one device call)
#   COMMIT        the commit src/ is (SRC_REV), or HEAD's with "+dirty" when the tree had edits
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="$(realpath -m "${1:-$repo/.vllmcarry}")"
version="${SPECRACE_VLLM_VERSION:-0.24.0}"
py="${PYTHON:-$repo/.venv/bin/python}"
test -x "$py" || py=python3
cache="${WHEEL_CACHE:-$repo/.cache/wheels}"
mkdir -p "$dest/whl"
[[ -d "$cache" ]] || mkdir -p "$cache"

# 1. vLLM's wheel (about 280 MB, once), reduced to its Python files
wheel="$(ls "$cache"/vllm-"$version"-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$wheel" ]]; then
    "$py" -m pip download -q "vllm==$version" --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$cache"
    wheel="$(ls "$cache"/vllm-"$version"-*.whl | head -n1)"
fi
"$py" - "$wheel" "$dest/vllm-$version.zip" <<'PY'
import re
import sys
import zipfile

src, dst = sys.argv[1], sys.argv[2]
drop = re.compile(
    r"\.so$|^vllm/vllm-rs|/include/|\.jpg$|^vllm/entrypoints/serve/instrumentator/static/"
    r"|^vllm/model_executor/layers/fused_moe/configs/.*\.json$"
    r"|^vllm/model_executor/layers/quantization/utils/configs/.*\.json$"
    r"|^vllm/kernels/helion/configs/.*\.json$"
)
n = 0
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
    for item in zin.infolist():
        if item.is_dir() or drop.search(item.filename):
            continue
        zout.writestr(item, zin.read(item.filename))
        n += 1
print(f"vllm_inputs: {n} files of {src.rsplit('/', 1)[-1]} -> {dst}")
PY

# 2. what `import vllm` + `vllm.LLM` need beyond the GPU image (pins: vLLM 0.24.0's import chain
#    as resolved in the conformance environment; the image has torch, numpy, transformers, ...)
rm -f "$dest"/whl/*.whl
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_34_x86_64 -d "$dest/whl" \
    annotated-types==0.8.0 cachetools==8.0.2 cbor2==6.3.0 compressed-tensors==0.17.0 \
    fastapi==0.136.3 starlette==1.10.0 loguru==0.7.3 msgspec==0.23.0 openai==3.57.0 \
    httpx2==2.16.2 httpcore2==2.16.2 jiter==0.19.0 sniffio==1.3.1 truststore==0.10.5 \
    idna==3.20 openai-harmony==0.0.8 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 \
    pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0 typing-inspection==0.4.5 \
    typing_extensions==4.16.0 simpy==4.1.2 gguf==0.19.0  # gguf: 0.23.0 imports it at load

# 3. stubs and this checkout's code
rm -rf "$dest/stubs" "$dest/src"
mkdir -p "$dest/src"
(cd "$repo" && PYTHONPATH="$repo" "$py" -c \
    "import sys; from pathlib import Path; from gpu_check.vllm.carry import write_stubs; write_stubs(Path(sys.argv[1]))" \
    "$dest/stubs")
if [[ -n "${SRC_REV:-}" ]]; then
    git -C "$repo" archive "$SRC_REV" sim gpu_check specrace | tar -C "$dest/src" -xf -
    git -C "$repo" rev-parse "$SRC_REV" > "$dest/COMMIT"
else
    tar -C "$repo" --exclude=__pycache__ -cf - sim gpu_check specrace | tar -C "$dest/src" -xf -
    if ! rev="$(git -C "$repo" rev-parse HEAD 2>/dev/null)"; then
        rev=uncommitted
    elif [[ -n "$(git -C "$repo" status --porcelain -- sim gpu_check specrace)" ]]; then
        rev="$rev+dirty"  # src/ holds edits that no commit has
    fi
    echo "$rev" > "$dest/COMMIT"
fi
cp "$repo/scripts/vllm_device.sh" "$dest/run.sh"
cp "$repo/scripts/vllm_plugin_bench.sh" "$dest/bench.sh"
rm -f "$dest/triton_cache.tgz"
if [[ -n "${TRITON_TGZ:-}" ]]; then cp "$TRITON_TGZ" "$dest/triton_cache.tgz"; fi
du -sh "$dest"

# 4. optional: the same as one payload, unpacked where carry.prepare would unpack it
if [[ -n "${PACK:-}" ]]; then
    stage="$(mktemp -d)"; trap 'rm -rf "$stage"' EXIT
    work="$stage/tmp/specrace-vllm"; skel="$stage/tmp/specrace-carry-$version"
    mkdir -p "$work" "$skel/whl"
    PYTHONPATH="$repo" "$py" - "$dest/vllm-$version.zip" "$work/vllm-$version" <<'PY'
import sys
import zipfile
from pathlib import Path

from gpu_check.vllm.carry import apply_changes

src, tree = sys.argv[1], Path(sys.argv[2])
zipfile.ZipFile(src).extractall(tree)
apply_changes(tree)
(tree / ".done").write_text("ok\n")  # carry.prepare: already unpacked
PY
    "$py" -m pip install -q --no-deps --no-compile --target "$work/site" --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 "$dest"/whl/*.whl
    rm -rf "$work/site/bin"
    cp -r "$dest/stubs" "$dest/src" "$dest/run.sh" "$dest/bench.sh" "$dest/COMMIT" "$skel/"
    [[ -f "$dest/triton_cache.tgz" ]] && cp "$dest/triton_cache.tgz" "$skel/"
    "$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1], 'w').close()" \
        "$skel/vllm-$version.zip"  # find_zip's name; the tree is already there
    find "$stage" -name __pycache__ -prune -exec rm -rf {} +
    tar -C "$stage" -cf - tmp | xz -9e > "$PACK"
    ls -la "$PACK"
fi
