"""``python -m sim risk``: which code path a vLLM configuration takes, how often it corrupts,
and what each mitigation the release offers would cost (sim.resolve.risk)."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import TYPE_CHECKING

from sim.cli.guards import BUDGET_H, parse_sets
from sim.errors import SpecraceError
from sim.model.verdict import HAZARD_KINDS
from sim.resolve.presets import PRESETS
from sim.resolve.release_facts import RELEASES
from sim.resolve.resolution import ASCEND_BRANCHES, VllmSetup
from sim.runs import tables
from sim.runs.args import budget_arg, file_arg, int_in
from sim.runs.limits import MAX_STEPS

if TYPE_CHECKING:  # the simulation (pandas, SimPy) loads only when the command runs
    from sim.resolve.rates import RateEstimate
    from sim.resolve.risk import RiskReport


def parse_spec(text: str) -> tuple[str, int]:
    """``mtp:3`` -> ("mtp", 3); ``none`` -> ("none", 0)."""
    if text == "none":
        return "none", 0
    method, sep, k = text.partition(":")
    if not sep or not k.isdigit():
        raise SpecraceError(f"--spec {text!r}: expected METHOD:K (e.g. mtp:3) or none")
    return method, int(k)


def setup_from_args(args: argparse.Namespace) -> VllmSetup:
    method, k = parse_spec(args.spec)
    return VllmSetup(
        vllm=args.vllm,
        model=args.model,
        runner=args.runner,
        prefix_caching=args.prefix_caching,
        mamba_cache_mode=args.mamba_cache_mode,
        async_scheduling=getattr(args, "async"),
        spec_method=method,
        num_speculative_tokens=k,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        platform=args.platform,
        env_v2=args.vllm_use_v2_model_runner,
        mrv2_unsupported=tuple(args.mrv2_unsupported),
        patches=tuple(args.patch),
        ascend_branch=args.ascend_branch,
    )


def _rate(e: RateEstimate) -> str:
    return f"{e.per_10k:.1f} [{e.per_10k_lo:.1f}, {e.per_10k_hi:.1f}]"


def band_lines(rep: RiskReport) -> list[str]:
    """Exposure over plausible host speeds, the boundary flagged, the user's gauge."""
    b = rep.band
    if b is None:
        return []
    from sim.resolve.host_band import PLAUSIBLE

    lo, hi = b.range_per_10k()
    lines = [
        f"exposure over plausible host speeds (x{PLAUSIBLE[0]}-x{PLAUSIBLE[1]} of the CPU timing "
        f"below; x1 = a sample_tokens gauge of {b.gauge_ref_ms:g} ms): "
        + (f"EXPOSED, {lo:.1f} to {hi:.1f} corrupted generations per 10,000"
           if b.exposed else
           f"not exposed at any plausible host speed (at most {hi:.1f} per 10,000, 95%)")
    ]  # fmt: skip
    pts = ", ".join(f"x{f:g} {e.per_10k:.1f} ({b.regime(e)})" for f, e in b.plausible())
    lines.append(f"  per host speed: {pts}")
    if b.boundary:
        lines.append(
            f"  at the CPU/GPU boundary: up to the CPU-bound rate, {b.cpu_bound.per_10k:.1f} "
            f"[{b.cpu_bound.per_10k_lo:.1f}, {b.cpu_bound.per_10k_hi:.1f}] per 10,000 (the model "
            "misses the landing there both ways, even given the host's gauge: "
            "docs/forward-prediction.md)"
        )  # fmt: skip
    else:
        lines.append(f"  CPU-bound rate (a host slow enough): {b.cpu_bound.per_10k:.1f} per 10,000")
    first = b.first_exposing()
    if not b.exposed and first is not None:
        lines.append(f"  a host x{first:g} slower than this timing or more would expose it")
    if b.user is not None:
        u = b.user
        lines.append(
            f"your host (--host-gauge {b.user_gauge_ms:g} ms = x{b.user_factor:.2f}): "
            f"{u.per_10k:.1f} [{u.per_10k_lo:.1f}, {u.per_10k_hi:.1f}] per 10,000 "
            f"({b.regime(u)}{', EXPOSED' if u.corrupted else ''})"
        )  # fmt: skip
    else:
        lines.append("  your own host: --host-gauge MS (how to read it: python -m sim risk --help)")
    return lines


