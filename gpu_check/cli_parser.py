"""`python -m gpu_check`'s command line: every command's arguments, by what the command is
about (the GDN kernels, the hardware replay, real vLLM runs, the model against those runs).
What each command does lives in ``gpu_check.__main__`` and the modules it calls."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from sim.runs.args import int_in, seed_arg, steps_arg
from sim.runs.tables import add_format_arg

DESCRIPTION = (
    "The GDN kernels with true and wrong counts, the hardware replay of a schedule, and real "
    "vLLM runs against the model."
)


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the usage block too
        raise UsageError(message)


def _count(hi: int):
    """A count in 1..hi: the bound keeps an input from asking for more memory than a machine
    has (the batch sizes vLLM takes; k as sim's num_speculative_tokens)."""
    return int_in(1, hi, f"1..{hi:,}")


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(_count(65_536)(t) for t in text.split(","))


def build_parser(
    prog: str = "python -m gpu_check", names: dict[str, str] | None = None
) -> argparse.ArgumentParser:
    """The parser; ``prog`` and ``names`` (command -> the name it was typed as) are how the
    user invoked it, so ``specrace gpu-bench --help`` says ``usage: specrace gpu-bench``."""
    p = _Parser(prog=prog, description=DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    _kernel_commands(sub)
    _replay_commands(sub)
    _vllm_run_commands(sub)
    _vllm_model_commands(sub)
    for cmd, parser in sub.choices.items():
        parser.prog = f"{prog} {(names or {}).get(cmd, cmd)}"
    return p


def _kernel_commands(sub) -> None:
    """recall, padding, bench: the GDN kernels with true and wrong counts."""
    r = sub.add_parser("recall", help="associative recall with true vs wrong accepted counts")
    r.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    r.add_argument("--impl", help="comma list of reference,triton,fla (default per device)")
    r.add_argument("--dtype", choices=("float32", "bfloat16"), help="input dtype")
    r.add_argument("--num-reqs", type=_count(1024))
    r.add_argument("--k", type=_count(15), help="draft tokens per step (num_speculative_tokens)")
    r.add_argument("--pairs", type=_count(4096), help="key->value pairs written by the prefill")
    r.add_argument("--seed", type=seed_arg, default=0)
    r.add_argument("--json", action="store_true")
    add_format_arg(r)

    d = sub.add_parser("padding", help="FULL-cudagraph GDN metadata shapes before/after #45100")
    d.add_argument("--num-reqs", type=_count(65_536), required=True)
    d.add_argument("--k", type=_count(15), required=True)
    d.add_argument("--max-num-seqs", type=_count(65_536), default=256)
    d.add_argument("--max-num-batched-tokens", type=_count(2**24), default=8192)
    d.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: also capture and replay a CUDA graph per rule")  # fmt: skip
    d.add_argument("--seed", type=seed_arg, default=0)
    d.add_argument("--json", action="store_true")
    add_format_arg(d)


def _replay_commands(sub) -> None:
    """replay, calibrate, summary: the schedule's row ops against a real copy."""
    y = sub.add_parser("replay", help="replay a schedule's row ops against a real D2H copy")
    y.add_argument("--scenario", default="minimal-race", help="built-in name or TOML path")
    y.add_argument("--policy", default="all", help="comma list of policies, or all")
    y.add_argument("--steps", type=steps_arg, default=0, help="engine steps (default: scenario's)")
    y.add_argument("--schedule", default="", help="replay this schedule.json (from sim)")
    y.add_argument(
        "--sim-run",
        default="",
        help="a `sim run` directory: replay with the model's own timing, per policy",
    )
    y.add_argument("--reps", type=int_in(1, 10**6, "1..10^6"), default=1,
                   help="replay the steps this many times")  # fmt: skip
    y.add_argument("--seed", type=seed_arg, default=0)
    y.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: scripted landings, no hardware (tests the replay itself)",
    )
    y.add_argument(
        "--aim", choices=("spin", "device-clock"), default="device-clock",
        help="cuda: place the landing by the GPU clock (%%globaltimer; p95 8.5 µs on the H200, "
             "data/replay/heldout) or by a calibrated spin (the older way, p95 49 µs)",
    )  # fmt: skip
    y.add_argument("--gdn", action="store_true", help="also run the GDN kernel per read")
    y.add_argument("--out", required=True, help="a new or empty directory")
    y.add_argument("--force", action="store_true",
                   help="replace a non-empty --out that specrace wrote")  # fmt: skip

    c = sub.add_parser("calibrate", help="measure the model's GPU timing parameters (CUDA)")
    c.add_argument("--out", default="data/params", help="directory for NAME.toml and NAME.csv")
    c.add_argument("--name", default="h200")

    m = sub.add_parser("summary", help="the README's GPU tables from committed data/bench")
    m.add_argument("--dir", default="data/bench")
    add_format_arg(m, "the tables")

    b = sub.add_parser("bench", help="time our kernel and fla's against the copy floor (CUDA)")
    b.add_argument("--ns", type=_int_list, default=None, help="comma list of batch sizes N")
    b.add_argument("--k", type=_count(15), default=3)
    b.add_argument("--out", help="directory for NAME.csv and NAME_summary.json")
    b.add_argument("--name", default="bench", help="file stem under --out (default: bench)")
    b.add_argument("--seed", type=seed_arg, default=0)
    b.add_argument("--sweep", action="store_true", help="time many more kernel configs")
    b.add_argument("--json", action="store_true")
    add_format_arg(b)

    e = sub.add_parser(
        "event-lag", help="how long a D2H's event trails its bytes (CUDA to measure)"
    )
    e.add_argument("src", nargs="?", help="a measured folder: its summary again, from its table "
                   "(no CUDA); omitted: measure on this GPU")  # fmt: skip
    e.add_argument("--out", help="write event_lag.csv.gz and summary.json there")
    e.add_argument("--iterations", type=_count(1_000_000), default=5000,
                   help="per variant, when measuring")  # fmt: skip
    add_format_arg(e)


def _vllm_run_commands(sub) -> None:
    """vllm-run, vllm-plugin-bench, vllm-export, vllm-compare: real vLLM, recorded."""
    v = sub.add_parser("vllm-run", help="real vLLM in-process on the GPU, instrumented (CUDA)")
    _vllm_workload_args(v)
    v.add_argument("--carry", default=os.environ.get("SPECRACE_VLLM_CARRY", ".vllmcarry"))
    v.add_argument("--vllm-version", default="", help="a carried vllm-<V>.zip (default: newest)")
    v.add_argument("--watch", action="store_true", help="the plugin's watch in every pass too")
    v.add_argument("--repeat-baseline", action="store_true", help="baseline again after")
    v.add_argument("--no-baseline", action="store_true", help="skip the uninstrumented pass")
    v.add_argument(
        "--arm-repeats", type=_count(100), default=1,
        help="run the --patch arms this many rounds, each in a rotated order (throughput)",
    )  # fmt: skip
    v.add_argument(
        "--repeats", type=_count(100), default=1,
        help="run every configuration this many times, round after round (repeatability)",
    )  # fmt: skip
    v.add_argument(
        "--runner", choices=("v1", "v2"), default="v1",
        help="v1: VLLM_USE_V2_MODEL_RUNNER=0 (the racy runner); v2: =1 (MRv2)",
    )  # fmt: skip
    v.add_argument(
        "--weights", default="zero",
        help="zero (default: every draft accepted, tokens fixed), dummy (vLLM's dummy weights), "
        "gdn-bit (tokens depend on the GDN state, drafts accepted ~70 %%; gpu_check.vllm.weights)",
    )  # fmt: skip
    v.add_argument(
        "--reference", choices=("none", "async-off"), default="none",
        help="async-off: per mode, the same requests once more on an engine with async "
        "scheduling off (ref_<mode>_<config>.json, for vllm-consequence)",
    )  # fmt: skip
    v.add_argument("--out", required=True)

    from gpu_check.vllm.plugin_bench import add_parser as add_bench

    add_bench(sub, _count, seed_arg, int_in)

    e = sub.add_parser("vllm-export", help="vllm-run raw records -> schedule, reads, timing")
    e.add_argument("raw", help="a raw_<mode>_<config>.json(.gz), or a folder with raw/")
    e.add_argument("--out", help="output folder (for one raw record)")

    a = sub.add_parser("vllm-compare", help="sim's prediction of every read of an exported run")
    a.add_argument("dir", help="a folder written by vllm-export")
    a.add_argument("--json", action="store_true")
    a.add_argument(
        "--markdown", action="store_true",
        help="a tree: the per-release table, then the per-configuration one (README's)",
    )  # fmt: skip
    add_format_arg(a, "the results table (of one run: its agreement)")


def _vllm_model_commands(sub) -> None:
    """The model against the recorded runs: forward, plan, outcome and the rest."""
    f = sub.add_parser(
        "vllm-forward", help="sim run forward with timing calibrated from data/vllm, vs observed"
    )
    f.add_argument("dir", help="data/vllm (version folders of exported runs, with raw/)")
    f.add_argument("--out", required=True, help="output folder (e.g. data/vllm/forward)")
    f.add_argument("--seeds", type=_count(1000), default=5, help="sim seeds per configuration")
    add_format_arg(f, "the summary line (json, csv: the forward table, forward.csv)")

    pl = sub.add_parser(
        "vllm-plan", help="what sim predicts for a vllm-run, written before it runs"
    )
    pl.add_argument("--vllm", default="", help="comma list of releases (0.23.0,0.24.0)")
    _vllm_workload_args(pl)
    pl.add_argument(
        "--grid", default="",
        help="TOML file of [[run]] tables, one vllm-run invocation each (instead of --vllm)",
    )  # fmt: skip
    pl.add_argument("--seeds", type=_count(100), default=3, help="sim seeds per configuration")
    pl.add_argument("--out", required=True, help="folder for predictions.json")
    add_format_arg(pl, "the predictions, one per configuration")

    oc = sub.add_parser(
        "vllm-outcome", help="a pre-registered prediction against its runs -> outcome.json"
    )
    oc.add_argument("prereg", help="a folder with predictions.json (vllm-plan)")
    oc.add_argument("--runs", nargs="+", required=True, help="folders of v<release>/ runs")
    oc.add_argument(
        "--partial", action="store_true",
        help="list predictions whose run is missing under not_run instead of failing",
    )  # fmt: skip
    oc.add_argument(
        "--force", action="store_true",
        help="replace an outcome.json there (only one this command wrote and nobody changed)",
    )  # fmt: skip
    add_format_arg(oc, "the results, one per configuration")

    ga = sub.add_parser("vllm-gauge", help="the host-speed gauge of every pass against its step")
    ga.add_argument("runs", nargs="+", help="folders of exported runs (searched at any depth)")
    ga.add_argument("--out", required=True, help="folder for summary.json and gauge.csv")

    rp = sub.add_parser(
        "vllm-repeatability", help="the forward criterion between passes of one configuration"
    )
    rp.add_argument("runs", nargs="+", help="folders of exported runs (searched at any depth)")
    rp.add_argument("--out", required=True, help="folder for summary.json and pairs.csv")
    add_format_arg(rp, "the judged pairs (pairs.csv)")

    fg = sub.add_parser("vllm-figure", help="one observed wrong read of a vLLM run, as a timeline")
    fg.add_argument("dir", help="an exported run folder (v<release>/<mode>_<config>/)")
    fg.add_argument("--out", required=True, help="the PNG to write")
    fg.add_argument("--step", type=_count(10**7), help="default: the wrong read with fewest ops")
    fg.add_argument("--req", help="request id within --step")

    ab = sub.add_parser("vllm-ab", help="the arms table of #45100's A/B and the align fixes")
    ab.add_argument("runs", nargs="+", help="folders of exported v<release>/ runs")
    ab.add_argument("--out", required=True, help="the summary JSON to write")
    add_format_arg(ab, "the arms (and throughput rounds)")
    cq = sub.add_parser(
        "vllm-consequence", help="greedy tokens with a wrong GDN count vs an async-off reference"
    )
    cq.add_argument("runs", nargs="+", help="vllm-run --reference async-off folders, exported")
    cq.add_argument(
        "--out", required=True, help="the JSON to write (data/vllm/ab/consequence.json)"
    )


def _vllm_workload_args(v: argparse.ArgumentParser) -> None:
    """What ``vllm-run`` runs, shared with ``vllm-plan`` (which predicts the same arms)."""
    v.add_argument("--modes", default="align,none", help="comma list of align,none")
    v.add_argument("--configs", default="16:0,64:0", help="MAX_NUM_SEQS[:GPU_DELAY_US],...")
    v.add_argument("--num-requests", type=_count(10**6), default=192)
    v.add_argument("--k", type=_count(15), default=3, help="MTP draft tokens per step")
    v.add_argument("--seed", type=seed_arg, default=0)
    v.add_argument("--arrivals", choices=("all-at-start", "staggered"), default="all-at-start")
    v.add_argument("--arrival-every", type=_count(10**6), default=2, help="staggered: steps apart")
    v.add_argument(
        "--output-range", default="8:160", help="MIN:MAX output tokens per request (default 8:160)"
    )
    v.add_argument(
        "--patch", default="none",
        help="comma list of arms: none (the wheel as released), private-d2h (#51599's approach), "
        "sync-before-moves (#53919's approach); each align configuration runs once per arm",
    )  # fmt: skip
