"""One exception base for the package, a subclass per area.

Every message is meant for a person: it says what was wrong and what to do.
The CLI prints ``str(error)`` on one line and exits 2, without a traceback.

A bug of this package is not the user's error: :class:`InternalError` is not a
``SupervisorError``, so it ends the command with its traceback (exit 1), to be reported.
"""

from __future__ import annotations


class SupervisorError(Exception):
    """Base of every error this package raises on purpose."""


class RunDirError(SupervisorError):
    """The run directory is missing, unreadable, or of a format we cannot read."""


class FormatError(RunDirError):
    """The run directory was written by a newer version of the tool."""


class JournalError(SupervisorError):
    """The journal cannot be opened or written."""


class JournalLockedError(JournalError):
    """Another process is already writing this journal."""


class CheckpointError(SupervisorError):
    """A checkpoint is missing or unreadable."""


class DivergenceError(SupervisorError):
    """On resume, the agent asked for another step than the journal recorded at that position."""

    def __init__(self, position: int, expected: str, actual: str, detail: str = "") -> None:
        self.position = position
        self.expected = expected
        self.actual = actual
        msg = (
            f"replay diverged at step position {position}: the journal recorded "
            f"{expected!r} but the agent asked for {actual!r}"
        )
        if detail:
            msg += f" ({detail})"
        msg += "; the agent code changed since the run was recorded: fork the run before the change or start a new run"
        super().__init__(msg)


class CodecError(DivergenceError):
    """On resume, a step's recorded output cannot be returned as the type the step now declares.

    A divergence (exit 78, not restarted): the output was recorded by code whose step
    returned another shape, so running again would fail the same way.
    ``position`` is -1 when the caller did not give it; ``expected`` is the type asked
    for, ``actual`` the recorded ``output_type`` (or ``"json"``); ``reason`` what did not
    fit and ``path`` where in the output (keys, indexes, ``.field`` names).
    """

    def __init__(
        self, message: str, *, step: str | None = None, expected: str = "", actual: str = "", position: int = -1
    ) -> None:
        self.step = step
        self.position = position
        self.expected = expected
        self.actual = actual
        self.reason = message
        self.path: list[object] = []
        SupervisorError.__init__(self, message)


class BadStepRecordError(DivergenceError):
    """On resume, a recorded step record is itself wrong (its step name is not a string): not a change of the
    agent's code. A divergence all the same (exit 78, not restarted): the record must be fixed first.
    The message names the record's file and line."""

    def __init__(self, message: str, *, position: int, recorded: object) -> None:
        self.position = position
        self.expected = str(recorded)
        self.actual = ""
        SupervisorError.__init__(self, message)


class OutputEncodeError(TypeError):
    """A step returned a value the journal cannot hold: a ``TypeError`` of the agent's code, not a user error.

    ``value`` is the part that cannot be encoded and ``path`` where it is in the output.
    """

    def __init__(self, message: str, value: object = None, path: tuple[object, ...] = ()) -> None:
        self.value = value
        self.path = path
        super().__init__(message)


class KeyTypeLost(Exception):
    """Inside the codec only (never raised out of it): two types meet that JSON cannot tell apart, and one holds a
    dict with keys that are not strings, so a common type would lose those keys' type; the container whose items
    they are catches it and names the place."""


class NotJSONValueError(ValueError):
    """A value the journal would change, refused where it would be journaled (a step's output, inputs or name,
    ``run.state``) instead of being written changed: a NaN or infinite float (JSON has none: orjson writes
    ``null``, read back as ``None``) or a string with a lone surrogate (not UTF-8: JSON text cannot hold it).

    A ``ValueError`` of the agent's value, like the codec's ``OutputEncodeError`` (a ``TypeError``) and not a
    :class:`SupervisorError` (which ``Run`` turns into one line and exit 2): it keeps its
    traceback, which shows where the agent made the value. ``value``: the float or string (or key);
    ``path``: where it is (keys, indexes, ``.field`` names, as the codec's paths).
    """

    def __init__(self, message: str, value: object = None, path: tuple[object, ...] = ()) -> None:
        self.value = value
        self.path = path
        super().__init__(message)


class WorkspaceError(SupervisorError):
    """The run's workspace cannot be snapshotted or restored: a file over a size cap, a file that cannot be read,
    a path that would lead out of the workspace, a restore refused (a non-empty target directory). The message
    names the file and says how to go on (raise the cap, ignore the file, make it readable)."""


class ForkError(SupervisorError):
    """The fork cannot be made where or from where it was asked."""


class ReplayError(SupervisorError):
    """Strict replay needed a step the journal does not have."""


class LockedError(SupervisorError):
    """A live supervisor (or a rollback in progress) holds the run directory."""


class ControlUnavailable(SupervisorError):
    """No live supervisor: no socket, or the connection was refused."""


class ControlTimeout(SupervisorError):
    """A supervisor holds the socket but did not answer in time."""


class ControlBusy(ControlTimeout):
    """A supervisor lives but turned the connection away: every control slot waits for an answer."""


class AskTimeout(SupervisorError, TimeoutError):
    """``run.ask`` got no answer within its ``timeout`` and has no ``default``."""


class SessionMismatchError(SupervisorError):
    """On resume, the session history a step recorded is not the one the journal's session steps lead to
    (``supervisor.integrations.openai_agents.DurableSession``)."""


class InternalError(Exception):
    """A bug in agent-supervisor, never the user's input: shown with its traceback, not as a one-line error."""


class InvalidTransition(InternalError):
    """A state change the supervisor's state machine does not allow (a supervisor bug), with both states."""


class StepPassThrough(BaseException):
    """A framework's control flow raised inside a step (LangGraph's ``interrupt()``, a ``Command`` to the parent
    graph), carried through the step by an adapter: as a ``BaseException`` the SDK journals no failed try for it
    (it would count towards a rollback); the step ends without a record and runs again on resume. The adapter
    raises ``inner`` again once the step has returned."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(inner)
        self.inner = inner