def print_report(rep: RiskReport, mitigations: bool = True) -> None:
    s, r = rep.setup, rep.resolution
    print(rep.verdict)
    print(
        f"vLLM {s.vllm} ({s.platform}), {s.model}, spec {s.spec_method}:"
        f"{s.num_speculative_tokens}, max_num_seqs={s.max_num_seqs}, prefix caching "
        f"{s.prefix_caching}, async {s.async_scheduling}, runner {s.runner}"
    )
    print(f"code path: {r.path}")
    print("why (rules that fired, with the release source line):")
    for line in r.trace():
        print(f"  {line}")
    for note in r.notes:
        print(f"note: {note}")
    t = rep.scenario.timing
    print(f"timing: {rep.timing_source}")
    print(
        f"  gpu_forward_ns_base={t.gpu_forward_ns_base} gpu_forward_ns_per_token="
        f"{t.gpu_forward_ns_per_token} gpu_drafter_ns={t.gpu_drafter_ns}"
    )
    e = rep.estimate
    if e is None:
        print("not exposed: without speculative decoding there is no accepted count to race")
        print(f"cheapest safe change: {rep.answer}")
        return
    for line in band_lines(rep):
        print(line)
    print(
        f"at this timing (x1): corrupted generations per 10,000: {_rate(e)} (95% Wilson; "
        f"{e.corrupted:,} of {e.generations:,} generations; {e.runs} runs x "
        f"{e.steps // e.runs:,} steps)"
    )
    print(
        f"steps with a wrong consumed count per 10^4 steps: {e.per_10k_steps:.1f} "
        f"[{e.per_10k_steps_lo:.1f}, {e.per_10k_steps_hi:.1f}] ({e.wrong_steps:,} of "
        f"{e.steps:,})"
    )
    kinds = " ".join(f"{k}={e.by_kind.get(k, 0)}" for k in HAZARD_KINDS)
    print(f"wrong consumed counts by hazard: {kinds} (prompt state lost: {e.prompt_state_lost})")
    print(f"step {e.mean_step_ns / 1e6:.3f} ms, {e.tokens_per_s:,.0f} tokens/s")
    if e.safe and rep.band is None:
        print(
            f"exposure: no wrong count consumed in {e.generations:,} generations; at most "
            f"{e.per_10k_hi:.1f} per 10,000 (95%)"
        )
    print(f"cheapest safe change: {rep.answer}")
    if not rep.mitigations or not mitigations:
        return
    print("mitigations (cheapest safe first):")
    print("  " + " | ".join(MITIGATION_HEAD))
    for row in mitigation_rows(rep):
        print("  " + " | ".join(row))


# The mitigations table: every row has one field per header column (a test holds them equal).
MITIGATION_HEAD = ("mitigation", "change", "policy", "per 10k [95% CI] at x1", "step time",
                   "tokens/s", "note")  # fmt: skip


def mitigation_rows(rep: RiskReport) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for m in rep.mitigations:
        if not m.available or m.estimate is None:
            why = m.reason if m.reason.startswith("no effect") else f"not available: {m.reason}"
            rows.append((m.name, m.change, "-", "-", "-", "-", why))
            continue
        me = m.estimate
        safe = "safe" if me.safe else "NOT safe"
        if m.cost_unknown:  # a cost the model lacks is unknown, not zero
            step, tok = "unknown", "unknown"
            note = f"not modelled: {m.cost_unknown}" + (f"; {m.reason}" if m.reason else "")
        else:
            step, tok, note = f"{m.step_time_pct:+.2f}%", f"{m.tokens_per_s_pct:+.2f}%", m.reason
        rows.append((m.name, m.change, me.policy, f"{_rate(me)} {safe}", step, tok,
                     note or "-"))  # fmt: skip
    return rows


