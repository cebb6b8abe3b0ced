from specrace.cli import main

raise SystemExit(main())
