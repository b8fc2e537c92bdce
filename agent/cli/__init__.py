"""The ``specpilot`` command line: one package, one module per group of commands."""
