"""Backends by name, discovered through the `harness.backends` entry-point group.

Another package adds a backend by declaring, in its pyproject.toml:
    [project.entry-points."harness.backends"]
    mybackend = "mypkg.backend:MyBackend"
Backend modules import their heavy dependencies lazily, so listing them is cheap and a
missing extra shows up as "unavailable" with the install command, not as a crash.

A class is checked against the contract (backends.base) when its entry point is loaded: a
`kind` that is not one of `backends.base.KINDS` would otherwise route it down the wrong SUT
silently, and a streaming kind without `stream` would fail every request.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib.metadata import entry_points

from backends.base import KINDS, STREAMING_KINDS, Backend, BackendOptions, StreamingBackend, StreamingOptions
from harness.errors import BackendError

GROUP = "harness.backends"


@dataclass(frozen=True)
class BackendInfo:
    name: str
    target: str
    cls: type[Backend] | None
    missing: tuple[str, ...]
    error: str = ""

    @property
    def available(self) -> bool:
        return self.cls is not None and not self.missing and not self.error


def _entry_points() -> dict:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def names() -> list[str]:
    return sorted(_entry_points())


def _served_by_http(name: str) -> str:
    """A hint for a name from another tool that is a server, not a backend, here: the
    protocol registry (backends.http.registry) knows which names its protocols answer to."""
    from backends.http.registry import for_alias

    protocol = for_alias(name)
    if protocol is None:
        return ""
    return f". A {name} server is reached with --backend http --set protocol={protocol.name} --set url={protocol.url_form}"


def info(name: str) -> BackendInfo:
    eps = _entry_points()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none (is the package installed with `pip install -e .`?)"
        raise BackendError(f"unknown backend {name!r}; installed backends: {known}{_served_by_http(name)}")
    ep = eps[name]
    try:
        cls = ep.load()
    except Exception as e:  # a broken third-party module must not break the listing
        return BackendInfo(name, ep.value, None, (), f"failed to import: {type(e).__name__}: {e}")
    broken = contract_error(cls)
    if broken:
        return BackendInfo(name, ep.value, None, (), broken)
    missing = tuple(m for m in cls.requires if importlib.util.find_spec(m) is None)
    return BackendInfo(name, ep.value, cls, missing)


def contract_error(cls: object) -> str:
    """Why `cls` cannot be served as a backend, in one sentence; "" when it can."""
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        return f"{cls!r} is not a subclass of backends.base.Backend"
    where = f"class {cls.__module__}.{cls.__qualname__}"
    kind = cls.kind
    valid = "valid kinds: " + ", ".join(repr(k) for k in KINDS)
    if kind not in KINDS:
        return f"{where} has kind {kind!r}, which is not a backend kind; {valid}"
    if kind in STREAMING_KINDS:
        if not issubclass(cls, StreamingBackend):
            return f"{where} has kind {kind!r}, served by the event loop, so it must subclass backends.base.StreamingBackend ({valid})"
        if cls.stream is StreamingBackend.stream:
            return f"{where} has the streaming kind {kind!r} but does not implement stream() ({valid})"
        if not issubclass(cls.Options, StreamingOptions):
            return f"{where}: its Options ({cls.Options.__name__}) must subclass backends.base.StreamingOptions"
    elif issubclass(cls, StreamingBackend):
        return f"{where} is a StreamingBackend but has kind {kind!r}; a StreamingBackend's kind is one of {', '.join(map(repr, STREAMING_KINDS))}"
    elif cls.predict is Backend.predict:
        return f"{where} has kind {kind!r} but does not implement predict() ({valid})"
    return ""


def get(name: str) -> type[Backend]:
    """The backend class, or one clear error saying what to install."""
    bi = info(name)
    if bi.error:
        raise BackendError(f"backend {name!r} ({bi.target}): {bi.error}")
    assert bi.cls is not None
    if bi.missing:
        hint = bi.cls.install_hint or f"pip install {' '.join(bi.missing)}"
        raise BackendError(
            f"backend {name!r} needs {', '.join(bi.missing)}, which is not installed: {hint}"
        )
    return bi.cls


def options_class(name: str) -> type[BackendOptions] | None:
    """The backend's Options model, or None when it cannot be had here (unknown, not installed)."""
    try:
        return get(name).Options
    except BackendError:
        return None


def option_names(name: str) -> list[str]:
    try:
        bi = info(name)
    except BackendError:
        return []
    if bi.cls is None:
        return []
    # an option of any variant (the http backend's protocols) is the backend's
    names = dict.fromkeys(bi.cls.Options.model_fields)
    for variant in bi.cls.Options.variants().values():
        names.update(dict.fromkeys(variant.model_fields))
    return list(names)
