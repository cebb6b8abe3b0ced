"""FULL-cudagraph padding model (docs/mechanism.md §7) and the `python -m gpu_check` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from load import limit_s
from repo_root import ROOT

from gpu_check.padding import capture_sizes, gdn_full_metadata, padding_report, plan_padding

ENV = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_capture_sizes_are_rounded_multiples_of_one_plus_k():
    sizes = capture_sizes(max_num_seqs=256, num_spec=3, max_num_batched_tokens=8192)
    assert sizes[0] == 4 and sizes[-1] == 512 and 288 in sizes
    assert all(s % 4 == 0 for s in sizes) and sizes == sorted(set(sizes))
    assert 252 not in sizes and 264 not in sizes  # 256..512 goes in steps of 16
    # k = 2: 1, 2 -> 3; 4 -> 6; 8 -> 9 ...; the cap min(8*3*2, 512, 8192) = 48.
    assert capture_sizes(8, 2, 8192) == [3, 6, 9, 18, 24, 33, 42, 48]


def test_capture_sizes_with_a_small_token_cap():
    assert capture_sizes(max_num_seqs=1, num_spec=3, max_num_batched_tokens=6) == [4]
    with pytest.raises(ValueError):
        capture_sizes(max_num_seqs=1, num_spec=3, max_num_batched_tokens=3)


def test_72_requests_mtp3_give_288_rows_before_and_72_after():
    report = padding_report(plan_padding(72, 3))
    assert report["num_tokens_padded"] == 288 and report["num_reqs_padded"] == 72
    assert report["before"]["shapes"]["spec_state_indices"] == [288, 4]
    assert report["before"]["shapes"]["spec_query_start_loc"] == [289]
    assert report["after"]["shapes"]["spec_state_indices"] == [72, 4]
    assert report["after"]["shapes"]["num_accepted_tokens"] == [72]
    assert report["fake_rows"] == 216


def test_tail_fill_of_a_padded_batch():
    plan = plan_padding(70, 3)  # 280 tokens -> 288: 2 legitimate pad requests
    rows = [[4 * n + c + 1 for c in range(4)] for n in range(70)]
    after = gdn_full_metadata(plan, "num_reqs", rows, [2] * 70)
    before = gdn_full_metadata(plan, "num_actual_tokens", rows, [2] * 70)
    assert after.batch_size == 72 and before.batch_size == 288
    assert after.spec_state_indices[70:] == [[0, 0, 0, 0]] * 2
    assert after.spec_sequence_masks == [True] * 70 + [False] * 2
    assert after.spec_query_start_loc[-3:] == [280, 280, 280]
    assert after.num_accepted_tokens[69:] == [2, 1, 1]
    assert before.spec_state_indices[:72] == after.spec_state_indices


def test_batches_past_the_largest_capture_size_run_eager():
    report = padding_report(plan_padding(200, 3))  # 800 tokens > 512
    assert not report["full_cudagraph"] and "before" not in report
    with pytest.raises(ValueError, match="max-num-seqs"):
        plan_padding(300, 3)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_check", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=limit_s(120),
        env=ENV | (env or {}),
    )  # fmt: skip


def test_cli_padding_json_without_importing_torch():
    code = (
        "import sys, gpu_check.__main__ as m; rc = m.main(['padding', '--num-reqs', '72', "
        "'--k', '3', '--json']); assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env=ENV)  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["before"]["batch_size"] == 288 and report["after"]["batch_size"] == 72


@pytest.mark.parametrize(
    "args",
    [
        ["padding", "--num-reqs", "0", "--k", "3"],
        ["padding", "--num-reqs", "999", "--k", "3"],
        ["padding", "--k", "3"],
        ["recall", "--impl", "nope"],
        ["recall", "--pairs", "2"],
        ["bogus"],
    ],
)
def test_cli_bad_input_is_one_error_line(args):
    res = _cli(*args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: error:"), res.stderr
    assert "Traceback" not in res.stderr


def test_cli_recall_cpu_json():
    res = _cli("recall", "--device", "cpu", "--num-reqs", "2", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert [r["recall_acc"] for r in rows] == [1.0, 0.0, 0.0, 0.0]
