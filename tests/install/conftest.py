from __future__ import annotations

import pytest

from tests.install.chart import VARIANTS, objects


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """Objects of a fresh install per variant name (tests.install.chart.VARIANTS)."""
    return {name: objects(values) for name, values in VARIANTS.items()}


@pytest.fixture(scope="session")
def default_objects(rendered) -> list[dict]:
    return rendered["default"]
