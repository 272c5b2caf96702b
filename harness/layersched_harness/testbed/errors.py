"""The harness's error: a testbed could not be brought up, used or torn down.

It belongs to the one hierarchy (:class:`layersched.core.errors.LayerschedError`), so the
CLI prints it as one line like every product error; the product never raises it.
"""

from __future__ import annotations

from layersched.core.errors import LayerschedError


class TestbedError(LayerschedError):
    """The testbed could not be brought up, used or torn down."""

    __test__ = False  # not a pytest test class despite the name
