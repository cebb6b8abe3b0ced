"""``python -m sim``: the command line. See ``python -m sim --help``."""

import sys

try:
    from sim.runs.ctrl_c import retake_swallowed_interrupts, sigint_held

    retake_swallowed_interrupts()
    with sigint_held():  # Ctrl-C while importing is taken once the imports are whole
        from sim.cli.main import main
    code = main()
except KeyboardInterrupt:  # Ctrl-C while importing: one line, no traceback
    print("error: interrupted", file=sys.stderr)
    code = 130
try:  # the process is ending, its status decided: a Ctrl-C now changes nothing
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from sim.runs.ctrl_c import keep_exit_status

    keep_exit_status()  # a Ctrl-C caught above must not turn exit 130 into death by SIGINT
except KeyboardInterrupt:
    pass
raise SystemExit(code)
