"""The private Textual internals the first frame relies on (``tui/textual_hooks.py``) still exist as they were checked.

A new Textual may rename or change any of them without notice: this test says which one, before a
dashboard silently draws its first frame late (or never scrolls to the end).
"""

from __future__ import annotations

import inspect

import pytest
import textual
from textual.app import App

from supervisor.tui import textual_hooks
from supervisor.tui.textual_hooks import HOOKS

CHECKED = "8.2"
"""The Textual minor version the hooks were checked on (pyproject.toml pins ``textual`` to it)."""


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_each_private_name_exists_with_the_expected_signature(name: str) -> None:
    cls, attr, params = HOOKS[name]
    fix = (f"Textual {textual.__version__} changed {name}, which tui/textual_hooks.py relies on (checked on "
           f"Textual {CHECKED}): read its source, adapt the hook, then move the pin in pyproject.toml")
    if attr == "_batch_count":  # an instance attribute, set in App.__init__
        app = App[None]()
        assert isinstance(getattr(app, attr, None), int), fix
        return
    assert attr in vars(cls), fix + f" ({cls.__name__} no longer defines {attr})"
    got = tuple(inspect.signature(getattr(cls, attr)).parameters)[1:]
    assert got == params, fix + f" (parameters {got}, expected {params})"
    if attr == "_ready":
        assert inspect.iscoroutinefunction(getattr(cls, attr)), fix + " (no longer a coroutine)"


def test_the_overrides_are_the_hooks_listed() -> None:
    """Every private method overridden in the module is one the test above checks (no hook left unchecked)."""
    overridden = {
        f"{base.__name__}.{attr}"
        for _, obj in vars(textual_hooks).items()
        if inspect.isclass(obj) and obj.__module__ == textual_hooks.__name__
        for base in obj.__mro__[1:2]
        for attr, value in vars(obj).items()
        if inspect.isfunction(value) and attr.startswith("_") and not attr.startswith("__")
    }
    assert overridden <= set(HOOKS), overridden - set(HOOKS)


def test_the_installed_textual_is_the_checked_minor() -> None:
    assert textual.__version__.startswith(CHECKED + "."), (
        f"Textual {textual.__version__} is installed; the private hooks were checked on {CHECKED}.x "
        "(see tui/textual_hooks.py and the pin in pyproject.toml)"
    )
