"""``vllm-consequence``: a run's greedy tokens against its async-off reference, joined to the
wrong GDN-consumed reads of its export (CPU, synthetic records, no vLLM)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from repo_root import ROOT

from gpu_check.__main__ import main
from gpu_check.vllm.config import RunConfig
from gpu_check.vllm.consequence import (
    acceptance_histogram,
    consequence,
    first_difference,
    tokens_before,
)
from gpu_check.vllm.export import READ_COLUMNS
from sim.runs.signature import JSON_KEY, is_signed

CFG = RunConfig(max_num_seqs=2, num_requests=4, baseline=False)
NAME = CFG.name  # s2_d0ms
IDS = [f"{NAME}-{i}" for i in range(4)]
A0, A1, A2, A3 = IDS

# rows per step: a prefill carries 1; a row with drafts carries 1..4 (partial acceptance)
STEPS = [
    {"req_ids": [A0, A1], "truth": [1, 1], "spec": {}, "discard": [False, False]},
    {"req_ids": [A1, A0], "truth": [4, 2], "spec": {A0: 3, A1: 3}, "discard": [False, False]},
    {"req_ids": [A0, A2], "truth": [3, 1], "spec": {A0: 3}, "discard": [False, False]},
    {"req_ids": [A2, A3], "truth": [1, 1], "spec": {A2: 3}, "discard": [False, False]},
]
TOKENS = {  # every request's tokens distinct, so a join that pairs the wrong two differs
    A0: [10, 11, 12, 13],
    A1: [20, 21, 22, 23],
    A2: [30, 31, 32, 33],
    A3: [40, 41, 42, 43],
}
REF = {
    A0: [10, 11, 12, 13],  # identical, no wrong read
    A1: [20, 99, 98, 97],  # wrong read at step 1 (after 1 token): differs from index 1 on
    A2: [30, 31, 32, 33],  # wrong read, yet identical
    A3: [40, 41, 42, 77],  # no wrong read, differs (the numerical floor)
}


def _read(step, req, row, true, gpu, wrong=True, consumed=True) -> dict:
    return {"step": step, "req_id": req, "row": row, "prev_row": row, "prev_drafts": 0,
            "drafts": 3, "true_count": true, "cpu_value": 1, "gpu_value": gpu,
            "consumed": consumed, "wrong": wrong, "land_pos": 1, "land_pos_hi": 1,
            "landed_before_moves": False, "n_ops": 3, "margin_ns": 5}  # fmt: skip


def write_run(
    folder: Path,
    ref: dict | None = None,
    *,
    reads=None,
    ref_async=False,
    raw_tokens: dict | bool | None = None,
    ref_name: str | None = None,
) -> Path:
    (folder / "raw").mkdir(parents=True)
    requests = [{"req_id": r, "arrival_step": 0, "prompt_len": 8 + i, "output_len": 4}
                for i, r in enumerate(IDS)]  # fmt: skip
    raw: dict[str, Any] = {
        "schema": "specrace.vllm_raw", "runner": "v1", "mode": "none", "vllm_version": "0.23.0",
        "patch": "none", "config": CFG.to_dict(), "requests": requests, "steps": STEPS,
        "weights": "gdn-bit",
    }  # fmt: skip
    if raw_tokens is not False:
        raw["token_ids"] = raw_tokens or TOKENS
    (folder / "raw" / f"raw_none_{NAME}.json").write_text(json.dumps(raw))
    reference = {"schema": "specrace.vllm_reference", "mode": "none", "async_scheduling": ref_async,
                 "weights": "gdn-bit", "config": CFG.to_dict(), "requests": requests,
                 "token_ids": REF if ref is None else ref}  # fmt: skip
    (folder / "raw" / f"ref_none_{ref_name or NAME}.json").write_text(json.dumps(reference))
    rows = (
        reads
        if reads is not None
        else [
            _read(1, A1, 0, 1, 4),
            _read(1, A0, 1, 4, 4, wrong=False),
            _read(2, A0, 0, 2, 2, wrong=False),
            _read(3, A2, 0, 1, 3),
            _read(3, A3, 1, 1, 4, consumed=False),  # a CPU-wrong value the GDN did not consume
        ]
    )
    export = folder / f"none_{NAME}"
    export.mkdir()
    pd.DataFrame(rows, columns=list(READ_COLUMNS)).astype(READ_COLUMNS).to_parquet(
        export / "observed_vllm.parquet", index=False
    )
    return folder


def test_the_four_counts_and_where_the_divergence_starts(tmp_path: Path) -> None:
    run = write_run(tmp_path / "v0.23.0")
    out = tmp_path / "consequence.json"
    doc = consequence([run], out)
    written = json.loads(out.read_text())
    assert is_signed(out) and written.pop(JSON_KEY)  # a file anywhere carries its proof
    assert written == json.loads(json.dumps(doc))
    assert {k: doc[k] for k in ("diverged_with_wrong", "wrong_requests",
                                "identical_without_wrong", "requests_without_wrong")} == {
        "diverged_with_wrong": 1, "wrong_requests": 2,
        "identical_without_wrong": 1, "requests_without_wrong": 2,
    }  # fmt: skip
    (r,) = doc["runs"]
    (d,) = r["diverging_with_wrong"]
    assert d == {"req_id": A1, "first_diff_index": 1, "wrong_step": 1, "wrong_token_index": 1,
                 "from_the_wrong_step": True, "true_count": 1, "consumed_count": 4,
                 "wrong_reads": 1}  # fmt: skip
    assert r["wrong_not_diverged"] == [A2]
    assert r["diverged_without_wrong"] == [{"req_id": A3, "first_diff_index": 3}]
    assert doc["diverged_from_the_wrong_step"] == 1
    assert r["acceptance"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert r["weights"] == "gdn-bit"


def test_the_join_is_by_request_id_not_by_position(tmp_path: Path) -> None:
    """The reference lists its requests in another order: a join by position would pair A0's
    tokens with A3's and count every request as diverged."""
    reordered = dict(reversed(list(REF.items())))
    assert [first_difference(a, b) for a, b in zip(TOKENS.values(), reordered.values(),
                                                    strict=True)] == [0, 0, 0, 0]  # fmt: skip
    doc = consequence([write_run(tmp_path / "run", reordered)], tmp_path / "c.json")
    assert (doc["diverged_with_wrong"], doc["identical_without_wrong"]) == (1, 1)


