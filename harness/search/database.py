"""The one example database every shard and every later run shares: hypothesis's own.

A Redis server (``--redis redis://HOST:PORT/DB``) when the shards run on different machines
without a shared volume; otherwise a folder (``--database DIR``, on a shared volume in a Job).
A failure any shard found is saved under a key that names the property and the code under
test, never the shard, so every later run of that property tries it first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathways_chaos.harness.errors import ChaosConfigError, ChaosError


class DatabaseLost(ChaosError):
    """The shared example database stopped answering mid-search; the report is kept; exit 2."""


def database_failure(error: BaseException) -> str | None:
    """One line when ``error`` (or what caused it, or a member of its group) is the Redis
    client losing its server; None for anything else."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        one = todo.pop()
        if one is None or id(one) in seen:
            continue
        seen.add(id(one))
        if type(one).__module__.startswith("redis") and any(
            base.__name__ in ("ConnectionError", "TimeoutError") for base in type(one).__mro__
        ):
            text = f"{type(one).__name__}: {one}".splitlines()[0]
            return text[:200]
        todo += [one.__cause__, one.__context__, *getattr(one, "exceptions", ())]
    return None


def open_database(redis_url: str | None, directory: Path | None) -> Any:
    """Hypothesis's ``RedisExampleDatabase`` or ``DirectoryBasedExampleDatabase``."""
    if redis_url:
        if directory is not None:
            raise ChaosConfigError(
                "--redis and --database both name an example database: give one of them"
            )
        return redis_database(redis_url)
    if directory is None:
        raise ChaosConfigError("no example database: give --database DIR or --redis URL")
    if directory.exists() and not directory.is_dir():
        raise ChaosConfigError(f"--database {directory} exists and is not a folder: name a folder")
    from hypothesis.database import DirectoryBasedExampleDatabase

    directory.mkdir(parents=True, exist_ok=True)
    return DirectoryBasedExampleDatabase(directory)


def redis_database(url: str) -> Any:
    """A ``RedisExampleDatabase`` on ``url``, checked with one PING so a wrong address is one
    line now, not an error inside the first example."""
    try:
        import redis
    except ImportError:
        raise ChaosConfigError(
            "--redis needs the redis package: pip install 'pathways-chaos[search]'"
        ) from None
    from hypothesis.extra.redis import RedisExampleDatabase

    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ChaosConfigError(f"--redis {url!r}: write a URL, for example redis://HOST:6379/0")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (ValueError, redis.exceptions.RedisError) as error:
        raise ChaosConfigError(f"--redis {url}: cannot reach it ({error})") from None
    return RedisExampleDatabase(client)


def describe(database: Any) -> str:
    """Where the database lives, for the report (never a password)."""
    redis = getattr(database, "redis", None)
    if redis is not None:
        kwargs = redis.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        return f"redis {where} db {kwargs.get('db', 0)}"
    path = getattr(database, "path", None)
    return f"folder {path}" if path is not None else repr(database)


def saved(database: Any, key: bytes) -> int:
    """How many examples the database holds for ``key`` (hypothesis replays these first)."""
    return sum(1 for _ in database.fetch(key))
