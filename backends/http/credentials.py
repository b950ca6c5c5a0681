"""Credentials of the HTTP backend's options: never taken from the options, never echoed.

A header or query parameter whose name says it carries a credential is refused: its value
would be saved in run.yaml and manifest.json. It comes from an environment variable named
in api_key_env / headers_env / query_env instead. Pydantic's error (and the harness's
message built from it) shows the input, so a before-validator masks the values first and
the check that refuses sees, and reports, only the masked input.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import AfterValidator, BeforeValidator

_SECRET_NAMES = {"authorization", "cookie", "key", "token", "sig", "signature", "secret", "password", "passwd", "pwd",
                 "auth", "credential", "credentials", "session", "sid", "jwt", "bearer", "code", "apikey"}  # fmt: skip
_SECRET_PARTS = ("token", "secret", "passw", "apikey", "api_key", "credential", "signature", "cookie", "auth")


def _is_secret_name(name: str) -> bool:
    low = name.lower()
    words = set(low.replace("_", "-").replace(".", "-").split("-"))
    return bool(words & _SECRET_NAMES) or any(part in low for part in _SECRET_PARTS)


def _url_secrets(url: str) -> list[str]:
    parts = urlsplit(url)
    found = ["user:password"] if parts.username or parts.password else []
    return found + [k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if _is_secret_name(k)]


def _mask_url(v: Any) -> Any:
    if not isinstance(v, str) or not _url_secrets(v):
        return v
    p = urlsplit(v)
    netloc = ("***@" if p.username or p.password else "") + (p.netloc.rpartition("@")[2])
    query = urlencode([(k, "***" if _is_secret_name(k) else x) for k, x in parse_qsl(p.query, keep_blank_values=True)], safe="*")
    return urlunsplit((p.scheme, netloc, p.path, query, p.fragment))


def _check_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    found = _url_secrets(v)
    if found:
        raise ValueError(
            f"must not hold credentials ({', '.join(found)}; values not shown): put the key in an environment "
            "variable and name it in api_key_env (sent as Authorization: Bearer), headers_env {Header: VAR} "
            "or query_env {parameter: VAR}"
        )
    return v.rstrip("/")


def _mask_headers(v: Any) -> Any:
    if isinstance(v, dict) and any(_is_secret_name(str(k)) for k in v):
        return {k: "***" if _is_secret_name(str(k)) else x for k, x in v.items()}
    return v


def _check_headers(v: dict[str, str]) -> dict[str, str]:
    bad = sorted(k for k in v if _is_secret_name(k))
    if bad:
        raise ValueError(
            f"{', '.join(bad)} carries a credential (value not shown): put it in an environment variable and "
            f"name it in headers_env, e.g. headers_env: {{{bad[0]}: MY_ENV_VAR}} (or api_key_env for a bearer key)"
        )
    return v


def _env_name(var: Any) -> bool:
    return isinstance(var, str) and bool(var) and var.replace("_", "").isalnum()


def _mask_env_names(v: Any) -> Any:
    """A value that is no variable name may be the credential itself, given by mistake."""
    if isinstance(v, dict) and not all(_env_name(x) for x in v.values()):
        return {k: x if _env_name(x) else "***" for k, x in v.items()}
    return v


def _check_env_names(v: dict[str, str]) -> dict[str, str]:
    bad = sorted(name for name, var in v.items() if not _env_name(var))
    if bad:
        raise ValueError(f"{', '.join(bad)}: give the *name* of an environment variable (letters, digits, _), not the value")
    return v


Url = Annotated[str, AfterValidator(_check_url), BeforeValidator(_mask_url)]
Headers = Annotated[dict[str, str], AfterValidator(_check_headers), BeforeValidator(_mask_headers)]
EnvNames = Annotated[dict[str, str], AfterValidator(_check_env_names), BeforeValidator(_mask_env_names)]
