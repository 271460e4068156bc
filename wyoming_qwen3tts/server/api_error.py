"""The errors of the voice lab and its API: a message for the user and the HTTP status that
says what kind of problem it is (docs/HTTP.md, "Errors")."""
from __future__ import annotations


class ApiError(ValueError):
    """A request the voice lab refuses; `status` is 4xx for the client's input, 5xx for ours."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
