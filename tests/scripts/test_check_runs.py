"""scripts/check_runs.py: where `sim check`'s runs go, and its look at the last step's parents
(`--parents`), which docs/perf.md §6 quotes."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from repo_root import ROOT

from sim.explore.check.space import BIG, Req, Root, Space, _run

SCRIPT = ROOT / "scripts" / "check_runs.py"


def _script():
    spec = importlib.util.spec_from_file_location("check_runs", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parent_key_is_the_state_up_to_request_names() -> None:
    m = _script()
    space = Space(2, 3, 3)
    root = Root(True, False, 8, "plain", False)

    def key(reqs, cap=(1, BIG), at=root, steps=5):
        return m.parent_key(at, _run(space, at, reqs, BIG, steps), cap)

    # A finishes and B lives on, or the other way round: the same state, names aside
    a_ends = key((Req("p", 0, 1), Req("p", 0)))
    assert a_ends == key((Req("p", 0), Req("p", 0, 1)))
    # a finished request is in no queue, row or step in flight: its prompt class is gone
    assert a_ends == key((Req("h", 0, 1), Req("p", 0)))
    # what the next step can see is kept: a live request's prefix hit while it shows (after
    # step 0: one token computed or none), the capacity interval, the root's reorder threshold
    parts = dict(zip(m.PARTS, range(len(m.PARTS)), strict=True))
    whole, hit = (key((Req("p", 0, 1), Req(c, 0)), steps=1) for c in "ph")
    assert hit != whole and hit[parts["requests"]] != whole[parts["requests"]]
    # five steps on, the two prompts have come to the same state: one key
    assert key((Req("p", 0, 1), Req("h", 0))) == a_ends
    assert key((Req("p", 0, 1), Req("p", 0)), cap=(1, 99)) != a_ends
    other = Root(True, True, 8, "plain", False)
    assert key((Req("p", 0, 1), Req("p", 0)), at=other)[parts["engine"]] != a_ends[parts["engine"]]


def test_parents_report_accounts_for_every_repeated_leaf() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--parents", "--max-rows", "2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    seen = int(re.search(r"a schedule already checked: ([\d,]+)", out)[1].replace(",", ""))
    origins = re.findall(r"^  (a parent whose|the same parent|another parent).*?: ([\d,]+) \(", out,
                         re.M)  # fmt: skip
    assert seen > 0 and sum(int(n.replace(",", "")) for _, n in origins) == seen
    m = re.search(
        r"earlier parent had: ([\d,]+); the same state up to request names: ([\d,]+)", out
    )
    total, same = (int(x.replace(",", "")) for x in m.groups())
    listed = re.findall(r"^  [a-z ,]+: ([\d,]+)$", out, re.M)
    assert total > 0 and same + sum(int(n.replace(",", "")) for n in listed) == total
