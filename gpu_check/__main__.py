"""`python -m gpu_check`: what each command does (its arguments: ``gpu_check.cli_parser``).

Bad input gives one `gpu_check: error: ...` line on stderr and exit status 2. torch is imported
only by the subcommands that need it, so `padding` (without --device cuda) runs without torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gpu_check.cli_parser import UsageError, build_parser
from gpu_check.padding import padding_report, plan_padding
from sim.runs.tables import call, flat_rows, format_table, render


def _check_input(fn, *args):
    """Run a validating call; its ValueError is a usage error, reported as one line."""
    try:
        return fn(*args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _need_cuda() -> None:
    try:
        import torch
    except ImportError:
        raise UsageError("this needs torch with a CUDA device; torch is not installed") from None
    if not torch.cuda.is_available():
        raise UsageError("this needs a CUDA device and none is available")


RECALL_CPU_S_MAX = 600


def cmd_recall(args: argparse.Namespace) -> str:
    import torch

    from gpu_check.recall import CPU_CONFIG, GPU_CONFIG, IMPLS, run_recall

    cuda = args.device == "cuda"
    if cuda:
        _need_cuda()
    impls = tuple(args.impl.split(",")) if args.impl else (
        ("triton", "fla", "reference") if cuda else ("reference",)
    )  # fmt: skip
    if set(impls) - set(IMPLS):
        raise UsageError(f"--impl takes a comma list of {','.join(IMPLS)}; got {args.impl!r}")
    if not cuda and set(impls) - {"reference"} and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("on the CPU, --impl triton/fla need TRITON_INTERPRET=1")
    cfg = GPU_CONFIG if cuda else CPU_CONFIG
    overrides = {"num_reqs": args.num_reqs, "num_spec": args.k, "num_pairs": args.pairs}
    cfg = type(cfg)(**(vars(cfg) | {k: v for k, v in overrides.items() if v} | {"seed": args.seed}))
    _check_input(cfg.validate)
    # The CPU reference: ~1 ms per request x (1+k)^2 x pair (16 x 8 x 32 took 26 s here).
    cpu_s = cfg.num_reqs * (cfg.num_spec + 1) ** 2 * cfg.num_pairs * 1e-3
    if not cuda and cpu_s > RECALL_CPU_S_MAX:
        raise UsageError(
            f"--num-reqs {cfg.num_reqs} --k {cfg.num_spec} --pairs {cfg.num_pairs} on the CPU "
            f"takes about {cpu_s / 60:,.0f} min (> {RECALL_CPU_S_MAX // 60}): a smaller task, "
            "or --device cuda"
        )
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    result = run_recall(cfg, device=args.device, impls=impls, dtype=dtype)
    if args.json:
        return json.dumps(result, indent=2)
    cols = ["impl", "true_count", "count_used", "recall_acc", "out_rel_err",
            "slot0_state_rel_change", "next_step_recall_acc", "conv_out_rel_err"]  # fmt: skip
    text = f"recall config: {result['config']}\n" + format_table(result["rows"], cols)
    return render(args.table_format, result["rows"], text)


def cmd_padding(args: argparse.Namespace) -> str:
    plan = _check_input(
        plan_padding, args.num_reqs, args.k, args.max_num_seqs, args.max_num_batched_tokens
    )
    report = padding_report(plan)
    if args.device == "cuda":
        _need_cuda()
        from gpu_check.padding_graph import graph_padding_check

        report["graph_check"] = graph_padding_check(plan, seed=args.seed)
    if args.json:
        return json.dumps(report, indent=2)
    return render(args.table_format, _padding_rows(report), lambda: _padding_text(report))


def _padding_rows(report: dict) -> list[dict]:
    """Before and after #45100: the rule, the batch size, the metadata shapes (none without a
    FULL cudagraph)."""
    if not report["full_cudagraph"]:
        return []
    rows = [report[key] | {"when": key} | report[key]["shapes"] for key in ("before", "after")]
    for row in rows:
        row.update(report.get("graph_check", {}).get(row["batch_size_rule"], {}))
    return rows


def _padding_text(report: dict) -> str:
    head = (
        f"{report['num_reqs']} reqs x (1+{report['num_spec']}) = {report['num_tokens']} tokens"
        f" -> padded {report['num_tokens_padded']} tokens / {report['num_reqs_padded']} reqs"
    )
    if not report["full_cudagraph"]:
        return head + "\n" + report["note"]
    rows = _padding_rows(report)
    cols = ["when", "batch_size_rule", "batch_size", "spec_state_indices",
            "spec_query_start_loc", "tail_rows"]  # fmt: skip
    if "graph_check" in report:
        cols += ["ok", "replay_us_median"]
    return f"{head}\nfake rows: {report['fake_rows']}\n" + format_table(rows, cols)


def cmd_bench(args: argparse.Namespace) -> str:
    _need_cuda()
    from gpu_check.bench import NS, run_bench, summarize
    from gpu_check.environment import environment
    from gpu_check.store import write_csv, write_json

    out = _out_dir(args.out, "bench") if args.out else None
    rows, bw = run_bench(ns=args.ns or NS, k=args.k, seed=args.seed, sweep=args.sweep)
    summary = summarize(rows, bw, environment())
    if out is not None:
        from sim.runs.outputs import claim_dir

        claim_dir(out, "bench")
        write_csv(rows, os.path.join(args.out, f"{args.name}.csv"))
        write_json(summary, os.path.join(args.out, f"{args.name}_summary.json"))
    if args.json:
        return json.dumps(summary, indent=2)
    cols = ["pool_dtype", "N", "floor_us", "slot_copy_us", "ours_us", "ours_ratio_to_floor",
            "fla_us", "fla_ratio_to_floor", "ours_ratio_to_fla", "best_variant",
            "best_ours_us"]  # fmt: skip
    verdict = (
        f"target floor met: {summary['target_floor_met']}; fla met: {summary['target_fla_met']}"
    )
    text = (
        f"{summary['device']}  copy {summary['copy_bw_GBps']:.0f} GB/s\n"
        + format_table(summary["cases"], cols)
        + "\n"
        + verdict
    )
    return render(args.table_format, summary["cases"], text)


def cmd_replay(args: argparse.Namespace) -> str:
    """Writes into a temporary directory beside --out, renamed into place only on success."""
    from pathlib import Path

    from gpu_check.replay.cli import run_replay_command
    from sim.errors import SpecraceError
    from sim.model.policies import select
    from sim.runs.io import fresh_output_dir

    out = Path(args.out)
    try:
        select(args.policy)  # bad input is named before any output is touched
        with fresh_output_dir(out, args.force, kind="replay") as tmp:
            message = run_replay_command(args, tmp, _need_cuda, UsageError)
    except SpecraceError as e:
        raise UsageError(str(e)) from None
    return message.replace(str(tmp), str(out))


def _out_file(text: str, inputs: list) -> None:
    """A file the command writes, checked before any work (``sim.runs.outputs.prepare_file``:
    a file there only if specrace wrote it), and never inside the command's own inputs."""
    from pathlib import Path

    from sim.errors import SpecraceError
    from sim.runs.outputs import prepare_file

    try:
        path = prepare_file(text)
    except SpecraceError as e:
        raise UsageError(str(e)) from None
    for src in inputs:
        src = Path(src).resolve()
        if path == src or src in path.parents:
            raise UsageError(f"--out {text} is inside the input {src}: the output would replace "
                             "what it is made from; name a file elsewhere")  # fmt: skip