def mitigation_records(rep: RiskReport) -> list[dict]:
    """The mitigations table for a program (``--format json|csv``): its rates as numbers."""
    out = []
    for m in rep.mitigations:
        me = m.estimate if m.available else None
        out.append({
            "mitigation": m.name, "change": m.change, "available": m.available,
            "policy": me.policy if me else None,
            "per_10k": me.per_10k if me else None,
            "per_10k_lo": me.per_10k_lo if me else None,
            "per_10k_hi": me.per_10k_hi if me else None,
            "safe": me.safe if me else None,
            "step_time_pct": m.step_time_pct if me and not m.cost_unknown else None,
            "tokens_per_s_pct": m.tokens_per_s_pct if me and not m.cost_unknown else None,
            "cost_unknown": m.cost_unknown or None,
            "note": m.reason,
        })  # fmt: skip
    return out


def cmd_risk(args: argparse.Namespace) -> int:
    from sim.cli.guards import RISK_ESTIMATES_MAX, check_budget, runs_s
    from sim.resolve.risk import assess
    from sim.runs.processes import auto_workers

    estimates = 1 if args.no_mitigations else RISK_ESTIMATES_MAX
    cpu_s = runs_s(args.seeds * estimates, args.steps, args.max_num_seqs, args.engine)
    check_budget(
        f"risk --seeds {args.seeds:,} --steps {args.steps:,} x {args.max_num_seqs} rows x up to "
        f"{estimates} paths",
        cpu_s, args.budget, "fewer seeds or steps (or --no-mitigations)",
    )  # fmt: skip
    workers = args.workers or auto_workers(args.seeds * estimates, cpu_s)
    if args.report:  # before the runs: a file of the user's there is refused at once
        from pathlib import Path

        from sim.runs.outputs import prepare_file

        prepare_file(Path(args.report), "--report")
    picture = picture_path(args)
    rep = assess(
        setup_from_args(args),
        parse_sets(args.set),
        seeds=args.seeds,
        steps=args.steps,
        policy=args.policy,
        mitigations=not args.no_mitigations,
        gpu_timing=args.gpu_timing,
        engine=args.engine,
        workers=workers,
        host_gauge_ms=args.host_gauge,
    )
    print_report(rep, mitigations=args.table_format == "table")
    if rep.band is not None and picture is not None:
        from sim.resolve.host_band import write_band_figure

        s = rep.setup
        title = (
            f"vLLM {s.vllm} {s.model} {s.spec_method}:{s.num_speculative_tokens} "
            f"{s.max_num_seqs} seqs: {rep.resolution.policy}, exposure vs host speed"
        )
        write_band_figure(rep.band, title, picture)
        print(f"picture: {picture}")
    tables.show(args.table_format, mitigation_records(rep))
    if args.report:
        write_report(rep, args)
    if args.json:
        print(json.dumps(rep.to_dict(), sort_keys=True))
    return 0


def picture_path(args: argparse.Namespace):
    """``--picture`` (checked before the runs), or a file in the temporary folder named after
    the configuration; None for ``--picture none``."""
    import re
    import tempfile
    from pathlib import Path

    from sim.runs.outputs import prepare_file

    if args.picture == "none":
        return None
    if args.picture:
        path = Path(args.picture)
    else:
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{args.vllm}-{args.model}-{args.spec}-"
                      f"s{args.max_num_seqs}-{args.gpu_timing}")  # fmt: skip
        path = Path(tempfile.gettempdir()) / f"specrace-risk-{slug}.png"
    prepare_file(path, "--picture")
    return path


