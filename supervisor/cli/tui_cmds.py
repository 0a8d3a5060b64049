"""Subcommands of this area (filled in by its issue)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add this area's subcommands to the parser."""