def _out_dir(text: str, kind: str):
    """A folder the command writes its files into, checked before any work (``sim.runs.outputs``:
    new, empty, or specrace's of this kind); created and marked at the first write."""
    from sim.errors import SpecraceError
    from sim.runs.outputs import prepare_dir

    try:
        return prepare_dir(text, kind, replace=False)
    except SpecraceError as e:
        raise UsageError(str(e)) from None


def cmd_event_lag(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check import event_lag

    out = _out_dir(args.out, "event-lag") if args.out else None
    if args.src:
        df, env = _vllm_input(
            event_lag.read_raw, Path(args.src), what=args.src, writer="gpu_check event-lag"
        )
    else:
        _need_cuda()
        from gpu_check.environment import environment

        df, env = event_lag.measure(args.iterations), environment()
    summ = event_lag.write(out, df, env) if out is not None else {
        "variants": event_lag.summary(df)}  # fmt: skip
    rows = flat_rows([{"variant": k, **v} for k, v in summ["variants"].items()])
    return render(args.table_format, rows, lambda: event_lag.summary_text(summ["variants"]))


def cmd_calibrate(args: argparse.Namespace) -> str:
    out = _out_dir(args.out, "calibrate")
    _need_cuda()
    from gpu_check.replay.calibrate import calibrate

    return calibrate(out, args.name)


def cmd_summary(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.summary import summary_markdown, summary_rows

    d = Path(args.dir)
    if not d.is_dir():
        raise UsageError(f"--dir {args.dir}: not a directory")
    writer = "gpu_check bench/recall/padding"
    if args.table_format != "table":
        return render(args.table_format, _vllm_input(summary_rows, d, what=d, writer=writer), "")
    return _vllm_input(summary_markdown, d, what=d, writer=writer)


def _vllm_input(fn, *args, what: object = "", writer: str = "gpu_check vllm-run/vllm-export"):
    """``fn(*args)`` with bad input as one line naming ``what`` (the path the user gave): a
    ValueError or SpecraceError (a missing or malformed file), and a file of another format
    where a vllm-run record or export belongs (these readers index the JSON they load)."""
    from sim.errors import SpecraceError

    try:
        return fn(*args)
    except SpecraceError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # also a JSON or UTF-8 decoding error
        raise UsageError(f"{what}: {exc}" if what else str(exc)) from None
    except (KeyError, TypeError, IndexError, AttributeError, RecursionError, OSError) as exc:
        raise UsageError(
            f"{what}: not what {writer} writes ({type(exc).__name__}: {exc})"
        ) from None


def cmd_vllm_export(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.export import export_run
    from gpu_check.vllm.tables import export_folder, write_tables
    from sim.errors import SpecraceError
    from sim.runs.io import fresh_output_dir

    src = Path(args.raw)
    if src.is_dir():  # a vllm-run folder: every raw/*.json.gz, then its tables, all under it
        _out_dir(str(src), "vllm-run")
        reports = _vllm_input(export_folder, src, what=src)
        _vllm_input(write_tables, src, what=src)
        return json.dumps(reports, indent=2, default=int)
    if not args.out:
        raise UsageError("--out is required when exporting one raw record")
    try:
        with fresh_output_dir(Path(args.out), kind="vllm-export") as tmp:  # whole or nothing
            report = _vllm_input(export_run, src, tmp, what=src)
    except SpecraceError as e:
        raise UsageError(str(e)) from None
    return json.dumps(report, indent=2)


def cmd_vllm_compare(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.agreement import compare_dir, report_text

    folder = Path(args.dir)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise UsageError(f"{args.dir} {what}: give a folder written by vllm-export (or data/vllm)")
    if not (folder / "schedule.json").is_file():  # a tree of exported runs: the results table
        from gpu_check.vllm.tables import RESULT_COLUMNS, results

        rows, timing = _vllm_input(lambda: results(folder), what=folder)
        if not rows:
            raise UsageError(f"{args.dir}: no exported run under it (export.json, as "
                             "gpu_check vllm-export writes)")  # fmt: skip
        if args.markdown:
            from gpu_check.vllm.tables import markdown

            return markdown(folder, rows, timing)
        if args.json:
            return json.dumps(rows, indent=2)
        return render(args.table_format, rows, lambda: format_table(rows, RESULT_COLUMNS[:16]))
    report = _vllm_input(compare_dir, folder, what=folder)
    if args.json:
        return json.dumps(report, indent=2)
    return render(args.table_format, [report], lambda: report_text(report))


def cmd_vllm_forward(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.forward import run_forward, summary_text

    out = _out_dir(args.out, "vllm-forward")
    text = summary_text(_vllm_input(run_forward, Path(args.dir), out, args.seeds))
    if args.table_format == "table":
        return text
    import pandas as pd

    rows = pd.read_csv(out / "forward.csv").to_dict("records")  # the table it wrote
    return render(args.table_format, rows, text)


def cmd_vllm_plan(args: argparse.Namespace) -> str:
    import shlex
    from pathlib import Path

    from gpu_check.vllm.plan import arms_from_args, arms_from_grid, plan, plan_dir, summary_text

    command = "python -m gpu_check " + shlex.join(args.argv)
    if bool(args.grid) == bool(args.vllm):
        raise UsageError("vllm-plan needs one of --vllm and --grid")
    if args.grid:
        arms, runs = _check_input(arms_from_grid, Path(args.grid))
    else:
        arms, runs = _check_input(arms_from_args, args), None
    out = _vllm_input(plan_dir, args.out, what=args.out)
    doc = _vllm_input(plan, arms, out, command, args.seeds, args.k, runs)
    return render(args.table_format, doc["configs"], lambda: summary_text(doc))


def cmd_vllm_outcome(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.outcome import outcome_text
    from gpu_check.vllm.prereg_forecast import outcome_with_forecast as outcome
    from sim.runs.outputs import proved_file

    runs = [Path(r) for r in args.runs]
    prereg = Path(args.prereg)
    if os.path.lexists(prereg / "outcome.json"):  # before judging
        if not args.force:
            raise UsageError(f"{prereg}/outcome.json exists: --force replaces it (only an "
                             "outcome vllm-outcome wrote and nobody changed)")  # fmt: skip
        if not proved_file(prereg / "outcome.json"):
            raise UsageError(f"{prereg}/outcome.json exists and specrace cannot prove it wrote "
                             "it: --force replaces only its own; move it away")  # fmt: skip
    doc = _vllm_input(outcome, prereg, runs, args.partial, what=args.prereg)
    return render(args.table_format, doc["results"], lambda: outcome_text(doc))


def cmd_vllm_gauge(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.gauge_evidence import write_gauge

    out = _out_dir(args.out, "vllm-gauge")
    doc = _vllm_input(write_gauge, [Path(r) for r in args.runs], out, what=" ".join(args.runs))
    return json.dumps(doc, indent=1)


def cmd_vllm_repeatability(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.repeatability import repeatability_text, write_repeatability

    out = _out_dir(args.out, "vllm-repeatability")
    runs = [Path(r) for r in args.runs]
    doc = _vllm_input(write_repeatability, runs, out, what=" ".join(args.runs))
    if args.table_format == "table":
        return repeatability_text(doc)
    import pandas as pd

    return render(args.table_format, pd.read_csv(out / "pairs.csv").to_dict("records"), "")


def cmd_vllm_ab(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.outcome import ab_summary, ab_text

    runs = [Path(r) for r in args.runs]
    _out_file(args.out, runs)
    doc = _vllm_input(ab_summary, runs, Path(args.out), what=" ".join(args.runs))
    throughput = [{"vllm": t["vllm"], "rounds": t["rounds"], "arm": name, **a}
                  for t in doc["throughput"] for name, a in t["arms"].items()]  # fmt: skip
    rows = flat_rows(doc["arms"], "arms") + flat_rows(throughput, "throughput")
    return render(args.table_format, rows, lambda: ab_text(doc))


def cmd_vllm_consequence(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.consequence import consequence, consequence_text

    runs = [Path(r) for r in args.runs]
    _out_file(args.out, runs)
    doc = _vllm_input(consequence, runs, Path(args.out), what=" ".join(args.runs))
    return consequence_text(doc)


def cmd_vllm_figure(args: argparse.Namespace) -> str:
    from pathlib import Path

    from gpu_check.vllm.figure import figure_for_run

    _out_file(args.out, [Path(args.dir)])
    read = _vllm_input(figure_for_run, Path(args.dir), Path(args.out), args.step, args.req,
                       what=args.dir)  # fmt: skip
    return f"{args.out}: step {int(read['step'])}, {read['req_id']}"


COMMANDS = {
    "recall": cmd_recall,
    "padding": cmd_padding,
    "bench": cmd_bench,
    "event-lag": cmd_event_lag,
    "summary": cmd_summary,
    "replay": cmd_replay,
    "calibrate": cmd_calibrate,
    "vllm-export": cmd_vllm_export,
    "vllm-compare": cmd_vllm_compare,
    "vllm-forward": cmd_vllm_forward,
    "vllm-plan": cmd_vllm_plan,
    "vllm-outcome": cmd_vllm_outcome,
    "vllm-repeatability": cmd_vllm_repeatability,
    "vllm-gauge": cmd_vllm_gauge,
    "vllm-ab": cmd_vllm_ab,
    "vllm-figure": cmd_vllm_figure,
    "vllm-consequence": cmd_vllm_consequence,
}


def main(
    argv: list[str] | None = None,
    prog: str = "python -m gpu_check",
    names: dict[str, str] | None = None,
) -> int:
    from sim.runs.outputs import record_command

    try:
        args = build_parser(prog, names).parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # what vllm-plan records
        record_command(prog, argv)
        if args.cmd == "vllm-run":  # its own exit status; one line when CUDA or vLLM is missing
            from gpu_check.vllm.run import main_run

            args.out = str(_out_dir(args.out, "vllm-run"))
            return main_run(args)
        if args.cmd == "vllm-plugin-bench":  # the same: its own status, one line without CUDA
            from gpu_check.vllm.plugin_bench import main_bench

            args.out = str(_out_dir(args.out, "vllm-plugin-bench"))
            return main_bench(args)
        print(call(COMMANDS[args.cmd], args))
    except UsageError as exc:
        from sim.errors import one_line

        print(f"gpu_check: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from sim.runs.processes import interrupts_ignored, stop_all

        with interrupts_ignored():  # a second Ctrl-C: no second line, no traceback
            print("gpu_check: error: interrupted", file=sys.stderr)
            stop_all()  # no worker or fork server outlives the command
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


if __name__ == "__main__":
    from sim.runs.ctrl_c import retake_swallowed_interrupts

    retake_swallowed_interrupts()  # a Ctrl-C swallowed by a callback is taken again
    sys.exit(main())
