"""The file formats every process shares: run directory, records, journal, history, state, checkpoints."""
