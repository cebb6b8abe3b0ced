import sys

try:
    from specrace.cli import main

    code = main()
except KeyboardInterrupt:
    print("error: interrupted", file=sys.stderr)
    code = 130
try:  # a Ctrl-C caught above must not turn exit 130 into death by SIGINT (sim.runs.ctrl_c)
    from sim.runs.ctrl_c import keep_exit_status

    keep_exit_status()
except KeyboardInterrupt:
    pass
raise SystemExit(code)
