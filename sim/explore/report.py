"""One self-contained HTML page of a run or of a ``risk`` assessment: the page a vLLM issue
or PR links.

What ran (scenario, steps, seed, timing), the verdict of every policy with its counts and 95 %
Wilson intervals, the timeline of a wrong read, the hazard summary, the rules that fired with
their vLLM source lines, and the exact command that reproduces it. Every image is a PNG
embedded as a data URI and the style sheet is inline, so the page is one file that opens
anywhere, offline. Functions from tables and figures to text: the CLI (``sim.cli.report``)
reads the run and writes the page.
"""

from __future__ import annotations

import base64
import html
import io
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.model.verdict import HAZARD_KINDS as KINDS
from sim.runs.stats import wilson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PER = 10_000
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f1f1f1; } td.l, th.l { text-align: left; }
tr.wrong td.v { color: #b00020; font-weight: 600; } tr.safe td.v { color: #1a7f37; }
pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
.muted { color: #666; font-size: 0.9em; } code { font-size: 0.9em; }
"""


@dataclass(frozen=True)
class Section:
    """One ``<h2>`` part of the page: already-escaped HTML."""

    title: str
    body: str


@dataclass(frozen=True)
class Page:
    title: str
    subtitle: str
    sections: list[Section] = field(default_factory=list)

    def html(self) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(self.title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{_e(self.title)}</h1><p class=muted>{_e(self.subtitle)}</p>",
        ]
        for s in self.sections:
            parts.append(f'<h2 id="{_slug(s.title)}">{_e(s.title)}</h2>\n{s.body}')
        parts.append("</body></html>\n")
        return "\n".join(parts)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def figure_img(fig: Figure, alt: str) -> str:
    """``<img>`` of ``fig`` as a PNG data URI (no file beside the page)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def table(head: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1,
          classes: Sequence[str] = ()) -> str:  # fmt: skip
    """An HTML table; the first ``left`` columns are left-aligned text."""

    def cells(tag: str, row: Sequence[object], extra: str = "") -> str:
        out = []
        for i, c in enumerate(row):
            cls = " ".join(x for x in ("l" if i < left else "", extra if i == 2 else "") if x)
            out.append(f"<{tag}{f' class={cls!r}' if cls else ''}>{_e(c)}</{tag}>")
        return "".join(out)

    thead = f"<thead><tr>{cells('th', head)}</tr></thead>" if any(head) else ""
    lines = [f"<table>{thead}<tbody>"]
    for i, row in enumerate(rows):
        cls = classes[i] if i < len(classes) else ""
        lines.append(f"<tr{f' class={cls!r}' if cls else ''}>{cells('td', row, 'v')}</tr>")
    lines.append("</tbody></table>")
    return "\n".join(lines)


def rate_text(k: int, n: int) -> str:
    """``k`` of ``n`` as a rate per 10,000 with its 95 % Wilson interval."""
    if n <= 0:
        return "- (none)"
    lo, hi = wilson(k, n)
    return f"{k / n * PER:.1f} [{float(lo) * PER:.1f}, {float(hi) * PER:.1f}]"


# -- a run ------------------------------------------------------------------------------------
def verdict_rows(summaries: Sequence[dict], generations: int) -> list[dict]:
    """One row per policy summary: counts, rates per 10,000 with intervals, the verdict."""
    from sim.model.policies import POLICIES

    rows = []
    for s in summaries:
        pol = POLICIES.get(s["policy"])
        gpu = int(s["gpu_wrong"])
        verdict = (
            f"WRONG: {gpu:,} consumed wrong count{'s' if gpu != 1 else ''}"
            if gpu
            else "safe in this run"
            + (f" ({int(s['cpu_wrong']):,} CPU-wrong reads repaired)" if s["cpu_wrong"] else "")
        )
        rows.append(
            {
                "policy": s["policy"],
                "vllm": pol.vllm if pol else "",
                "verdict": verdict,
                "reads": int(s["reads"]),
                "cpu_wrong": int(s["cpu_wrong"]),
                "gpu_wrong": gpu,
                **{k: int(s["by_kind"].get(k, 0)) for k in KINDS},
                "prompt_lost": int(s["prompt_state_lost"]),
                "corrupted": int(s["corrupted_requests"]),
                "generations": generations,
                "step_ms": s["mean_step_ns"] / 1e6,
                "tokens_per_s": s["tokens_per_s"],
            }
        )
    return rows


def verdict_table(rows: Sequence[dict]) -> str:
    head = ("policy", "vLLM state", "verdict", "GDN consumed wrong /10k reads [95% CI]",
            "CPU read wrong /10k reads [95% CI]", "corrupted generations /10k [95% CI]",
            *KINDS, "prompt lost", "step ms", "tok/s")  # fmt: skip
    body = [
        (
            r["policy"],
            r["vllm"],
            r["verdict"],
            f"{rate_text(r['gpu_wrong'], r['reads'])} ({r['gpu_wrong']:,} of {r['reads']:,})",
            f"{rate_text(r['cpu_wrong'], r['reads'])} ({r['cpu_wrong']:,})",
            f"{rate_text(r['corrupted'], r['generations'])} "
            f"({r['corrupted']:,} of {r['generations']:,})",
            *(f"{r[k]:,}" for k in KINDS),
            f"{r['prompt_lost']:,}",
            _num(r["step_ms"], ".3f"),
            _num(r["tokens_per_s"], ",.0f"),
        )
        for r in rows
    ]
    classes = ["wrong" if r["gpu_wrong"] else "safe" for r in rows]
    return table(head, body, left=3, classes=classes)


def _num(x: float, fmt: str) -> str:
    return "-" if x != x else format(x, fmt)  # NaN: not recorded


def reproduce_run(scenario: str, changed: dict[str, Any], policy: str, seed: int, steps: int,
                  out: str, prog: str = "python -m sim") -> str:  # fmt: skip
    """The command that rebuilds the run: the scenario, every parameter that differs from it
    as ``--set``, the policy, seed and steps."""
    argv = ["run", "--scenario", scenario, "--policy", policy, "--seed", str(seed)]
    argv += ["--steps", str(steps)]
    for key, value in changed.items():
        argv += ["--set", f"{key}={_toml(value)}"]
    argv += ["--out", out]
    return f"{prog} {shlex.join(argv)}"


def _toml(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def rules_section(fired: Sequence[Any], path: str, notes: Sequence[str] = ()) -> Section:
    """The code path and every rule that fired, with its release source line."""
    rows = [(f.rule, f.says, f.cite) for f in fired]
    body = f"<p>code path: <code>{_e(path)}</code></p>"
    body += table(("rule", "what it says", "release source line"), rows, left=3)
    body += "".join(f"<p class=muted>note: {_e(n)}</p>" for n in notes)
    return Section("Rules that fired", body)


def run_page(
    *,
    what_ran: Sequence[tuple[str, str]],
    rows: Sequence[dict],
    hazard_fig: Figure,
    timeline: tuple[Figure, str] | str,
    rules: Section,
    command: str,
    title: str,
) -> Page:
    """The page of one run directory (every policy it holds)."""
    sections = [
        Section("What ran", table(("", ""), what_ran, left=2)),
        Section(
            "Verdict per policy",
            "<p>A read is one request's consumption of the previous step's accepted count; "
            "<b>consumed wrong</b> means the GDN kernel restored its state from a wrong "
            "count (a CPU-wrong read that the correction kernel repairs is not). Intervals "
            "are 95 % Wilson score intervals.</p>"
            "<p>Two denominators. The /10k reads columns count per 10,000 reads. The corrupted "
            "generations column counts per 10,000 requests served: a generation is corrupted "
            "when at least one of its reads was consumed wrong. One wrong read spoils its whole "
            "generation, so this rate is the larger. Each row is one vLLM code path replayed "
            "on the same schedule; <b>Rules that fired</b> says which path this engine takes."
            "</p>" + verdict_table(rows),
        ),
        Section(
            "Hazard summary",
            figure_img(hazard_fig, "wrong reads per 10,000 reads, by policy and hazard kind"),
        ),
    ]
    if not isinstance(timeline, str):
        fig, text = timeline
        sections.append(
            Section(
                "Timeline of a wrong read",
                f"<p>{_e(text)}</p>" + figure_img(fig, f"timeline: {text}"),
            )
        )
    else:
        sections.append(Section("Timeline of a wrong read", f"<p>None: {_e(timeline)}.</p>"))
    sections.append(rules)
    sections.append(Section("Reproduce", f"<pre>{_e(command)}</pre><p>It writes a new "
                            "folder whose files are, byte for byte, the ones this report read "
                            "(same inputs and seed).</p>"))  # fmt: skip
    from sim.version import version_line

    return Page(title, f"specrace run report; {version_line()}", sections)


def reproduce_argv(parser: Any, args: Any, skip: Sequence[str] = ("report", "json")) -> list[str]:
    """The options of ``args`` that differ from ``parser``'s defaults, as a command line (the
    exact command, whatever was typed: ``--report`` and ``--json`` left out)."""
    import argparse

    out: list[str] = []
    for a in parser._actions:
        if not a.option_strings or a.dest in skip or isinstance(a, argparse._HelpAction):
            continue
        value = getattr(args, a.dest, a.default)
        if value == a.default:
            continue
        flag = a.option_strings[-1]
        if isinstance(a, argparse._StoreTrueAction):
            out.append(flag)
        elif isinstance(a, argparse._AppendAction):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out
