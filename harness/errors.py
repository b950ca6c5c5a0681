"""The harness's errors, one hierarchy, and the exit codes the CLI maps them to.

    HarnessError                 a rule was broken; one line for the user (exit 2 unless stated)
    ├── ConfigError              a setting is unknown, mistyped or impossible
    ├── ModelError               missing, corrupt or unsupported model
    ├── DatasetError             dataset missing, or not matching the model
    ├── BackendError             backend unavailable or failing to load
    ├── OutputError              a results folder cannot be written, or the path is none
    │   └── ResultsError         a file of a results folder is missing or damaged (exit 7)
    ├── RunError                 the child process failed or was killed (exit 3)
    ├── NegativeVerdict          the tool worked and the answer is "no" (exit 1)
    │   └── SubmissionRefused    runs break MLPerf rules
    ├── RequestFailed            one request failed: the SUT records it with its reason and
    │                            completes it to LoadGen; it never ends a run
    └── ClientError              the HTTP client: a request failed below HTTP's own answers
        ├── ConnectError         no connection could be opened
        ├── Disconnected         the server closed the connection before the headers
        └── PayloadError         the body broke off, or the bytes are not HTTP

Exit codes, the same for every command (docs/ci.md):

    0   done; every verdict positive
    1   a verdict is negative: a --fail-if gate fired, parity disagrees, an audit failed,
        a submission was refused
    2   bad input: a setting, model, dataset, backend or path (a HarnessError), or a usage error
    3   the run is incomplete: the child crashed or was killed (records kept)
    4/5/6  `harness check`: invalid / incomplete / tampered
    7   a results folder's file is missing or damaged
    70  the tool itself failed: an unexpected exception (a bug; `--debug` shows it)

A negative verdict and a crash never share a code: CI can tell "the candidate regressed"
from "the harness broke".
"""

from __future__ import annotations

from collections.abc import Sequence

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_CHECK_INVALID = 4
EXIT_CHECK_INCOMPLETE = 5
EXIT_CHECK_TAMPERED = 6
EXIT_RESULTS = 7
EXIT_INTERNAL = 70  # sysexits' EX_SOFTWARE


class HarnessError(Exception):
    """Base of every error the harness reports to a user as one line."""

    exit_code = EXIT_USAGE


class ConfigError(HarnessError):
    pass


class ModelError(HarnessError):
    pass


class DatasetError(HarnessError):
    pass


class BackendError(HarnessError):
    pass


class OutputError(HarnessError):
    pass


class ResultsError(OutputError):
    exit_code = EXIT_RESULTS


class RunError(HarnessError):
    exit_code = EXIT_INCOMPLETE


class NegativeVerdict(HarnessError):
    exit_code = EXIT_NEGATIVE


class SubmissionRefused(NegativeVerdict):
    """Runs break MLPerf rules; the message lists each: `checker`, the complaints MLCommons'
    submission checker makes, and `loopholes`, what it lets through that the harness refuses."""

    def __init__(self, message: str, checker: Sequence[str] = (), loopholes: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.checker = list(checker)
        self.loopholes = list(loopholes)


class RequestFailed(HarnessError):
    """One request failed; `reason` is the short class the summary groups by."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ClientError(HarnessError):
    """A request failed below HTTP's own answers."""


class ConnectError(ClientError):
    """No connection could be opened."""


class Disconnected(ClientError):
    """The server closed the connection before the response headers."""


class PayloadError(ClientError):
    """The response body broke off, or the bytes are not HTTP."""


def first_line(e: BaseException) -> str:
    """An exception as one line of an error message: its text's first line, else its type's name."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


#: error.json's "type" -> class, so the parent re-raises what the child raised
BY_NAME: dict[str, type[HarnessError]] = {
    cls.__name__: cls
    for cls in (HarnessError, ConfigError, ModelError, DatasetError, BackendError, OutputError, ResultsError,
                RunError, NegativeVerdict, SubmissionRefused)
}
