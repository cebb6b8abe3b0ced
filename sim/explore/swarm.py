"""Swarm testing (TigerBeetle's VOPR): a seed draws a whole timing parameter set.

The ranges span GPU-bound, balanced and CPU-bound regimes around the defaults of
docs/mechanism.md §8 and docs/timing.md §6, with host stalls and jitter.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.model.params import TimingParams


def draw_timing(base: TimingParams, seed: int) -> TimingParams:
    rng = np.random.default_rng([seed, 0x5A4D])

    def scale(mean: int, lo: float, hi: float) -> int:
        return int(mean * np.exp(rng.uniform(np.log(lo), np.log(hi))))

    return replace(
        base,
        gpu_forward_ns_base=scale(base.gpu_forward_ns_base, 0.3, 2.0),
        gpu_drafter_ns=scale(base.gpu_drafter_ns, 0.5, 2.0),
        gpu_sample_ns=scale(base.gpu_sample_ns, 0.5, 2.0),
        dma_land_delay_ns=int(rng.uniform(5_000, 45_000)),
        engine_schedule_ns_per_req=scale(base.engine_schedule_ns_per_req, 0.3, 3.0),
        engine_update_ns_per_req=scale(base.engine_update_ns_per_req, 0.3, 3.0),
        engine_output_ipc_ns=scale(base.engine_output_ipc_ns, 0.2, 3.0),
        engine_input_ipc_ns=scale(base.engine_input_ipc_ns, 0.2, 3.0),
        worker_add_ns=scale(base.worker_add_ns, 0.3, 2.0),
        worker_swap_ns=scale(base.worker_swap_ns, 0.5, 3.0),
        worker_condense_move_ns=scale(base.worker_condense_move_ns, 0.5, 3.0),
        worker_prepare_inputs_ns=scale(base.worker_prepare_inputs_ns, 0.3, 3.0),
        worker_stall_prob=float(rng.uniform(0.0, 0.2)),
        worker_stall_ns=scale(base.worker_stall_ns, 0.2, 3.0),
        jitter_frac=float(rng.uniform(0.0, 0.5)),
    )
