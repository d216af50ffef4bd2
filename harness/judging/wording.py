"""How a verdict words what it found: one line, counted nouns. One home for the judges."""

from __future__ import annotations


def one_line(text: object, limit: int = 300) -> str:
    """An error message as one line (library errors span many), cut to ``limit``."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def leaf_name(path: str) -> str:
    """A leaf's name in a sentence; the loop may return one bare array, whose path is empty."""
    return f"leaf {path}" if path else "the returned array"
