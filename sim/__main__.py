"""``python -m sim``: the command line. See ``python -m sim --help``."""

import sys

try:
    from sim.cli.main import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C while importing: one line, no traceback
    print("error: interrupted", file=sys.stderr)
    code = 130
try:  # the process is ending, its status decided: a Ctrl-C now changes nothing
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
except KeyboardInterrupt:
    pass
raise SystemExit(code)
