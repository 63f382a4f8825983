"""Extractor code the broker tests' worker imports by reference (`module:attribute`)."""

from pydantic import BaseModel


class Profile(BaseModel):
    name: str
    likes: list[str]


def tidy(context: dict) -> str:
    """onExtracted: the value without the test messages' `[n] ` prefix."""
    return context["current"].split("] ", 1)[-1]
