"""vllm-export on committed H200 records (data/vllm): sim's schedule, the reads, the landings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from load import limit_s
from repo_root import ROOT

from gpu_check.vllm.export import export_run, landing
from sim.model.schedule_io import read_schedule

DATA = ROOT / "data" / "vllm" / "v0.24.0"
# 15 ms of GPU delay: landings before, between and after the row ops, 4->1 and 1->4 errors
RICH = "align_s16_d15ms"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vllm") / RICH
    export_run(DATA / "raw" / f"raw_{RICH}.json.gz", out)
    return out


def test_export_reproduces_the_committed_files(exported: Path) -> None:
    committed = DATA / RICH
    assert (exported / "schedule.json").read_bytes() == (committed / "schedule.json").read_bytes()
    assert json.loads((exported / "export.json").read_text()) == json.loads(
        (committed / "export.json").read_text()
    )
    for name in ("observed_vllm.parquet", "steps_vllm.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(exported / name), pd.read_parquet(committed / name)
        )


def _replay_rows(prev_ids: list[str], ops) -> list[str]:
    rows: list[str | None] = list(prev_ids)
    for op in ops:
        if op.kind == "remove":
            rows[op.a] = None
        elif op.kind == "add":
            if op.a == len(rows):
                rows.append(op.req_id)
            else:
                assert rows[op.a] is None, "add into an occupied row"
                rows[op.a] = op.req_id
        elif op.kind == "move":
            rows[op.b], rows[op.a] = rows[op.a], None
        else:
            rows[op.a], rows[op.b] = rows[op.b], rows[op.a]
    while rows and rows[-1] is None:
        rows.pop()
    assert None not in rows, "a hole left after condense"
    return rows


def test_schedule_is_sims_own_and_its_ops_rebuild_every_layout(exported: Path) -> None:
    schedule = read_schedule(exported / "schedule.json")
    assert schedule.num_speculative_tokens == 3 and schedule.async_scheduling
    assert schedule.scenario["engine"]["mamba_cache_mode"] == "align"
    # step 0 starts from the previous pass's batch, which the record does not hold
    for prev, cur in zip(schedule.steps[1:], schedule.steps[2:], strict=False):
        assert _replay_rows(prev.req_ids, cur.ops) == cur.req_ids, f"step {cur.step}"
        mapped = cur.prev_positions >= 0
        expected = [prev.req_ids.index(r) if r in prev.req_ids else -1 for r in cur.req_ids]
        assert (cur.prev_positions[mapped] == np.asarray(expected)[mapped]).all()


def test_reads(exported: Path) -> None:
    reads = pd.read_parquet(exported / "observed_vllm.parquet")
    assert len(reads) == 4100
    assert (reads["wrong"] == (reads["cpu_value"] != reads["true_count"])).all()  # align
    pairs = reads[reads["wrong"]].groupby(["true_count", "cpu_value"]).size().to_dict()
    assert pairs == {(1, 4): 5, (4, 1): 27}
    assert set(reads["land_pos"].unique()) >= {-1, 0}  # some not landed at the read
    assert reads["margin_ns"].min() >= -1


def test_none_mode_reads_fill_one_and_consume_the_truth(tmp_path: Path) -> None:
    summary = export_run(DATA / "raw" / "raw_none_s16_d0ms.json.gz", tmp_path)
    reads = pd.read_parquet(tmp_path / "observed_vllm.parquet")
    assert summary["wrong"] == 0 and (reads["cpu_value"] == 1).all()
    assert (
        reads.loc[reads["consumed"], "gpu_value"] == reads.loc[reads["consumed"], "true_count"]
    ).all()


def _op(kind, a, b, t0, t1, before, after, group=-1):
    return [kind, a, b, "r", t0, t1, before, after, group]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"landed_at_update_states": True, "t_us_start": 5, "ops": []}, (0, 0, 5)),
        ({"ops": [_op("remove", 0, -1, 10, 11, False, False),
                  _op("add", 0, -1, 20, 21, True, True)]}, (1, 1, 20)),
        ({"ops": [_op("add", 0, -1, 10, 11, False, True)]}, (0, 1, 11)),
        ({"ops": [_op("remove", 0, -1, 1, 2, False, False),
                  _op("move", 3, 0, 10, 15, False, True, 1),
                  _op("move", 2, 1, 10, 15, False, True, 1),
                  _op("swap", 0, 1, 20, 21, True, True)]}, (1, 3, 15)),
        ({"ops": [_op("swap", 0, 1, 1, 2, False, False)], "landed_at_read": True, "t_read": 9},
         (1, 1, 9)),
        ({"ops": [_op("swap", 0, 1, 1, 2, False, False)], "landed_at_read": False}, (-1, -1, -1)),
    ],
)  # fmt: skip
def test_landing_position_from_the_polls(step: dict, expected: tuple) -> None:
    assert landing(step) == expected


def test_the_exported_schedule_feeds_the_existing_replay(exported: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "gpu_check", "replay", "--schedule",
           str(exported / "schedule.json"), "--device", "cpu", "--policy", "align",
           "--out", str(tmp_path)]  # fmt: skip
    res = subprocess.run(
        cmd, cwd=DATA.parents[2], capture_output=True, text=True, timeout=limit_s(300)
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "observed.parquet").is_file()
