"""A policy chosen by hand against the code path the configuration resolves to.

:func:`check_policy` returns ``None`` when the choice is consistent, else one line saying
what the configuration does instead (the risk command prints it as its error; ``sim run``
can print it before simulating). :func:`setup_for_engine` maps a scenario's ``[engine]``
table to the :class:`VllmSetup` it describes, so a scenario can be checked too.
"""

from __future__ import annotations

from sim.model.params import EngineParams
from sim.model.policies import ALL, NO_SPEC, POLICIES
from sim.resolve.resolution import PATCH_POLICY, Resolution, VllmSetup, resolve


def check_policy(res: Resolution, policy: str) -> str | None:
    """``None`` if simulating ``policy`` (a POLICIES key or ``all``) matches ``res``."""
    v = res.setup.vllm
    if res.policy == NO_SPEC:
        return "no speculative decoding: there are no accepted counts, no policy applies"
    if not res.async_scheduling and res.runner == "v1":
        return (
            f"async scheduling is off: vLLM {v} takes the synchronous path (policy async-off) "
            f"whatever --policy {policy} says; one row, not one per policy"
        )
    if policy == ALL or policy == res.policy:
        return None
    hint = ""
    prs = {name: pr for pr, name in PATCH_POLICY.items()}
    if policy in prs and res.policy in POLICIES and POLICIES[res.policy].reads_buffer:
        hint = f"; to ask 'what if patched', add --patch {prs[policy]}"
    return (
        f"--policy {policy} contradicts vLLM {v} with this configuration: it takes {res.path}{hint}"
    )


def setup_for_engine(engine: EngineParams, vllm: str = "0.24.0", model: str = "qwen3.5-27b"):
    """The setup a scenario's engine table stands for (MRv1, prefix caching on iff the
    mamba_cache_mode needs it, the async flag as given)."""
    pc = "off" if engine.mamba_cache_mode == "none" else "on"
    return VllmSetup(
        vllm=vllm,
        model=model,
        runner="v1",
        prefix_caching=pc,
        mamba_cache_mode=engine.mamba_cache_mode,
        async_scheduling="on" if engine.async_scheduling else "off",
        spec_method="mtp" if engine.num_speculative_tokens else "none",
        num_speculative_tokens=engine.num_speculative_tokens,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
    )


def check_scenario_policy(engine: EngineParams, policy: str, vllm: str = "0.24.0") -> str | None:
    """:func:`check_policy` for a scenario (what ``sim run --policy`` would call)."""
    return check_policy(resolve(setup_for_engine(engine, vllm)), policy)
