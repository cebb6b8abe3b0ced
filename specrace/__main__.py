import sys

try:
    from specrace.cli import main

    code = main()
except KeyboardInterrupt:
    print("error: interrupted", file=sys.stderr)
    code = 130
raise SystemExit(code)
