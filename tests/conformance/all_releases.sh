#!/usr/bin/env bash
# The release-rule comparison (release_rules.py --compare) for every modelled vLLM release,
# summarised in data/conformance/releases.json: per release, per fact, whether sim.resolve's
# premise held in that release's source. Fetches each release once (fetch_release.sh, about
# 280 MB each, one at a time). Pure AST over the sources: any python with this repo's deps.
#   VERSIONS="0.27.1 0.33.0" bash tests/conformance/all_releases.sh   (default: all modelled)
#   CACHE=DIR   where wheels and unpacked trees live (default: the repository's .cache)
#   PYTHON=...  interpreter (default: .venv/bin/python, else python3)
#   ASCEND_VERSIONS="0.23.0.post1"  vllm-ascend PyPI releases whose facts are checked from their
#                   sdist (fetch_ascend.sh, about 15 MB each) -> data/conformance/ascend.json
#                   "releases"; empty: none
#   ASCEND_GIT=DIR  a vllm-ascend clone: also check the facts that name a commit (main, the
#                   releases/v0.23.0 branch) -> ascend.json "facts" (else those are kept as they are)
#   SCHED_VERSIONS="0.23.0 0.24.0 0.28.0 0.33.0"  releases for the scheduler suite (it needs the
#                   V1 InputBatch: no 0.34.0); empty: skip it
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${CACHE:-$repo/.cache}"
py="${PYTHON:-$repo/.venv/bin/python}"
test -x "$py" || py=python3
cd "$repo"
versions="${VERSIONS:-$("$py" -c 'from sim.resolve.release_facts import RELEASES; print(*RELEASES)')}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ascend"
if [[ -n "${ASCEND_GIT:-}" ]]; then
    "$py" "$here/ascend_rules.py" "$ASCEND_GIT" > "$tmp/ascend/git.json"
fi
for av in ${ASCEND_VERSIONS-0.23.0.post1}; do
    bash "$here/fetch_ascend.sh" "$av" "$cache"
    "$py" "$here/ascend_rules.py" --sdist "$cache/wheels/vllm_ascend-$av.tar.gz" \
        > "$tmp/ascend/release-$av.json"
done
"$py" - "$tmp/ascend" "$repo/data/conformance/ascend.json" <<'PY'
import json
import os
import sys
from pathlib import Path


def write_json(path: Path, obj: object) -> None:  # committed data: a plain atomic write
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, path)

src, out = Path(sys.argv[1]), Path(sys.argv[2])
old = json.loads(out.read_text()) if out.is_file() else {}
git = src / "git.json"
facts = json.loads(git.read_text())["facts"] if git.is_file() else old.get("facts", {})
releases = dict(old.get("releases", {}))
for f in sorted(src.glob("release-*.json")):
    d = json.loads(f.read_text())
    releases[d.pop("version")] = d
held = all(v["held"] for v in facts.values()) and all(r["all_held"] for r in releases.values())
write_json(out, {"all_held": held, "facts": facts, "releases": releases})
print(f"wrote {out}: vllm-ascend releases {', '.join(releases) or 'none'}, all held: {held}")
sys.exit(0 if held else 1)
PY
for v in $versions; do
    PIP="${PIP:-$py -m pip}" bash "$here/fetch_release.sh" "$v" "$cache"
    "$py" "$here/release_rules.py" --compare "$cache/vllm-$v" > "$tmp/$v.json"
done
"$py" - "$tmp" "$repo/data/conformance/releases.json" <<'PY'
import json
import os
import sys
from pathlib import Path


def write_json(path: Path, obj: object) -> None:  # committed data: a plain atomic write
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, path)

src, out = Path(sys.argv[1]), Path(sys.argv[2])
releases = {}
for f in sorted(src.glob("*.json"), key=lambda p: tuple(int(x) for x in p.stem.split("."))):
    d = json.loads(f.read_text())
    releases[d["version"]] = {
        "all_held": d["all_held"],
        "facts": {
            name: {"held": row["held"], "rules": row["rules"], "file": row["source"]["file"],
                   "line": row["source"]["line"], "value": row["source"]["value"]}
            for name, row in d["facts"].items()
        },
    }
old = json.loads(out.read_text())["releases"] if out.is_file() else {}
old.update(releases)
write_json(out, {"generated_by": "tests/conformance/all_releases.sh", "releases": old})
bad = [v for v, r in old.items() if not r["all_held"]]
print(f"wrote {out}: {len(old)} releases, premises broken in: {', '.join(bad) or 'none'}")
sys.exit(1 if bad else 0)
PY

# The scheduler suite (test_conformance_scheduler.py) over SCHED_STREAMS streams per release of
# SCHED_VERSIONS, in the conformance env -> data/conformance/scheduler.json.
sched_versions="${SCHED_VERSIONS-0.23.0 0.24.0 0.28.0 0.33.0}"
if [[ -z "$sched_versions" ]]; then
    exit 0
fi
bash "$here/setup.sh" > /dev/null
for v in $sched_versions; do
    PIP="${PIP:-$py -m pip}" bash "$here/fetch_release.sh" "$v" "$cache"
    mkdir -p "$tmp/sched"
    "$repo/.cache/vllm-env/bin/python" "$here/scheduler_conformance.py" "$cache/vllm-$v" \
        --streams "${SCHED_STREAMS:-500}" --out "$tmp/sched/$v.json" > /dev/null
done
"$py" - "$tmp/sched" "$repo/data/conformance/scheduler.json" <<'PY'
import json
import os
import sys
from pathlib import Path


def write_json(path: Path, obj: object) -> None:  # committed data: a plain atomic write
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, path)

src, out = Path(sys.argv[1]), Path(sys.argv[2])
old = json.loads(out.read_text())["releases"] if out.is_file() else {}
for f in src.glob("*.json"):
    d = json.loads(f.read_text())
    old[d.pop("version")] = d
releases = dict(sorted(old.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("."))))
write_json(out, {"generated_by": "tests/conformance/all_releases.sh", "releases": releases})
bad = [v for v, r in releases.items() if r["differing_steps"]]
print(f"wrote {out}: {len(releases)} releases, differing steps in: {', '.join(bad) or 'none'}")
sys.exit(1 if bad else 0)
PY
