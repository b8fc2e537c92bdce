"""``python -m agent.cli``: the same entry point as the ``specpilot`` script."""

from agent.cli.main import main

raise SystemExit(main())
