from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.scripted_model import ScriptedModel

from .harness import Coven, start_coven


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture
async def coven_factory(
    tmp_path: Path, model: ScriptedModel
) -> AsyncIterator[Callable[..., Awaitable[Coven]]]:
    """Start coven-ls servers on the test's scripted model; each is stopped (and checked to leave
    no agent process) at the end of the test."""
    started: list[Coven] = []

    async def start(**kw: Any) -> Coven:
        coven = await start_coven(tmp_path / f"server{len(started)}", model, **kw)
        started.append(coven)
        return coven

    yield start
    for coven in started:
        await coven.stop()


@pytest.fixture
async def coven(coven_factory: Callable[..., Awaitable[Coven]]) -> Coven:
    return await coven_factory()
