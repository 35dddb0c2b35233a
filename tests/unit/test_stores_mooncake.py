"""Mooncake master clear against a fake admin port that answers as research/real-peers.md §4."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kubectl_kvreset.stores.mooncake import OLD_MASTER_REMEDY, MooncakeError, clear_master, key_count
from kubectl_kvreset.stores.redisclear import model_pattern


class FakeMaster:
    def __init__(self, keys: int, *, has_remove_all: bool = True, leased: int = 0) -> None:
        self.keys, self.has_remove_all, self.leased = keys, has_remove_all, leased
        self.calls: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []

    def __call__(self, method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[int, bytes]:
        self.calls.append((method, path, tuple(query)))
        if (method, path) == ("GET", "/metrics"):
            return 200, (b"# HELP master_key_count keys\n# TYPE master_key_count gauge\n"
                         b"master_key_count %d\nmaster_value_size 0\n" % self.keys)
        if path == "/api/v1/remove_all" and self.has_remove_all:
            if method != "POST":
                return 404, b""
            removable = self.keys if ("force", "true") in query else self.keys - self.leased
            self.keys -= removable
            return 200, b'{"success":true,"removed_count":%d}' % removable
        return 404, b"not found"


def test_remove_all_with_force_counts_before_and_after() -> None:
    master = FakeMaster(8, leased=8)
    result = clear_master(master)
    assert (result.before, result.removed, result.after, result.left) == (8, 8, 0, None)
    assert ("POST", "/api/v1/remove_all", (("force", "true"),)) in master.calls
    again = clear_master(master)
    assert (again.before, again.removed, again.after) == (0, 0, 0)


def test_dry_run_changes_nothing_and_old_master_is_left() -> None:
    master = FakeMaster(5)
    dry = clear_master(master, dry_run=True)
    assert (dry.before, dry.after, dry.removed) == (5, 5, None) and master.keys == 5
    assert all(c[0] == "GET" for c in master.calls)
    old = clear_master(FakeMaster(3, has_remove_all=False))
    assert old.left == OLD_MASTER_REMEDY and old.after == 3 and "v0.3.12.post1" in old.left


def test_metrics_failure_raises() -> None:
    with pytest.raises(MooncakeError, match="503"):
        key_count(lambda m, p, q: (503, b"down"))


def test_model_pattern() -> None:
    assert model_pattern("org/m*1") == "org/m\\*1@*"
    assert model_pattern("m", cluster=True) == "{m@*"
