"""The HTML page of a ``risk`` assessment (``risk --report FILE``), built from the run
report's parts (:mod:`sim.explore.report`): resolve may use explore, not the other way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.explore.report import KINDS, Page, Section, _e, figure_img, rules_section, table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sim.resolve.risk import RiskReport


def risk_page(
    rep: RiskReport,
    command: str,
    mitigations: tuple[Sequence[str], Sequence[Sequence[str]]] | None = None,
    rates_fig: Figure | None = None,
) -> Page:
    """The page of a ``risk`` assessment: the configuration, its code path and rules, the
    estimate with intervals, and the mitigations table (header, rows) as the terminal's."""
    from sim.version import version_line

    s, r = rep.setup, rep.resolution
    config = [
        ("vLLM", f"{s.vllm} ({s.platform})"),
        ("model", s.model),
        ("speculative decoding", f"{s.spec_method}:{s.num_speculative_tokens}"),
        ("max_num_seqs, max_num_batched_tokens", f"{s.max_num_seqs}, {s.max_num_batched_tokens}"),
        (
            "prefix caching, async, runner",
            f"{s.prefix_caching}, {s.async_scheduling}, {s.runner}",
        ),  # fmt: skip
        ("timing", rep.timing_source),
    ]
    sections = [Section("What ran", table(("", ""), config, left=2))]
    sections.append(rules_section(r.fired, r.path, r.notes))
    e = rep.estimate
    if e is None:
        verdict = "<p>not exposed: without speculative decoding there is no accepted count</p>"
    else:
        rows = [
            ("corrupted generations /10k [95% CI]",
             f"{e.per_10k:.1f} [{e.per_10k_lo:.1f}, {e.per_10k_hi:.1f}]",
             f"{e.corrupted:,} of {e.generations:,} generations"),
            ("steps with a wrong consumed count /10k [95% CI]",
             f"{e.per_10k_steps:.1f} [{e.per_10k_steps_lo:.1f}, {e.per_10k_steps_hi:.1f}]",
             f"{e.wrong_steps:,} of {e.steps:,} steps ({e.runs} runs)"),
            ("wrong consumed counts by hazard",
             " ".join(f"{k}={e.by_kind.get(k, 0)}" for k in KINDS),
             f"prompt state lost: {e.prompt_state_lost}"),
            ("step time, throughput", f"{e.mean_step_ns / 1e6:.3f} ms",
             f"{e.tokens_per_s:,.0f} tokens/s"),
        ]  # fmt: skip
        verdict = table(("", "value", "counts"), rows, left=1)
    verdict += f"<p><b>cheapest safe change:</b> {_e(rep.answer)}</p>"
    sections.append(Section(f"Verdict: policy {r.policy}", verdict))
    if mitigations is not None and mitigations[1]:
        head, rows_m = mitigations
        classes = ["wrong" if "NOT safe" in r[3] else "safe" if "safe" in r[3] else ""
                   for r in rows_m]  # fmt: skip
        body = table(head, rows_m, left=3, classes=classes)
        if rates_fig is not None:
            body += figure_img(rates_fig, "corrupted generations per 10,000, by mitigation")
        sections.append(Section("Mitigations (cheapest safe first)", body))
    sections.append(Section("Reproduce", f"<pre>{_e(command)}</pre>"))
    title = f"Is vLLM {s.vllm} exposed? {s.model}, {s.spec_method}:{s.num_speculative_tokens}"
    return Page(title, f"specrace risk report; {version_line()}", sections)
