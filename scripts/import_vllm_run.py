"""A GPU machine's ``vllm-run`` folder (unpacked from ``results_<TAG>.tgz``) into ``data/vllm``:
a new folder laid out as the committed runs are, written by specrace and listed in its manifest.

    python scripts/import_vllm_run.py /tmp/ex/results_0.33.0-watch data/vllm/plugin/v0.33.0-watch
    python -m gpu_check vllm-export data/vllm/plugin/v0.33.0-watch   # then the exports and tables

The source must carry vllm-run's own marker (it is read, never changed). Written: ``summary.json``
as it is, ``run.log`` without Triton's jit_monitor lines, ``raw/raw_*.json.gz`` (gzip level 9, no
name or time in the header, so an import twice is the same bytes). The watch's JSONL files are not
copied: a ``--watch`` pass's wrong reads are in its raw record.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

from sim.errors import SpecraceError
from sim.runs.io import atomic_write, atomic_write_text
from sim.runs.outputs import claim_dir, marker


def import_run(src: Path, dest: Path) -> list[Path]:
    doc = marker(src)
    if doc is None or doc["kind"] != "vllm-run":
        raise SpecraceError(f"{src}: not a folder vllm-run wrote (no vllm-run marker)")
    if dest.exists():
        raise SpecraceError(f"{dest} exists: name a new folder")
    raws = sorted(src.glob("raw_*.json"))
    if not raws:
        raise SpecraceError(f"{src}: no raw_*.json")
    claim_dir(dest, "vllm-run")
    (dest / "raw").mkdir()
    out = [dest / "summary.json", dest / "run.log"]
    atomic_write_text(out[0], (src / "summary.json").read_text())
    log = [x for x in (src / "run.log").read_text().splitlines(True) if "jit_monitor" not in x]
    atomic_write_text(out[1], "".join(log))
    for raw in raws:
        data = gzip.compress(raw.read_bytes(), compresslevel=9, mtime=0)
        path = dest / "raw" / f"{raw.name}.gz"
        atomic_write(path, lambda tmp, data=data: tmp.write_bytes(data))
        out.append(path)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/import_vllm_run.py SRC DEST")
    try:
        for p in import_run(Path(sys.argv[1]), Path(sys.argv[2])):
            print(p)
    except SpecraceError as e:
        sys.exit(f"import_vllm_run: {e}")
