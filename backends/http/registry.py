"""The HTTP protocols by name: the modules of backends/http/protocols, each exposing its
class as `PROTOCOL`, and third-party ones from the `harness.http_protocols` entry-point
group, read at each call (nothing is cached: a package installed since is seen).

Adding a built-in protocol is one new module in backends/http/protocols. Another package
adds one by declaring, in its pyproject.toml:
    [project.entry-points."harness.http_protocols"]
    myproto = "mypkg.proto:MyProtocol"
where MyProtocol subclasses backends.http.protocol.HttpProtocol, `name = "myproto"`, and
its Options subclass backends.http.options.BaseHttpOptions with `protocol: Literal["myproto"]`.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from backends.http import protocols as _package
from backends.http.options import BaseHttpOptions, option_error
from backends.http.protocol import HttpProtocol
from harness.errors import BackendError

GROUP = "harness.http_protocols"


def _contract_error(cls: object, name: str, where: str) -> str:
    """Why `cls` cannot serve as protocol `name`, in one sentence; "" when it can."""
    if not (isinstance(cls, type) and issubclass(cls, HttpProtocol)):
        return f"{where}: {cls!r} is not a subclass of backends.http.protocol.HttpProtocol"
    if cls.name != name:
        return f"{where}: its class is named {cls.name!r}, not {name!r}"
    options = getattr(cls, "Options", None)
    if not (isinstance(options, type) and issubclass(options, BaseHttpOptions)):
        return f"{where}: its Options must subclass backends.http.options.BaseHttpOptions"
    if options.model_fields["protocol"].default != name:
        return f"{where}: its Options' protocol field must be Literal[{name!r}] = {name!r}"
    return ""


def _builtin() -> dict[str, type[HttpProtocol]]:
    found: dict[str, type[HttpProtocol]] = {}
    for module in pkgutil.iter_modules(_package.__path__):
        mod = importlib.import_module(f"{_package.__name__}.{module.name}")
        cls = getattr(mod, "PROTOCOL", None)
        where = f"backends/http/protocols/{module.name}.py"
        broken = _contract_error(cls, getattr(cls, "name", ""), where) if cls is not None else f"{where} has no PROTOCOL"
        if broken:  # a bug of the package itself: loud
            raise TypeError(broken)
        found[cls.name] = cls
    return found


def protocols() -> dict[str, type[HttpProtocol]]:
    """Every protocol that loads: the built-in ones, then the entry points' (a broken
    entry point is left out here and named by `get`)."""
    found = _builtin()
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            continue  # a built-in name is never replaced
        try:
            cls = ep.load()
        except Exception:  # noqa: BLE001 - a broken third-party module must not break the others
            continue
        if not _contract_error(cls, ep.name, ep.value):
            found[ep.name] = cls
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(protocols())


def for_alias(name: str) -> type[HttpProtocol] | None:
    """The protocol a server another tool names (`vllm`, `triton`, ...) speaks; None: none."""
    low = name.lower()
    return next((p for n, p in protocols().items() if low == n or low in p.aliases), None)


def get(name: str) -> type[HttpProtocol]:
    """The protocol class, or one line naming the known ones (or what broke)."""
    found = protocols()
    if name in found:
        return found[name]
    for ep in entry_points(group=GROUP):
        if ep.name == name:
            try:
                broken = _contract_error(ep.load(), name, ep.value)
            except Exception as e:  # noqa: BLE001 - reported, one line
                broken = f"{ep.value} failed to import: {type(e).__name__}: {e}"
            raise BackendError(f"http protocol {name!r}: {broken}")
    raise BackendError(_unknown(name, found))


def _unknown(name: Any, found: dict[str, type[HttpProtocol]]) -> str:
    alias = for_alias(name) if isinstance(name, str) else None
    hint = f" (a {name} server speaks {alias.name})" if alias is not None and alias.name != name else ""
    return f"unknown protocol {name!r}{hint}; known protocols: {', '.join(found)}"


def options_class(data: dict[str, Any]) -> type[BaseHttpOptions]:
    """The options class of the protocol `data` names, after checking that every key of
    `data` is one of its options: one that is another protocol's is named with both."""
    found = protocols()
    title = "HttpOptions"
    if "protocol" not in data:
        error = PydanticCustomError("missing", "Field required: set protocol to one of {names}", {"names": ", ".join(found)})
        raise ValidationError.from_exception_data(title, [InitErrorDetails(type=error, loc=("protocol",), input=data)])
    name = data["protocol"]
    if name not in found:
        if isinstance(name, str) and name in {ep.name for ep in entry_points(group=GROUP)}:
            try:
                get(name)
            except BackendError as e:
                raise option_error(title, "protocol", str(e), name) from None
        raise option_error(title, "protocol", _unknown(name, found), name)
    options = found[name].Options
    for key in data:
        if key in options.model_fields:
            continue
        owners = [n for n, p in found.items() if key in p.Options.model_fields]
        if owners:  # another protocol's option; an unknown key is pydantic's extra_forbidden
            own = [k for k in options.model_fields if k not in BaseHttpOptions.model_fields]
            raise option_error(
                title, key,
                f"{key} is not an option of protocol {name} (it is {' and '.join(owners)}'s); "
                f"{name}'s own options: {', '.join(own) or 'none'}", data[key],
            )  # fmt: skip
    return options
