"""Replay: the session inside the agent (no writes) and the runner on the CLI side."""
