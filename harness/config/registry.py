"""Backends by name, discovered through the `harness.backends` entry-point group.

Another package adds a backend by declaring, in its pyproject.toml:
    [project.entry-points."harness.backends"]
    mybackend = "mypkg.backend:MyBackend"
Backend modules import their heavy dependencies lazily, so listing them is cheap and a
missing extra shows up as "unavailable" with the install command, not as a crash.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib.metadata import entry_points

from backends.base import Backend
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


def info(name: str) -> BackendInfo:
    eps = _entry_points()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none (is the package installed with `pip install -e .`?)"
        raise BackendError(f"unknown backend {name!r}; installed backends: {known}")
    ep = eps[name]
    try:
        cls = ep.load()
    except Exception as e:  # a broken third-party module must not break the listing
        return BackendInfo(name, ep.value, None, (), f"{type(e).__name__}: {e}")
    missing = tuple(m for m in cls.requires if importlib.util.find_spec(m) is None)
    return BackendInfo(name, ep.value, cls, missing)


def get(name: str) -> type[Backend]:
    """The backend class, or one clear error saying what to install."""
    bi = info(name)
    if bi.error:
        raise BackendError(f"backend {name!r} failed to import ({bi.target}): {bi.error}")
    assert bi.cls is not None
    if bi.missing:
        hint = bi.cls.install_hint or f"pip install {' '.join(bi.missing)}"
        raise BackendError(
            f"backend {name!r} needs {', '.join(bi.missing)}, which is not installed: {hint}"
        )
    return bi.cls


def option_names(name: str) -> list[str]:
    try:
        bi = info(name)
    except BackendError:
        return []
    return list(bi.cls.Options.model_fields) if bi.cls else []
