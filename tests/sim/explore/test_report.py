"""``sim report RUN`` and ``risk --report``: one self-contained HTML page, checked as text and
in a real headless Chromium (Debian's ``chromium``; those tests skip without it): the page loads
with no console error, every image renders, and its screenshot matches the committed one.

``SPECRACE_UPDATE_SCREENSHOTS=1`` rewrites tests/sim/explore/screenshots/ on purpose (then look at
them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from repo_root import ROOT

SHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (Debian: apt-get install -y chromium; make test-install does)",
)
WINDOW = (1280, 2400)


def sim(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sim", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def run_report(tmp_path_factory) -> tuple[Path, str]:
    """A ``--policy all`` run of minimal-race and its report."""
    run = tmp_path_factory.mktemp("report") / "run"
    r = sim("run", "--scenario", "minimal-race", "--policy", "all", "--out", str(run))
    assert r.returncode == 0, r.stderr
    r = sim("report", str(run))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(f"wrote {run / 'report.html'}")
    return run, (run / "report.html").read_text(encoding="utf-8")


def test_the_page_is_self_contained(run_report) -> None:
    _run, page = run_report
    srcs = re.findall(r'<img[^>]* src="([^"]*)"', page)
    assert len(srcs) == 2  # the hazard summary and the timeline
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r"(src|href)=\"(https?:|//|file:)", page)
    assert "<script" not in page and "<link" not in page


def test_the_page_says_what_ran_and_what_each_policy_got(run_report) -> None:
    from sim.runs.stats import wilson

    run, page = run_report
    for section in ("What ran", "Verdict per policy", "Hazard summary",
                    "Timeline of a wrong read", "Rules that fired", "Reproduce"):  # fmt: skip
        assert f">{section}</h2>" in page, section
    comparison = json.loads((run / "comparison.json").read_text())
    for s in comparison:
        assert f"<td class='l'>{s['policy']}</td>" in page, s["policy"]
    align = next(s for s in comparison if s["policy"] == "align")
    lo, hi = wilson(align["gpu_wrong"], align["reads"])
    rate = align["gpu_wrong"] / align["reads"] * 10_000
    assert f"{rate:.1f} [{float(lo) * 1e4:.1f}, {float(hi) * 1e4:.1f}]" in page
    assert "WRONG: 1 consumed wrong count<" in page
    assert "gpu_model_runner.py:" in page  # a rule with its vLLM source line
    assert re.search(r"<p>[\w-]+: \S+ at step \d+, row \d+ .* -&gt; WRONG", page)  # timeline


def test_the_reproduce_command_runs_as_printed_and_rebuilds_the_run(run_report) -> None:
    """The command exactly as the page prints it (it once named the run's own folder, which
    is refused as not empty) writes a new folder with the same bytes in every file the run
    wrote."""
    run, page = run_report
    cmd = re.search(r"<pre>python -m sim (run [^<]*)</pre>", page)
    assert cmd, "no reproduce command"
    import html
    import shlex

    argv = shlex.split(html.unescape(cmd.group(1)))
    again = Path(argv[argv.index("--out") + 1])
    assert again != run and not again.exists()
    r = sim(*argv)
    assert r.returncode == 0, r.stderr
    files = [p for p in sorted(run.rglob("*")) if p.is_file() and p.name != "report.html"
             and not p.name.startswith(".specrace")]  # fmt: skip
    assert any(p.name == "reads.parquet" for p in files)
    for p in files:
        assert (again / p.relative_to(run)).read_bytes() == p.read_bytes(), p


def test_the_page_explains_its_two_denominators(run_report) -> None:
    _run, page = run_report
    assert "Two denominators." in page and "per 10,000 requests served" in page


def test_the_reproduce_command_carries_every_set(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = sim("run", "--scenario", "minimal-race", "--policy", "align", "--out", str(run),
            "--timing", "h200", "--set", "workload.acceptance_probs=[0.5, 0.5, 0.5]")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = sim("report", str(run), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert "--set timing.dma_land_delay_ns=6571" in page
    assert "--set &#x27;workload.acceptance_probs=[0.5, 0.5, 0.5]&#x27;" in page
    assert "--policy align" in page


def test_report_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    r = sim("report", str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "not a run" in r.stderr
    assert not (tmp_path / "report.html").exists()
    stream = tmp_path / "stream"
    r = sim("run", "--stream", "--policy", "align", "--scenario", "minimal-race", "--out",
            str(stream))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = sim("report", str(stream))
    assert r.returncode == 2 and "a --stream run" in r.stderr and r.stderr.count("\n") == 1


def test_a_run_without_trace_says_why_it_has_no_timeline(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = sim("run", "--scenario", "minimal-race", "--policy", "align", "--no-trace", "--out",
            str(run))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "meta.json").read_text())["trace"] is False
    assert sim("report", str(run)).returncode == 0
    page = (run / "report.html").read_text()
    assert "None: the run has no trace.parquet (made with --no-trace)" in page
    assert page.count("<img ") == 1  # the hazard summary only


def test_a_run_that_lost_its_trace_or_has_garbled_meta_is_refused(tmp_path: Path) -> None:
    """A run whose meta.json says it wrote trace.parquet, without it, is not a --no-trace run;
    a meta.json whose versions are not a table is not a run's (fuzz campaign cases)."""
    run = tmp_path / "run"
    r = sim("run", "--scenario", "minimal-race", "--policy", "align", "--out", str(run))
    assert r.returncode == 0, r.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["trace"] is True
    (run / "trace.parquet").unlink()
    r = sim("report", str(run))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {run / 'trace.parquet'}: missing, yet the run wrote one")
    assert not (run / "report.html").exists()
    del meta["trace"]  # a run from before meta.json said: its one trace lost cannot be told
    (run / "meta.json").write_text(json.dumps({**meta, "versions": ""}))
    r = sim("report", str(run))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "versions '' is not a table of names and versions" in r.stderr
    assert not (run / "report.html").exists()


