"""The built-in HTTP protocols, one module each, each exposing its class as `PROTOCOL`
(backends.http.registry finds them here; docs/architecture.md, "How to add", "A protocol")."""
