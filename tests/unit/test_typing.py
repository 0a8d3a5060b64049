"""``mypy --strict`` on the whole package is the bar (as watchfiles and harlequin set it): checked by the suite.

mypy takes about 30 s of CPU. When this test is selected, ``conftest.py`` starts it
at collection, niced, beside the rest of the suite (the suite's tests mostly wait
on child processes, so the second core is free most of the time); the test then
only collects its verdict.
"""

from __future__ import annotations

from ..conftest import mypy_verdict, start_mypy

start_at_collection = start_mypy


def test_package_is_mypy_strict_clean() -> None:
    code, out = mypy_verdict(timeout=240)
    assert code == 0, out[-5000:]
