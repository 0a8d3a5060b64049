"""The supervisor process: runs the agent, restarts it, answers the control socket."""