def write_report(rep: RiskReport, args: argparse.Namespace) -> None:
    """``--report FILE``: the assessment as one self-contained HTML page, written atomically."""
    from pathlib import Path

    from sim.explore.report import reproduce_argv
    from sim.resolve.risk_page import risk_page
    from sim.runs.io import atomic_write_text, remove_stale

    out = Path(args.report)
    prog = getattr(args, "prog", "python -m sim")
    command = " ".join([prog, "risk", *map(shlex.quote, reproduce_argv(args.risk_parser, args))])
    page = risk_page(rep, command, (MITIGATION_HEAD, mitigation_rows(rep))).html()
    atomic_write_text(out, page, sign=".html")
    remove_stale(out.parent, out.name)
    print(f"wrote {out}")


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("risk", help="your vLLM config: code path, corruption rate, mitigations")
    r.add_argument("--vllm", default="0.27.1", help=f"release ({RELEASES[0]}..{RELEASES[-1]})")
    r.add_argument("--model", default="qwen3.5-27b", help=", ".join(PRESETS))
    r.add_argument("--spec", default="mtp:3", help="METHOD:K (mtp, eagle, eagle3) or none")
    r.add_argument("--prefix-caching", default="default", help="on, off or default")
    r.add_argument("--async", default="default", help="async scheduling: on, off or default")
    r.add_argument("--runner", default="auto", help="v1, v2 or auto (VLLM_USE_V2_MODEL_RUNNER)")
    r.add_argument("--vllm-use-v2-model-runner", default="", metavar="0|1",
                   help="VLLM_USE_V2_MODEL_RUNNER as set in your environment")  # fmt: skip
    r.add_argument("--mamba-cache-mode", default="default", help="none, all, align or default")
    r.add_argument("--max-num-seqs", type=int_in(1, 65_536, "1..65,536"), default=64)
    r.add_argument("--max-num-batched-tokens", type=int_in(1, 2**24, "1..2^24"), default=8192)
    r.add_argument("--platform", default="cuda", help="cuda or ascend")
    r.add_argument(
        "--ascend-branch",
        default="main",
        help=f"vllm-ascend: main (racy), its PyPI release {ASCEND_BRANCHES[1]} or "
        "the v0.23.0 branch (both with #13865)",
    )
    r.add_argument("--mrv2-unsupported", action="append", default=[], metavar="FEATURE",
                   help="a feature of your config MRv2 lacks, as vLLM names it")  # fmt: skip
    r.add_argument("--patch", action="append", default=[], metavar="PR",
                   help="an open PR applied on top: 51599 or 53919")  # fmt: skip
    r.add_argument("--policy", default="", help="check a policy against the configuration")
    r.add_argument("--gpu-timing", default="roofline",
                   help="roofline (the model preset) or balanced (6 ms forward, where the race "
                   "lives)")  # fmt: skip
    r.add_argument("--host-gauge", type=float, default=None, metavar="MS",
                   help="your host's speed: the median, over decode-only steps, of vLLM's "
                   "sample_tokens host span (GPUModelRunner._prepare_inputs returning -> the "
                   "accepted counts' non_blocking copy issued), in ms, read from a torch "
                   "profiler or NVTX trace of your vLLM (VLLM_TORCH_PROFILER_DIR) at your batch "
                   "size; gpu_check.vllm.gauge defines it")  # fmt: skip
    r.add_argument("--picture", default="", metavar="FILE",
                   help="where the picture of exposure vs host speed goes (PNG; default: the "
                   "temporary folder; none: no picture)")  # fmt: skip
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    r.add_argument("--seeds", type=int_in(1, 10**6, "1..10^6"), default=8, help="runs to pool")
    r.add_argument("--steps", type=int_in(2, MAX_STEPS, f"2..{MAX_STEPS:,}"), default=2000,
                   help="engine steps per run")  # fmt: skip
    r.add_argument("--budget", type=budget_arg, default=BUDGET_H, metavar="HOURS",
                   help="refuse an assessment estimated to take longer (CPU hours)")  # fmt: skip
    r.add_argument("--no-mitigations", action="store_true", help="only the configuration")
    r.add_argument("--workers", type=int_in(0, 4096, "0..4096"), default=0,
                   help="processes for the runs (0: one per core where the work pays for it; "
                   "1: this process); the same report whatever the number")  # fmt: skip
    r.add_argument("--engine", choices=("vector", "simpy"), default="vector",
                   help="timing tier: vector (NumPy) or simpy (the reference)")  # fmt: skip
    r.add_argument("--json", action="store_true", help="last line: the report as JSON")
    tables.add_format_arg(r, "the mitigations table")
    r.add_argument("--report", type=file_arg, metavar="FILE",
                   help="also write the assessment as one self-contained HTML page")  # fmt: skip
    r.set_defaults(func=cmd_risk, risk_parser=r)
