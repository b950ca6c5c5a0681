"""Fixtures of the scale-out tests."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.support.ray_nodes import RayNodes, ray_nodes


@pytest.fixture(scope="module")
def nodes() -> Iterator[RayNodes]:
    """A head and 3 worker nodes on this host (tests/support/ray_nodes.py), started once for
    the module and killed after it, passed or failed."""
    with ray_nodes(workers=3) as cluster:
        yield cluster
