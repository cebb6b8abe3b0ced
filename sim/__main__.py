"""``python -m sim``: the command line. See ``python -m sim --help``."""

import sys

try:
    from sim.cli.main import main

    code = main()
except KeyboardInterrupt:  # Ctrl-C while importing: one line, no traceback
    print("error: interrupted", file=sys.stderr)
    code = 130
raise SystemExit(code)