# -- in a real browser ------------------------------------------------------------------------
HARNESS = """<script>
window.__errors = [];
window.addEventListener("error", e => __errors.push(String(e.message || e.target.src)), true);
for (const level of ["error", "warn"]) {
  const orig = console[level];
  console[level] = (...a) => { __errors.push(level + ": " + a.join(" ")); orig(...a); };
}
window.addEventListener("load", () => {
  const imgs = [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight]);
  document.documentElement.setAttribute("data-check",
    JSON.stringify({errors: __errors, images: imgs}));
});
</script>"""


def chromium(*args: str, user_dir: Path) -> subprocess.CompletedProcess:
    assert CHROMIUM
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={user_dir}", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


@needs_chromium
def test_the_page_loads_in_chromium_with_every_image(run_report, tmp_path: Path) -> None:
    run, page = run_report
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("<head>", "<head>" + HARNESS, 1), encoding="utf-8")
    r = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri(),
                 user_dir=tmp_path / "profile")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'data-check="([^"]*)"', r.stdout)
    assert m, "the page did not finish loading: " + r.stdout[:500]
    import html

    check = json.loads(html.unescape(m.group(1)))
    assert check["errors"] == [], check["errors"]
    assert len(check["images"]) == 2
    assert all(c and w > 0 and h > 0 for c, w, h in check["images"]), check["images"]
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # the page itself logs nothing either


def _blocks(png: Path, size: tuple[int, int] = (64, 40)) -> np.ndarray:
    """The screenshot as a coarse grey image (block means): robust to font hinting."""
    from matplotlib.image import imread

    img = imread(png)[..., :3].mean(axis=2)
    h, w = img.shape
    bh, bw = h // size[1], w // size[0]
    return img[: bh * size[1], : bw * size[0]].reshape(size[1], bh, size[0], bw).mean(axis=(1, 3))


@needs_chromium
def test_the_screenshot_matches_the_committed_one(run_report, tmp_path: Path) -> None:
    run, _page = run_report
    shot = tmp_path / "report.png"
    r = chromium(f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}",
                 (run / "report.html").as_uri(), user_dir=tmp_path / "profile")  # fmt: skip
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    golden = SHOTS / "report-minimal-race.png"
    if os.environ.get("SPECRACE_UPDATE_SCREENSHOTS") == "1":
        SHOTS.mkdir(exist_ok=True)
        shutil.copyfile(shot, golden)
    got, want = _blocks(shot), _blocks(golden)
    assert got.std() > 0.05, "a blank page"
    diff = np.abs(got - want)
    assert diff.mean() < 0.02 and np.quantile(diff, 0.99) < 0.25, (
        f"the screenshot moved (mean {diff.mean():.3f}, p99 {np.quantile(diff, 0.99):.3f}): "
        f"look at {shot} against {golden}"
    )


@pytest.fixture(scope="module")
def risk_report(tmp_path_factory) -> tuple[str, str]:
    out = tmp_path_factory.mktemp("risk") / "risk.html"
    r = sim("risk", "--vllm", "0.28.0", "--gpu-timing", "balanced", "--seeds", "1", "--steps",
            "200", "--report", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout, out.read_text(encoding="utf-8")


def test_risk_report_holds_the_rules_the_estimate_and_the_mitigations(risk_report) -> None:
    stdout, page = risk_report
    for section in ("What ran", "Rules that fired", "Verdict: policy align",
                    "Mitigations (cheapest safe first)", "Reproduce"):  # fmt: skip
        assert f">{section}</h2>" in page, section
    for line in stdout.splitlines():
        m = re.match(r"  \[([\w-]+)\] .* \((vllm \S+ \S+:\d+)\)$", line)
        if m:  # every rule the terminal names, with its source line, is on the page
            assert f">{m[1]}</td>" in page and f">{m[2]}</td>" in page, line
    rate = re.search(r"corrupted generations per 10,000: ([\d.]+ \[[\d.]+, [\d.]+\])", stdout)
    assert rate and rate[1] in page
    command = "python -m sim risk --vllm 0.28.0 --gpu-timing balanced --seeds 1 --steps 200"
    assert f"<pre>{command}</pre>" in page


@needs_chromium
def test_risk_report_loads_in_chromium(risk_report, tmp_path: Path) -> None:
    _stdout, page = risk_report
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("<head>", "<head>" + HARNESS, 1), encoding="utf-8")
    r = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri(),
                 user_dir=tmp_path / "profile")  # fmt: skip
    m = re.search(r'data-check="([^"]*)"', r.stdout)
    assert r.returncode == 0 and m, r.stderr[-2000:]
    import html

    assert json.loads(html.unescape(m.group(1)))["errors"] == []
