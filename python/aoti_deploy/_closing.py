"""One base for the toolkit's handles that hold something until closed (an opened
model's private copy, a session, a server): ``with handle:`` closes it on the way out."""

from __future__ import annotations

from typing import Any


class ClosedOnExit:
    def close(self) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
