"""One-off: give the project's own committed outputs the proof of ownership current specrace
needs (a format-2 marker with a manifest; a signature in a single file).

The outputs committed under data/ and docs/images/ were written by specrace before outputs
carried a manifest (some before they carried a marker at all), so current specrace refuses to
regenerate them in place. This script is the project's own statement, made once in a commit,
that the files git tracks there are specrace's: for each committed output folder (an old
marker, or an export or vllm-run folder from before markers) it lists the tracked files its
kind wrote there (hand-written README.md files are left out, so they stay unlisted and are
never replaced); it signs docs/images/*, data/check/*.json, the pre-registered rounds'
outcome.json and the vllm-ab, vllm-consequence and schedule-match JSON. It is not a tool for a
user's folders: ownership of those is never asserted after the fact.

    python scripts/seal_committed_outputs.py          # prints what it listed and signed
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from pathlib import Path

from sim.runs.outputs import FORMAT, KINDS, MANIFEST, MARKER, sha256
from sim.runs.signature import sign

ROOT = Path(__file__).resolve().parent.parent
# What each kind wrote into its folder when the committed outputs were made (sim/runs/outputs.py
# before the manifest), without the catch-alls for pictures and temporaries.
WROTE = {
    "field-reports": ("summary.md", "raw.json", "summary.json"),
    "calibrate": ("*.toml", "*.csv"),
    "vllm-run": (
        "summary.json",
        "raw_*.json*",
        "raw/raw_*.json*",
        "*.log",
        "results.csv",
        "timing.csv",
        "op_timing.csv",
    ),
    "vllm-export": ("export.json", "schedule.json", "*.parquet", "agreement.*", "*.png"),
    "vllm-forward": ("forward.csv", "forward.md", "summary.json", "timing-*.toml", "*.png"),
    "vllm-repeatability": ("summary.json", "pairs.csv"),
}

# Single JSON files commands write into data/vllm (vllm-ab, vllm-consequence, schedule_match).
# A pre-registered predictions.json is never edited, so it is never signed.
SIGNED_JSON = ["data/vllm/ab/summary.json", "data/vllm/ab/consequence.json",
               "data/vllm/schedule_match.json"]  # fmt: skip


# Trees of vLLM runs whose own top folder holds the tables over every run under it
# (gpu_check.vllm.tables.write_tables): marked as the vllm-run kind, the tables listed.
TABLES = ("results.csv", "timing.csv", "op_timing.csv", "watch.csv")
TABLE_ROOTS = {"data/vllm": TABLES, "data/vllm/plugin": TABLES}


def tracked(under: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", under], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.split()


def unmarked_outputs() -> dict[Path, str]:
    """Committed vLLM outputs written before folders were marked at all: an export (it has
    export.json) or a vllm-run folder (raw/ records and summary.json)."""
    files = tracked("data/vllm")
    out: dict[Path, str] = {}
    for p in files:
        path = ROOT / p
        if (path.parent / MARKER).exists():
            continue
        if path.name == "export.json":
            out[path.parent] = "vllm-export"
        elif path.name == "summary.json" and (path.parent / "raw").is_dir():
            out[path.parent] = "vllm-run"
    return out


def mark_table_roots(version: str) -> None:
    """The tree roots' tables, as their folders' own (a marker, then each committed table)."""
    for rel, names in TABLE_ROOTS.items():
        folder = ROOT / rel
        if (folder / MARKER).exists():
            continue
        command = "python -m gpu_check vllm-export (the tables over every run under this folder)"
        doc = {"kind": "vllm-run", "version": version, "command": command, "format": FORMAT}
        (folder / MARKER).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        files = [n for n in names if f"{rel}/{n}" in tracked(rel)]
        lines = [json.dumps({"path": n, "sha256": sha256(folder / n)}, sort_keys=True)
                 for n in files]  # fmt: skip
        (folder / MANIFEST).write_text("".join(line + "\n" for line in lines))
        print(f"{rel} (vllm-run tables): {len(files)} listed")


def main() -> None:
    from sim.version import version

    mark_table_roots(version())
    for folder, kind in sorted(unmarked_outputs().items()):  # a marker of the old form first
        command = f"{KINDS[kind]} (committed before outputs were marked)"
        doc = {"kind": kind, "version": version(), "command": command}
        (folder / MARKER).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    markers = sorted(ROOT / p for p in tracked("data") if p.endswith("/" + MARKER))
    markers += [f / MARKER for f in unmarked_outputs()]
    markers = sorted({*markers, *(p for p in (ROOT / "data").rglob(MARKER))})
    folders = {m.parent for m in markers}
    for m in markers:
        folder = m.parent
        doc = json.loads(m.read_text())
        if doc.get("format") == FORMAT:
            continue
        kind = doc["kind"]
        inner = {f for f in folders if f != folder and folder in f.parents}
        files = []
        for p in tracked(str(folder.relative_to(ROOT))):
            path = ROOT / p
            rel = path.relative_to(folder).as_posix()
            if path.name in (MARKER, "README.md") or any(d in path.parents for d in inner):
                continue
            if any(fnmatch.fnmatch(rel, pat) for pat in WROTE[kind]):
                files.append(rel)
        lines = [json.dumps({"path": r, "sha256": sha256(folder / r)}, sort_keys=True)
                 for r in sorted(files)]  # fmt: skip
        (folder / MANIFEST).write_text("".join(line + "\n" for line in lines))
        m.write_text(json.dumps({**doc, "format": FORMAT}, indent=1, sort_keys=True) + "\n")
        unlisted = [p for p in tracked(str(folder.relative_to(ROOT)))
                    if Path(p).name != MARKER and (ROOT / p).parent == folder
                    and (ROOT / p).relative_to(folder).as_posix() not in files]  # fmt: skip
        print(f"{folder.relative_to(ROOT)} ({kind}): {len(files)} listed; left unlisted: "
              f"{', '.join(Path(p).name for p in unlisted) or 'nothing'}")  # fmt: skip
    singles = [*tracked("docs/images"), *tracked("data/check"), *SIGNED_JSON]
    singles += [p for p in tracked("data/vllm/preregistered") if p.endswith("/outcome.json")]
    for p in singles:
        path = ROOT / p
        if path.suffix in (".png", ".svg", ".json"):
            data = path.read_bytes()
            signed = sign(data, path)
            if signed != data:
                path.write_bytes(signed)
                print(f"signed {p}")


if __name__ == "__main__":
    main()
