"""``python -m sim``: the command line. See ``python -m sim --help``."""

from sim.cli.main import main

raise SystemExit(main())
