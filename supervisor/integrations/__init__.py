"""Adapters for the frameworks agents are built on (each an optional extra).

Each module imports its framework only inside itself: ``supervisor.integrations.pydantic_ai``
(``pip install 'agent-supervisor-tui[pydantic-ai]'``), ``.openai_agents`` (``[openai-agents]``) and
``.langgraph`` (``[langgraph]``). Importing this package imports none of them.

Every model request and tool call becomes a journaled step (``run.astep``/``run.step``), marked with the
step record's ``call`` field and, for model calls, ``run.usage``: see docs/adapters.md.
"""
