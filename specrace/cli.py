"""The ``specrace`` console command: dispatch to ``sim`` or ``gpu_check`` by subcommand name."""

from __future__ import annotations

import sys


def _sim_commands() -> set[str]:
    from sim.runs.ctrl_c import sigint_held

    with sigint_held():  # Ctrl-C while importing is taken once the imports are whole
        from sim.cli.main import build_parser

    return _choices(build_parser())


def _gpu_commands() -> set[str]:
    from sim.runs.ctrl_c import sigint_held

    with sigint_held():
        from gpu_check.__main__ import build_parser

    return _choices(build_parser())


def _choices(parser) -> set[str]:
    for action in parser._actions:  # argparse keeps subparsers here
        if getattr(action, "choices", None) and hasattr(action, "add_parser"):
            return set(action.choices)
    return set()


def gpu_name(cmd: str, sim_cmds: set[str]) -> str:
    """The name a gpu_check command has under ``specrace``."""
    return f"gpu-{cmd}" if cmd in sim_cmds else cmd


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the program's own entry (the console script)
        from sim.runs.ctrl_c import retake_swallowed_interrupts

        retake_swallowed_interrupts()
    try:
        code = _dispatch(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # Ctrl-C while the halves import
        print("error: interrupted", file=sys.stderr)
        code = 130
    if argv is None:  # the program's own entry (the console script): the process is ending
        _interrupts_ignored_from_now()
    return code


def _interrupts_ignored_from_now() -> None:
    """Its status decided, the process exits: a Ctrl-C meanwhile changes nothing (and adds no
    traceback from the interpreter's shutdown)."""
    try:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        pass


def _dispatch(args: list[str]) -> int:
    sim_cmds = _sim_commands()
    gpu = {gpu_name(c, sim_cmds): c for c in _gpu_commands()}
    if args and args[0] in gpu:
        from gpu_check.__main__ import main as gpu_main

        return gpu_main(
            [gpu[args[0]], *args[1:]], prog="specrace", names={v: k for k, v in gpu.items()}
        )
    if args and args[0] in ("-h", "--help"):
        print("specrace: is your vLLM handing a GDN model a wrong accepted count? One command for")
        print("the simulator (python -m sim) and the GPU checks (python -m gpu_check).")
        print(f"model (python -m sim): {', '.join(sorted(sim_cmds))}")
        print(f"GPU (python -m gpu_check): {', '.join(sorted(gpu))}")
        print("specrace COMMAND --help for each; specrace --version")
        return 0
    from sim.cli.main import main as sim_main

    return sim_main(args, prog="specrace")
