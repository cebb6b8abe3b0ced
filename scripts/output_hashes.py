"""sha256 of the outputs a refactor must not change, one line per file.

    PYTHONPATH=$PWD python scripts/output_hashes.py OUT_DIR > before.txt
    ... change the code ...
    PYTHONPATH=$PWD python scripts/output_hashes.py OUT_DIR2 > after.txt; diff before.txt after.txt

What it runs (small, a minute or two on one core): ``sim run`` of every built-in scenario
under every policy (qwen35-mtp3 at 300 steps, the others at their default steps), ``sim check``
at 2 rows x 4 steps (also compared with the committed data/check oracle), ``sim timeline`` of
that run per policy (its data, and the PNG), the vector tier at three timing points per
scenario x policy, the golden schedule, the vLLM agreement of every committed data/vllm run
(also compared with its committed agreement.json), and the replay's CPU path (its verdict
columns; the host timing columns are the clock's, not ours). ``meta.json`` is hashed without
``git_commit`` and ``versions`` (the only fields that differ between two runs of one commit),
the run marker without its command (it names the output folder) and the manifest without the
rows of ``meta.json``. scripts/output_hashes.37bf5b4.txt is the list of main at 37bf5b4
(before issue #21), made with numpy 2.3.5, pandas 3.1.1, pyarrow 26.0.1, Python 3.11.7; other
library versions may write other Parquet bytes; output_hashes.3dffd10.txt is the list of main
before issue #47 (every scenario), same versions; output_hashes.5c07adf.txt the list after
#47's bug fixes, where only sim check's JSON moved (interleavings now counts every one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
PY = [sys.executable, "-m", "sim"]
SCENARIO, STEPS = "qwen35-mtp3", 300
# Every built-in scenario, each at STEPS for SCENARIO (the list of 37bf5b4) or its own default.
SCENARIOS = {SCENARIO: STEPS, "minimal-race": None}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hash(path: Path) -> str:
    if path.name == "meta.json":
        meta = json.loads(path.read_text())
        meta.pop("git_commit", None)
        meta.pop("versions", None)
        return sha(json.dumps(meta, sort_keys=True).encode())
    if path.name == ".specrace-run.json":  # the marker: its command names the output folder
        marker = json.loads(path.read_text())
        marker.pop("command", None)
        return sha(json.dumps(marker, sort_keys=True).encode())
    if path.name == ".specrace-manifest.jsonl":  # meta.json's own hash holds the commit
        rows = [r for r in path.read_text().splitlines() if '/meta.json"' not in r]
        return sha("\n".join(rows).encode())
    return sha(path.read_bytes())


def tree(label: str, folder: Path) -> list[str]:
    return [
        f"{file_hash(p)}  {label}/{p.relative_to(folder)}"
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def sim(*args: str) -> str:
    done = subprocess.run([*PY, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def run_outputs(out: Path) -> list[str]:
    lines = []
    for name, steps in SCENARIOS.items():
        # SCENARIO keeps the 37bf5b4 labels (run/...); the others are run-NAME/...
        label = "run" if name == SCENARIO else f"run-{name}"
        run = out / label
        extra = ["--steps", str(steps)] if steps else []
        stdout = sim("run", "--scenario", name, "--policy", "all", "--seed", "0", *extra,
                     "--out", str(run), "--force")  # fmt: skip
        lines += [f"{sha(stdout.encode())}  {label}/stdout", *tree(label, run)]
    return lines


def check_outputs(out: Path) -> list[str]:
    path = out / "check-r2-s4-k3.json"
    stdout = sim("check", "--max-rows", "2", "--steps", "4", "--k", "3", "--out", str(path))
    oracle = ROOT / "data" / "check" / "r2-s4-k3.json"
    same = "same" if path.read_bytes() == oracle.read_bytes() else "DIFFERS"
    stdout = re.sub(r"; [0-9.]+ s$", "", stdout, flags=re.M)  # the search's wall time
    stdout = stdout.replace(str(out), "OUT")
    (out / "check.stdout").write_text(stdout)
    return [
        f"{sha(stdout.encode())}  check/stdout",
        f"{file_hash(path)}  check/r2-s4-k3.json ({same} as data/check)",
    ]


def timeline_outputs(out: Path) -> list[str]:
    from sim.explore.timeline import build_timeline
    from sim.model.schedule_io import read_schedule

    run = out / "run"
    schedule = read_schedule(run / "schedule.json")
    lines = []
    # Every policy at the step and request of the unsynced run's first wrong read (a policy
    # without a wrong read has no default step), and each at its own default where it has one.
    first = pd.read_parquet(run / "unsynced" / "reads.parquet")
    first = first[first["gpu_wrong"]].iloc[0]
    for folder in sorted(p for p in run.iterdir() if p.is_dir()):
        trace = pd.read_parquet(folder / "trace.parquet")
        reads = pd.read_parquet(folder / "reads.parquet")
        picks = [(int(first["step"]), str(first["req_id"]))]
        picks += [(None, None)] if (reads["gpu_wrong"] | reads["cpu_wrong"]).any() else []
        for step, req in picks:
            tl = build_timeline(trace, reads, schedule, folder.name, step, req)
            lines.append(_timeline_line(tl, f"{folder.name}@{step or 'default'}"))
    png = out / "timeline"
    sim("timeline", str(run), "--policy", "align", "--out", str(png))
    lines.append(f"{file_hash(png.with_suffix('.png'))}  timeline/align.png")
    return lines


def _timeline_line(tl, label: str) -> str:
    data = {
        "outcomes": [dataclasses.asdict(o) for o in tl.outcomes],
        "verdict": {k: str(v) for k, v in tl.verdict.items()},
        "buffer": tl.buffer.to_csv(index=False),
        "buffer_start": tl.buffer_start,
        "spans": [dataclasses.asdict(s) for s in tl.spans],
        "view": tl.view,
        "windows": [tl.wrong_windows, tl.cpu_only_windows],
    }
    return f"{sha(json.dumps(data, default=int).encode())}  timeline/{label}"


def vector_outputs() -> list[str]:
    from sim.model.params import load_scenario
    from sim.model.policies import POLICIES
    from sim.model.scheduling import build_schedule
    from sim.model.vector import simulate_points

    lines = []
    for scn_name, steps in SCENARIOS.items():
        scn = load_scenario(scn_name)
        schedule = build_schedule(scn, 0, steps or scn.default_steps)
        base = scn.timing
        points = [
            base,
            dataclasses.replace(base, dma_land_delay_ns=400_000),
            dataclasses.replace(base, worker_swap_ns=120_000, gpu_forward_ns_base=500_000),
        ]
        label = "vector" if scn_name == SCENARIO else f"vector-{scn_name}"
        for name, pol in POLICIES.items():
            res = simulate_points(schedule, points, pol, 0)
            assert res.reads is not None
            blob = res.reads.to_csv(index=False) + json.dumps(res.summaries, sort_keys=True)
            blob += json.dumps([res.gpu_wrong_steps.tolist(), res.gpu_wrong_by_kind])
            lines.append(f"{sha(blob.encode())}  {label}/{name}")
    return lines


def golden_outputs(out: Path) -> list[str]:
    folder = out / "golden"
    sim("schedule", "--scenario", "minimal-race", "--seed", "0", "--out", str(folder))
    path = folder / "schedule.json"
    golden = ROOT / "data" / "golden" / "minimal-race.schedule.json"
    same = "same" if path.read_bytes() == golden.read_bytes() else "DIFFERS"
    return [f"{file_hash(path)}  golden/minimal-race.schedule.json ({same} as data/golden)"]


def agreement_outputs(out: Path) -> list[str]:
    from gpu_check.vllm.agreement import compare_dir
    from gpu_check.vllm.tables import run_folders

    data = ROOT / "data" / "vllm"
    lines = []
    names = ("schedule.json", "steps_vllm.parquet", "observed_vllm.parquet", "export.json")
    for folder in run_folders(data):
        if not all((folder / name).exists() for name in names):
            continue  # a run with no export (MRv2: no CPU counts to replay)
        dst = out / "vllm" / folder.relative_to(data)
        dst.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy(folder / name, dst / name)
        rep = compare_dir(dst)
        committed = json.loads((folder / "agreement.json").read_text())
        same = "same" if rep == committed else "DIFFERS"
        rel = folder.relative_to(data)
        lines.append(f"{file_hash(dst / 'agreement.json')}  vllm/{rel}/agreement.json ({same})")
        lines.append(f"{file_hash(dst / 'agreement.parquet')}  vllm/{rel}/agreement.parquet")
    return lines


def replay_outputs() -> list[str]:
    from gpu_check.replay import OBSERVED_COLUMNS, ReplayConfig, ScriptedCounts, replay
    from sim.model.params import load_scenario
    from sim.model.policies import POLICIES
    from sim.model.scheduling import build_schedule

    verdict_cols = OBSERVED_COLUMNS[: OBSERVED_COLUMNS.index("land_predicted_ns")]
    lines = []
    for scn_name, steps in (("minimal-race", None), (SCENARIO, 60)):
        scn = load_scenario(scn_name)
        schedule = build_schedule(scn, 0, steps or scn.default_steps)
        n = len(schedule.steps) - 1
        rng = np.random.default_rng(7)
        for name, pol in POLICIES.items():
            plan = [int(rng.integers(-1, len(s.ops) + 1)) for s in schedule.steps[1:]]
            dev = ScriptedCounts(schedule.max_num_reqs, plan)
            df = replay(schedule, pol, dev, ReplayConfig(scn.timing))
            assert len(plan) == n
            blob = df[verdict_cols].to_csv(index=False)
            lines.append(f"{sha(blob.encode())}  replay/{scn_name}/{name}")
    return lines


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    lines = run_outputs(out)
    lines += check_outputs(out)
    lines += timeline_outputs(out)
    lines += vector_outputs()
    lines += golden_outputs(out)
    lines += agreement_outputs(out)
    lines += replay_outputs()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
