"""The ``agent-supervisor`` command line: one module of subcommands per area."""
