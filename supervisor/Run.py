# ruff: noqa: N999  (the name is the point: `from supervisor import Run` falls back to this submodule)
"""Imported only when ``from supervisor import Run`` finds no ``Run`` in ``supervisor/__init__.py``.

That happens when supervisord's package (also named ``supervisor``) was
installed after this one and its ``__init__.py`` replaced ours: Python then
falls back to importing the submodule ``supervisor.Run``, this file, which says
so in one line instead of "cannot import name 'Run'". With our ``__init__``,
``Run`` is the SDK class and this file is never imported.
"""

from ._clash import clash_message

raise ImportError(clash_message())
