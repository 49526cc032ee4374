"""The base of every wire shape and the number types fields share (types.py and cluster.py
build on them; types.py re-exports them)."""

from __future__ import annotations

from typing import Annotated

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class Wire(msgspec.Struct, forbid_unknown_fields=False):
    """Base of every wire shape: unknown fields are ignored, so newer clients can talk to older
    servers."""
