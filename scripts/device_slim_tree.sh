#!/usr/bin/env bash
# The GPU machine receives this checkout's working tree (tracked and untracked-not-ignored
# files) plus what a call carries, 64 MiB at most. The tracked tree is about 63 MiB, most of it
# recorded vLLM passes a device run never reads, so a vLLM payload (14 MB for 0.34.0) does not
# fit beside it. For the length of the device calls, a sparse checkout leaves the largest
# recorded folders out of the working tree; nothing is deleted from git, and `off` puts every
# file back as committed. Never commit while it is on.
#   scripts/device_slim_tree.sh on    # before the device call(s)
#   scripts/device_slim_tree.sh off   # after them
#   scripts/device_slim_tree.sh size  # MiB that would travel (tracked files present + untracked)
set -euo pipefail
cd "$(dirname "$0")/.."
LEFT_OUT=(/data/vllm/ab/ /data/replay/heldout/ /data/vllm/v0.24.0-closecalls/ /data/vllm/plugin/
          /data/vllm/forward-25/ /data/vllm/forward-26/ /data/vllm/forward-27/ /data/vllm/fixes/
          /data/vllm/forward-28/ /data/vllm/forward-29/ /data/vllm/forward-30/
          /data/vllm/forward-31/)
size() {
    { git ls-files -z; git ls-files -z --others --exclude-standard; } |
        python3 -c "import os,sys; print(round(sum(os.path.getsize(p) for p in sys.stdin.read().split('\0') if p and os.path.isfile(p)) / 2**20, 1), 'MiB travel (before carry)')"
}
case "${1:-}" in
    on)
        if [[ -n "$(git status --porcelain)" ]]; then
            echo "device_slim_tree: the tree has uncommitted changes; commit them first" >&2; exit 1
        fi
        git sparse-checkout set --no-cone '/*' "${LEFT_OUT[@]/#/!}"
        size ;;
    off) git sparse-checkout disable; size ;;
    size) size ;;
    *) echo "usage: scripts/device_slim_tree.sh on|off|size" >&2; exit 2 ;;
esac
