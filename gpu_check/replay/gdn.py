"""The consequence of each replayed read: run the GDN spec kernel with the consumed count and
with the true count on the same inputs, and measure how far the outputs are apart.

Per step, the GDN batch is the replayed rows that are speculative now (drafts > 0). Rows at
their first speculative step get speculative slots 1..k zeroed, as v0.24.0 zeroes fresh
blocks (docs/mechanism.md §5.4); slot 0 holds the prompt's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from gpu_check.kernels.problem import QWEN35_DIMS, make_spec_problem, rel_err
from sim.model.schedule import Schedule


def add_gdn_columns(
    reads: pd.DataFrame,
    schedule: Schedule,
    device: str,
    dims: dict[str, Any] | None = None,
    impl: str = "triton",
) -> pd.DataFrame:
    """Adds ``gdn_rel_err`` (consumed vs true count) and ``gdn_diverged`` for spec rows."""
    dims = dims or QWEN35_DIMS
    k = schedule.num_speculative_tokens
    out = reads.copy()
    out["gdn_rel_err"] = np.nan
    for step, g in reads.groupby("step", sort=True):
        cur = schedule.steps[int(step)]
        g = g[cur.drafts[g["row"].to_numpy()] > 0]
        if g.empty:
            continue
        seqlens = [int(cur.num_scheduled[r]) for r in g["row"]]
        prob = make_spec_problem(
            seqlens, k, seed=int(step), device=device, counts=g["true_count"].tolist(), **dims
        )
        pool = prob.ssm_state
        first = (g["prev_drafts"] == 0).to_numpy().copy()
        idx = prob.ssm_state_indices
        if first.any():
            pool[idx[torch.as_tensor(first, device=idx.device)][:, 1:].long()] = 0
        outs = []
        for counts in (g["true_count"], g["gpu_consumed"]):
            p = prob.with_pool(pool.clone()).with_counts(torch.tensor(counts.tolist()))
            outs.append(_run(p, impl))
        cu = prob.cu_seqlens.tolist()
        errs = [
            rel_err(outs[1][:, cu[i] : cu[i + 1]], outs[0][:, cu[i] : cu[i + 1]])
            for i in range(len(g))
        ]
        out.loc[g.index, "gdn_rel_err"] = errs
    # Same inputs, same kernel: a right count gives bitwise the same output (docs/timing.md
    # §5.3), so any difference is a divergence (at Qwen3.5 sizes a wrong count gives >= 1.03).
    out["gdn_diverged"] = out["gdn_rel_err"] > 0
    return out


def _run(p, impl: str) -> torch.Tensor:
    if impl == "reference":
        from gpu_check.kernels.reference import spec_gdn_reference

        return spec_gdn_reference(**p.kernel_args())
    from gpu_check.kernels.gdn_spec import spec_gdn_update

    return spec_gdn_update(**p.kernel_args())
