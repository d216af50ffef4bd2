"""A 'loop' that imports nothing heavy: it sleeps ``seconds`` of wall time and returns (a
failed verdict: it trained nothing). For the wall deadline's accounting."""

import time


def naps(seconds: float = 0.0, **_: object) -> None:
    time.sleep(seconds)
