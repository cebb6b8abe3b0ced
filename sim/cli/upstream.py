"""``python -m sim upstream-test``: ``sim check``'s minimal align counterexample as a standalone
pytest file in vLLM's test style (sim.explore.upstream_test), for a supported vLLM release."""

from __future__ import annotations

import argparse


def cmd_upstream_test(args: argparse.Namespace) -> int:
    from sim.explore.upstream_test import check_version, render
    from sim.runs.io import atomic_write_text
    from sim.runs.outputs import prepare_file

    check_version(args.vllm)
    out = prepare_file(args.out)  # the text as typed: Path() would drop a trailing slash
    atomic_write_text(out, render(args.vllm), sign=".py")
    print(f"wrote {args.out}: run it with pytest where vllm {args.vllm} is importable")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser(
        "upstream-test",
        help="sim check's minimal align counterexample as a pytest file for vLLM's tree",
    )
    u.add_argument("--vllm", required=True, metavar="VERSION",
                   help="the vLLM release the file is for (0.24.0 or 0.33.0)")  # fmt: skip
    u.add_argument("--out", required=True, help="the .py file to write")
    u.set_defaults(func=cmd_upstream_test)
