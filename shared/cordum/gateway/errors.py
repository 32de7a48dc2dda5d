"""API errors. Every error body is ``{"error", "code", "status"}``."""

from __future__ import annotations

import re


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or snake_case(message)
        self.headers = headers or {}

    def body(self) -> dict[str, object]:
        return {"error": self.message, "code": self.code, "status": self.status}


def snake_case(message: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_") or "error"


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "unauthorized")
