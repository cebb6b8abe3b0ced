"""A user's vLLM configuration -> the accepted-count code path that release takes, and why.

:func:`resolve` applies, in the order vLLM's own configuration code does, the rules of
:mod:`sim.resolve.rules` for the release named, and returns a :class:`Resolution`: the
policy (a key of ``sim.model.policies.POLICIES``, or ``async-off``), the runner, prefix
caching, ``mamba_cache_mode``, async scheduling, and the trace of every rule that fired with
its release file and line. Order (vLLM): arg_utils defaults (prefix caching) ->
MambaModelConfig.verify_and_update_config (mamba_cache_mode) -> VllmConfig.__post_init__
(async scheduling, model runner) -> the runner's accepted-count block.

A configuration the release would refuse, or that names contradictory settings, raises
:class:`SpecraceError` with one line naming the input. 0.34.0 has no V1 runner: it refuses
``VLLM_USE_V2_MODEL_RUNNER=0`` (``--runner v1``) as vLLM does, and an MRv2-unsupported
feature, which earlier releases answer by falling back to V1. Where MRv2 is chosen in a release
that still has V1 and V1 would take a racy path, the resolution says so in a warning note.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sim.errors import SpecraceError, did_you_mean
from sim.model.policies import NO_SPEC, POLICIES
from sim.resolve.presets import get_preset
from sim.resolve.release_facts import (
    ASCEND,
    ASCEND_MAIN,
    ASCEND_RELEASE,
    FACTS,
    LAST_V1_RELEASE,
    RELEASES,
    has_v1_runner,
)
from sim.resolve.rules import Fired, fire

TRI = ("on", "off", "default")
RUNNERS = ("v1", "v2", "auto")
SPEC_METHODS = ("mtp", "eagle", "eagle3", "none")  # EAGLE-type methods and no speculation
MAMBA_MODES = ("default", "none", "all", "align")
PLATFORMS = ("cuda", "ascend")
# vllm-ascend: main (as last seen, 2026-08-22; not on PyPI), the PyPI release 0.23.0.post1
# (#13865), and v0.23.0, the releases/v0.23.0 branch that release was cut from.
ASCEND_BRANCHES = ("main", ASCEND_RELEASE, "v0.23.0")
ASCEND_FIXED = (ASCEND_RELEASE, "v0.23.0")  # with #13865; built against vLLM 0.23.0
# The paths a CPU-side ordering can make wrong (docs/policies.md): the warning's subject.
RACY = ("unsynced", "synced-gather", "align", "ascend-main")
# The open PRs a user can apply, and the policy each makes of a path that reads CPU counts.
PATCH_POLICY = {"51599": "private-buffer", "53919": "sync-before-moves"}
PATCHES = tuple(PATCH_POLICY)
ENV_V2 = ("", "0", "1")


def _version_key(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        raise SpecraceError(f"--vllm {v!r}: not a version like 0.27.1") from None


@dataclass(frozen=True)
class VllmSetup:
    """What a user runs: the flags and environment that decide the accepted-count path."""

    vllm: str = "0.27.1"
    model: str = "qwen3.5-27b"
    runner: str = "auto"  # v1: VLLM_USE_V2_MODEL_RUNNER=0, v2: =1, auto: unset
    prefix_caching: str = "default"  # --enable-prefix-caching / --no-enable-prefix-caching
    mamba_cache_mode: str = "default"
    async_scheduling: str = "default"  # --async-scheduling / --no-async-scheduling
    spec_method: str = "mtp"
    num_speculative_tokens: int = 3
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 8192
    platform: str = "cuda"
    env_v2: str = ""  # VLLM_USE_V2_MODEL_RUNNER as set in the environment ("" unset)
    mrv2_unsupported: tuple[str, ...] = ()  # features of the config MRv2 lacks (vLLM's names)
    patches: tuple[str, ...] = ()  # unmerged PRs applied on top of the release
    ascend_branch: str = "main"  # vllm-ascend: main, 0.23.0.post1 (PyPI) or v0.23.0 (branch)

    def check(self) -> None:
        get_preset(self.model)
        if self.vllm not in RELEASES:
            key, first, last = _version_key(self.vllm), RELEASES[0], RELEASES[-1]
            if key < _version_key(first):
                raise SpecraceError(
                    f"--vllm {self.vllm}: too old; releases {first} to {last} are modelled "
                    "(before 0.23.0 the async accepted-count path differs)"
                )
            raise SpecraceError(
                f"--vllm {self.vllm}: unknown release{did_you_mean(self.vllm, RELEASES)} "
                f"(known: {', '.join(RELEASES)})"
            )
        for name, value, allowed in (
            ("--runner", self.runner, RUNNERS),
            ("--prefix-caching", self.prefix_caching, TRI),
            ("--async", self.async_scheduling, TRI),
            ("--mamba-cache-mode", self.mamba_cache_mode, MAMBA_MODES),
            ("--spec method", self.spec_method, SPEC_METHODS),
            ("--platform", self.platform, PLATFORMS),
            ("VLLM_USE_V2_MODEL_RUNNER", self.env_v2, ENV_V2),
            ("--ascend-branch", self.ascend_branch, ASCEND_BRANCHES),
        ):
            if value not in allowed:
                raise SpecraceError(f"{name} {value!r}: expected one of {', '.join(allowed)}")
        for p in self.patches:
            if p not in PATCHES:
                raise SpecraceError(f"--patch {p!r}: known patches are {', '.join(PATCHES)}")
        if len(set(self.patches)) > 1:
            raise SpecraceError("--patch: give one of 51599 and 53919, not both")
        k = self.num_speculative_tokens
        if self.spec_method == "none" and k:
            raise SpecraceError("--spec none: no speculative tokens, so k must be 0")
        if self.spec_method != "none" and not 1 <= k <= 15:
            raise SpecraceError(f"--spec {self.spec_method}:{k}: k must be in 1..15")
        if self.max_num_seqs < 1:
            raise SpecraceError(f"--max-num-seqs {self.max_num_seqs}: must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs * (1 + k):
            raise SpecraceError(
                f"--max-num-batched-tokens {self.max_num_batched_tokens}: must hold "
                f"max_num_seqs * (1 + k) = {self.max_num_seqs * (1 + k)} tokens"
            )
        wanted = {"v1": "0", "v2": "1"}.get(self.runner)
        if wanted and self.env_v2 and self.env_v2 != wanted:
            raise SpecraceError(
                f"--runner {self.runner} contradicts VLLM_USE_V2_MODEL_RUNNER={self.env_v2}"
            )
        if self.platform == "cuda" and self.ascend_branch != "main":
            raise SpecraceError("--ascend-branch applies to --platform ascend only")
        if not has_v1_runner(self.vllm):
            self._check_no_v1()
        if self.platform == "ascend":
            if self.runner == "v2" or self.env_v2 == "1":
                raise SpecraceError(
                    "--platform ascend with model runner V2: vllm-ascend's V2 runner is not "
                    "modelled (its NPUModelRunner V1 is)"
                )
            if self.ascend_branch in ASCEND_FIXED and self.vllm != "0.23.0":
                built = ASCEND["post1_vllm"]
                raise SpecraceError(
                    f"--ascend-branch {self.ascend_branch} runs on vLLM {built.value}, not "
                    f"--vllm {self.vllm} ({built.cite()})"
                )
            if self.patches:
                raise SpecraceError("--patch: #51599/#53919 are upstream PRs, not for ascend")

    def _check_no_v1(self) -> None:
        """0.34.0 on: what needs the V1 runner is refused, naming the last release with it."""
        v, last = self.vllm, LAST_V1_RELEASE
        if self.env == "0":
            fact = FACTS["v1_env_raises"][v]
            msg = str(fact.value).replace("{value}", "0")
            given = "--runner v1" if self.runner == "v1" else "VLLM_USE_V2_MODEL_RUNNER=0"
            raise SpecraceError(
                f"{given}: vLLM {v} refuses to start: "
                f"ValueError({msg!r}) ({fact.cite(v)}); {last} is the last release with the "
                "V1 model runner"
            )
        gone = FACTS["v1_runner_present"][v].cite(v)
        if self.platform == "ascend":
            runner = ASCEND["post1_subclasses_v1_runner"]
            raise SpecraceError(
                f"--platform ascend on vLLM {v}: vllm-ascend's NPUModelRunner subclasses vLLM's "
                f"V1 GPUModelRunner ({runner.cite()}), which {v} removed ({gone}); {last} is the "
                "last release with the V1 model runner"
            )
        if self.patches:
            raise SpecraceError(
                f"--patch {self.patches[0]}: #51599/#53919 patch the V1 runner, which vLLM {v} "
                f"removed ({gone}); {last} is the last release with it"
            )

    @property
    def env(self) -> str:
        """The effective VLLM_USE_V2_MODEL_RUNNER: ``--runner`` is that variable."""
        return {"v1": "0", "v2": "1"}.get(self.runner, self.env_v2)


@dataclass(frozen=True)
class Resolution:
    setup: VllmSetup
    policy: str  # key of POLICIES, "async-off", or NO_SPEC
    runner: str  # "v1" or "v2"
    prefix_caching: bool
    mamba_cache_mode: str
    async_scheduling: bool
    fired: tuple[Fired, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = ()  # settings that do not change this path, said once

    @property
    def path(self) -> str:
        if self.policy == NO_SPEC:
            return "no speculative decoding: no accepted counts"
        async_ = "async" if self.async_scheduling else "sync"
        return (
            f"MR{self.runner.upper()}, {async_}, prefix caching "
            f"{'on' if self.prefix_caching else 'off'}, mamba_cache_mode={self.mamba_cache_mode}"
            f" -> policy {self.policy}"
        )

    def trace(self) -> list[str]:
        return [f.line() for f in self.fired]


def resolve(setup: VllmSetup) -> Resolution:
    """The code path ``setup`` takes in its release, with every rule that fired."""
    setup.check()
    v = setup.vllm
    fired: list[Fired] = []

    # 1. prefix caching (engine/arg_utils.py _set_default_..._prefix_caching_args)
    if setup.prefix_caching == "default":
        pc = bool(FACTS["prefix_caching_default_hybrid"][v].value)
        fired.append(fire("pc-default", v))
    else:
        pc = setup.prefix_caching == "on"

    # 2. mamba_cache_mode (models/config.py MambaModelConfig.verify_and_update_config)
    modes = FACTS["mamba_cache_modes"][v].value
    mode = "none" if setup.mamba_cache_mode == "default" else setup.mamba_cache_mode
    if mode not in modes:
        line = fire("all-removed", v)
        raise SpecraceError(f"--mamba-cache-mode {mode}: {line.says} ({line.cite})")
    if pc:
        if mode == "none":
            fired.append(fire("pc-on-align", v))
            mode = "align"
        elif mode == "all":
            fired.append(fire("all-to-align", v))
            mode = "align"
    elif mode != "none":
        fired.append(fire("pc-off-none", v))
        mode = "none"

    if setup.spec_method == "none":
        if not has_v1_runner(v):  # 0.34.0: no V1 runner, no num_accepted_tokens_event
            fired.append(fire("v1-removed-env1" if setup.env == "1" else "v1-removed", v))
            return Resolution(setup, NO_SPEC, "v2", pc, mode, setup.async_scheduling != "off",
                              tuple(fired))  # fmt: skip
        fired.append(fire("spec-event", v))
        return Resolution(setup, NO_SPEC, "v1", pc, mode, setup.async_scheduling != "off",
                          tuple(fired))  # fmt: skip

    # 3. model runner (config/vllm.py VllmConfig.use_v2_model_runner; from 0.34.0 the only one)
    if setup.platform == "ascend":
        runner = "v1"
    elif has_v1_runner(v):
        runner = _runner(setup, mode, fired)
    else:
        runner = _runner_v2_only(setup, fired)

    # 4. async scheduling (config/vllm.py __post_init__)
    if setup.async_scheduling == "default":
        async_on = bool(FACTS["async_default_on_with_mtp"][v].value)
        fired.append(fire("async-default", v))
    else:
        async_on = setup.async_scheduling == "on"

    res = Resolution(setup, "", runner, pc, mode, async_on)
    policy = _policy(setup, runner, mode, async_on, fired)
    notes: tuple[str, ...] = (_ascend_note(setup),) if setup.platform == "ascend" else ()
    if runner == "v2" and mode == "align" and FACTS["mrv2_align_snapshot"][v].value is False:
        notes += (
            f"MRv2 align in {v} predates #50432: run_fused_postprocess_align's kernel reads the "
            "counts it resets in place, a race between the kernel's own programs on the device "
            "that this model does not simulate (the host race it does cannot occur)",
        )
    if runner == "v2" and has_v1_runner(v):
        notes += _v1_warning(setup)
    if setup.patches and policy not in PATCH_POLICY.values():
        notes += (
            f"--patch {setup.patches[0]} changes only a path that reads the CPU counts "
            f"(align, or 0.23.0's synced gather); this configuration takes {policy}",
        )
    return replace(res, policy=policy, fired=tuple(fired), notes=notes)


def _runner(setup: VllmSetup, mode: str, fired: list[Fired]) -> str:
    v = setup.vllm
    unsupported = list(setup.mrv2_unsupported)
    listed = FACTS["mrv2_unsupported_features"][v].value
    for feature in unsupported:
        if feature not in listed:
            raise SpecraceError(
                f"--mrv2-unsupported {feature!r}: not in vLLM {v}'s list of features MRv2 "
                f"lacks ({FACTS['mrv2_unsupported_features'][v].cite(v)})"
            )
    if mode == "align" and "hybrid/mamba models with align cache mode" in listed:
        unsupported.append("hybrid/mamba models with align cache mode")
    if not FACTS["mrv2_supports_mtp"][v].value:
        unsupported.append(f"speculative method '{setup.spec_method}'")
    env = setup.env
    if env:
        fired.append(fire("env-v2", v))
        if env == "0":
            return "v1"
        if unsupported:
            line = fire("mrv2-refuses", v, feature=", ".join(unsupported))
            raise SpecraceError(f"--runner v2 / VLLM_USE_V2_MODEL_RUNNER=1: {line.says} "
                                f"({line.cite})")  # fmt: skip
        fired.append(fire("mrv2-mtp", v))
        return "v2"
    if not FACTS["mrv2_default_for_qwen"][v].value:
        fired.append(fire("mrv2-arch", v))
        return "v1"
    fired.append(fire("mrv2-default", v))
    if unsupported:
        fired.append(fire("mrv2-unsupported", v, feature=", ".join(unsupported)))
        return "v1"
    fired.append(fire("mrv2-mtp", v))
    return "v2"


def _runner_v2_only(setup: VllmSetup, fired: list[Fired]) -> str:
    """0.34.0 on: MRv2 is the only runner; what it lacks is refused, not a fallback."""
    v = setup.vllm
    listed = FACTS["mrv2_unsupported_features"][v].value
    for feature in setup.mrv2_unsupported:
        if feature not in listed:
            raise SpecraceError(
                f"--mrv2-unsupported {feature!r}: not in vLLM {v}'s list of features the model "
                f"runner lacks ({FACTS['mrv2_unsupported_features'][v].cite(v)})"
            )
    fired.append(fire("v1-removed-env1" if setup.env == "1" else "v1-removed", v))
    if setup.mrv2_unsupported:
        line = fire("runner-refuses", v, feature=", ".join(setup.mrv2_unsupported))
        raise SpecraceError(
            f"--mrv2-unsupported: {line.says} ({line.cite}); {LAST_V1_RELEASE} is the last "
            "release with the V1 model runner"
        )
    if not FACTS["mrv2_supports_mtp"][v].value:  # none so far: say so if it ever happens
        line = fire("runner-refuses", v, feature=f"speculative method '{setup.spec_method}'")
        raise SpecraceError(f"--spec {setup.spec_method}: {line.says} ({line.cite})")
    fired.append(fire("mrv2-mtp", v))
    return "v2"


def _v1_warning(setup: VllmSetup) -> tuple[str, ...]:
    """MRv2 chosen in a release that still has V1: the warning, when V1 would be racy."""
    v = setup.vllm
    alt = resolve(replace(setup, runner="v1", env_v2="", mrv2_unsupported=()))
    if alt.policy not in RACY:
        return ()
    d2h = "align_d2h_into_input_batch" if alt.mamba_cache_mode == "align" else (
        "nonalign_d2h_into_input_batch")  # fmt: skip
    how = "VLLM_USE_V2_MODEL_RUNNER=0 (or --runner v1)"
    if setup.env == "":  # MRv2 by default: a feature it lacks falls back to V1 too
        how += " or a feature MRv2 lacks (--mrv2-unsupported)"
    return (
        f"warning: {how} puts vLLM {v} back on the V1 runner's {alt.policy} path, which is "
        f"racy: its D2H lands non-blocking in the row-indexed InputBatch buffer "
        f"({FACTS[d2h][v].cite(v)}); #51599/#53919 are in no release",
    )


def _ascend_note(setup: VllmSetup) -> str:
    """Which vllm-ascend the resolution models, and where its facts come from."""
    b = setup.ascend_branch
    if b == ASCEND_RELEASE:
        return (f"vllm-ascend {b} (PyPI sdist, re-read by tests/conformance/ascend_rules.py): "
                "its NPUModelRunner (model_runner_v1.py) with #13865, on upstream vLLM "
                f"{setup.vllm}'s configuration rules")  # fmt: skip
    if b == "v0.23.0":
        return ("vllm-ascend releases/v0.23.0 (branch, 50e87d6305; the PyPI release "
                f"{ASCEND_RELEASE} ships the same #13865): its NPUModelRunner, on upstream "
                f"vLLM {setup.vllm}'s configuration rules")  # fmt: skip
    fix = (f"; the PyPI release {ASCEND_RELEASE} (vLLM 0.23.0) has #13865: --ascend-branch "
           f"{ASCEND_RELEASE}" if setup.vllm == "0.23.0" else "")  # fmt: skip
    return (f"vllm-ascend main ({ASCEND_MAIN}, as last seen 2026-08-22; not on PyPI, facts from "
            "the project's reference notes): its NPUModelRunner (model_runner_v1.py), on "
            f"upstream vLLM {setup.vllm}'s configuration rules{fix}")  # fmt: skip


def _policy(setup: VllmSetup, runner: str, mode: str, async_on: bool, fired: list) -> str:
    v = setup.vllm
    if runner == "v2":
        fired.append(fire("mrv2-counts", v))
        if mode == "align" and FACTS["mrv2_align_snapshot"][v].value:
            fired.append(fire("mrv2-snapshot", v))
        return "mrv2"
    if not async_on:
        fired.append(fire("sync-path", v))
        return "async-off"
    if setup.platform == "ascend":
        if setup.ascend_branch == ASCEND_RELEASE:
            fired.append(fire("ascend-release-vllm", v))
            fired.append(fire("ascend-post1-buffer", v))
            fired.append(fire("ascend-post1-remap", v))
            return "ascend-13865"
        if setup.ascend_branch == "v0.23.0":
            fired.append(fire("ascend-13865", v))
            return "ascend-13865"
        fired.append(fire("ascend-main", v))
        if mode == "align":
            fired.append(fire("ascend-align", v))
            return "align"
        fired.append(fire("ascend-kernel", v))
        return "ascend-main"
    fired.append(fire("d2h-align" if mode == "align" else "d2h-nonalign", v))
    if FACTS["guard_45100"][v].value is None:
        fired.append(fire("pre-45100", v))
        racy = "align" if mode == "align" else "synced-gather"
    else:
        fired.append(fire("guard-45100", v))
        racy = "align" if mode == "align" else "device-authoritative"
    if setup.patches and POLICIES[racy].reads_buffer:  # a patch changes only a CPU read
        pr = setup.patches[0]
        fired.append(fire(f"patch-{pr}", v))
        return PATCH_POLICY[pr]
    return racy
