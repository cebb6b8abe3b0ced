"""The associative-recall consequence: the true count recalls the prompt, a wrong one loses it."""

from __future__ import annotations

import pytest

from gpu_check.recall import CPU_CONFIG, RecallConfig, run_recall

pytestmark = [
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Triton is not supported:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning"),
]


def _check_rows(rows, out_tol):
    true = [r for r in rows if r["count_used"] == 1]
    wrong = [r for r in rows if r["count_used"] != 1]
    assert true and wrong
    for r in true:
        assert r["recall_acc"] == 1.0 and r["next_step_recall_acc"] == 1.0
        assert r["out_rel_err"] < out_tol and r["slot0_state_rel_change"] < 1e-6
        assert r["conv_out_rel_err"] == 0.0
    for r in wrong:  # PR #45100: the prompt is lost, also for the next (correct) step
        assert r["recall_acc"] == 0.0 and r["next_step_recall_acc"] == 0.0
        assert r["out_rel_err"] > 0.99 and r["slot0_state_rel_change"] > 0.99
        assert r["conv_out_rel_err"] > 0.1


def test_reference_recall_true_vs_wrong_counts():
    result = run_recall(CPU_CONFIG)
    assert [r["count_used"] for r in result["rows"]] == [1, 2, 3, 4]
    _check_rows(result["rows"], out_tol=1e-5)


def test_kernels_recall_like_the_reference(device):
    cfg = RecallConfig(num_reqs=2, num_spec=2, num_pairs=4, H=1, HV=2, K=8, V=8)
    result = run_recall(cfg, device=device, impls=("reference", "triton", "fla"))
    assert {r["impl"] for r in result["rows"]} == {"reference", "triton", "fla"}
    _check_rows(result["rows"], out_tol=1e-5)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="pairs"):
        run_recall(RecallConfig(num_pairs=64, K=32))