def test_a_wrong_read_late_in_a_request_sets_its_token_index(tmp_path: Path) -> None:
    # A0: 1 token at step 0, 2 at step 1 (drafts, count 2): a wrong read at step 2 follows 3
    assert tokens_before({"steps": STEPS}, {A0: 2, A1: 1, A2: 3}) == {A0: 3, A1: 1, A2: 1}
    reads = [_read(2, A0, 0, 2, 4)]
    ref = {**TOKENS, A0: [10, 11, 12, 55]}
    doc = consequence([write_run(tmp_path / "run", ref, reads=reads)], tmp_path / "c.json")
    (d,) = doc["runs"][0]["diverging_with_wrong"]
    assert (d["first_diff_index"], d["wrong_token_index"], d["from_the_wrong_step"]) == (3, 3, True)
    ref = {**TOKENS, A0: [10, 66, 12, 13]}  # differs before the wrong step: not its doing
    doc = consequence([write_run(tmp_path / "run2", ref, reads=reads)], tmp_path / "c2.json")
    assert doc["diverged_from_the_wrong_step"] == 0


def test_first_difference_and_the_acceptance_histogram() -> None:
    assert first_difference([1, 2], [1, 2]) is None
    assert first_difference([1, 2, 3], [1, 2]) == 2
    assert first_difference([5], [6]) == 0
    zeroed = [{"req_ids": ["a", "b"], "truth": [4, 1], "spec": {"a": 3}, "discard": [False, False]}]
    assert acceptance_histogram(zeroed) == {"4": 1}


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: write_run(d, ref_async=True), "async scheduling on"),
        (lambda d: write_run(d, ref_name="s2_d5ms"), "no ref_none_s2_d0ms"),
        (lambda d: write_run(d, raw_tokens=False), "no token_ids"),
        (lambda d: write_run(d, {A0: [1]}), "no tokens for 3 requests"),
        (lambda d: write_run(d, reads=[_read(1, "other-7", 0, 1, 4)]), "does not have"),
        (lambda d: d.mkdir(), "no raw_<mode>_<config>"),
    ],
)
def test_bad_input_is_one_line_naming_it(tmp_path, capsys, setup, message) -> None:
    run = tmp_path / "run"
    setup(run)
    out = tmp_path / "c.json"
    assert main(["vllm-consequence", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(run) in err and "\n" not in err
    assert not out.exists()


def test_a_missing_export_names_the_command_to_run(tmp_path, capsys) -> None:
    run = write_run(tmp_path / "run")
    (run / f"none_{NAME}" / "observed_vllm.parquet").unlink()
    assert main(["vllm-consequence", str(run), "--out", str(tmp_path / "c.json")]) == 2
    assert "vllm-export" in capsys.readouterr().err


def test_the_cli_prints_the_counts(tmp_path, capsys) -> None:
    run = write_run(tmp_path / "run")
    assert main(["vllm-consequence", str(run), "--out", str(tmp_path / "c.json")]) == 0
    assert "1 of 2 requests diverged" in capsys.readouterr().out


class _Engine:
    """What ``drive`` uses of ``LLMEngine``: each step finishes the oldest request, its tokens
    a function of its prompt."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, list[int], int]] = []
        self.engine_core = SimpleNamespace(engine_core=SimpleNamespace(scheduler=SimpleNamespace()))

    def add_request(self, req_id, prompt, sp) -> None:
        self.queue.append((req_id, prompt["prompt_token_ids"], sp.max_tokens))

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def step(self) -> list[SimpleNamespace]:
        if not self.queue:
            return []
        rid, prompt, n = self.queue.pop(0)
        out = SimpleNamespace(token_ids=[(prompt[-1] + i) % 2048 for i in range(n)])
        return [SimpleNamespace(finished=True, request_id=rid, outputs=[out])]


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.SamplingParams = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)


def test_the_reference_pass_keeps_the_request_ids_a_raw_record_has(tmp_path, fake_vllm) -> None:
    """run_reference names requests as run_config's instrumented pass does, so the join finds
    every request; a patch arm's record finds its unpatched configuration's reference."""
    from dataclasses import replace

    from gpu_check.vllm.config import EngineConfig, reference_name, workload
    from gpu_check.vllm.consequence import load_reference
    from gpu_check.vllm.run import run_reference

    llm = SimpleNamespace(llm_engine=_Engine(), reset_prefix_cache=lambda: None)
    cfg = RunConfig(max_num_seqs=2, num_requests=5, output_min=3, output_max=6)
    engine = EngineConfig(mamba_cache_mode="none", async_scheduling=False, weights="gdn-bit")
    res = run_reference(llm, cfg, "none", tmp_path, "0.23.0", engine)
    ref = load_reference(tmp_path / res["file"])
    expected = [f"{cfg.name}-{r['req_index']}" for r in workload(cfg)]  # as run_config's raw
    assert [r["req_id"] for r in ref["requests"]] == expected
    assert sorted(ref["token_ids"]) == sorted(expected)
    assert ref["weights"] == "gdn-bit" and res["out_tokens"] == sum(
        len(t) for t in ref["token_ids"].values()
    )
    assert reference_name(replace(cfg, patch="private-d2h", rep=2)) == cfg.name


def test_a_committed_h200_run_counts_the_requests_vllm_ab_counts(tmp_path: Path) -> None:
    """A real record (vLLM 0.24.0, align, 16 seqs, 15 ms: 4->1 and 1->4 wrong reads) with
    token ids added and an identical reference: the wrong requests are vllm-ab's corrupted
    generations, none diverges, every other request is identical."""
    import gzip

    from gpu_check.vllm.export import export_run, load_raw
    from gpu_check.vllm.outcome import observed

    data = ROOT / "data" / "vllm" / "v0.24.0"
    raw = load_raw(data / "raw" / "raw_align_s16_d15ms.json.gz")
    raw["token_ids"] = {r["req_id"]: [7] * r["output_len"] for r in raw["requests"]}
    run = tmp_path / "v0.24.0"
    (run / "raw").mkdir(parents=True)
    (run / "raw" / "raw_align_s16_d15ms.json.gz").write_bytes(
        gzip.compress(json.dumps(raw).encode())
    )
    ref = {"schema": "specrace.vllm_reference", "async_scheduling": False, "mode": "align",
           "requests": raw["requests"], "token_ids": raw["token_ids"]}  # fmt: skip
    (run / "raw" / "ref_align_s16_d15ms.json").write_text(json.dumps(ref))
    export_run(run / "raw" / "raw_align_s16_d15ms.json.gz", run / "align_s16_d15ms")
    doc = consequence([run], tmp_path / "c.json")
    corrupted = observed(run / "align_s16_d15ms")["corrupted_generations"]
    assert doc["wrong_requests"] == corrupted > 0
    assert (
        doc["diverged_with_wrong"] == 0 and len(doc["runs"][0]["wrong_not_diverged"]) == corrupted
    )
    assert doc["identical_without_wrong"] == doc["requests_without_wrong"] == 192 - corrupted
    # zeroed weights: rows with drafts carry 4 (align: 1 where the state block did not move)
    assert set(doc["runs"][0]["acceptance"]) <= {"1", "4"}
