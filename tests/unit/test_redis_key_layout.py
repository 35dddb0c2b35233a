"""The per-model Redis/Valkey clear takes only the keys in LMCache 0.5.6's layout
(``lmcache/utils.py::CacheEngineKey.to_string``), never those of a model whose name merely
starts with ``<model>@`` or ``<model>``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kubectl_kvreset.stores import redisclear
from kubectl_kvreset.stores.config import Address
from kubectl_kvreset.stores.redisclear import clear_model_keys, is_model_key


@pytest.mark.parametrize("key", [
    "org/m@1@0@abc@halfkv_bytes", "org/m@1@0@abc@halfmetadata",          # RedisConnector
    "org/m@2@1@-33f9bce42327706c@bfloat16",                              # resp://, negative hash
    "org/m@1@0@abc@half:kv_bytes", "{org/m@1@0@abc@half}:metadata",      # Valkey, cluster tag
    "org/m@1@0@abc@half@7kv_bytes",                                      # layerwise key
    "org/m@1@0@abc@fp8_e4m3fn@lora%x@user%42metadata",                   # request tags
])
def test_the_models_own_keys_match(key: str) -> None:
    assert is_model_key(key, "org/m") and is_model_key(key.encode(), "org/m")


@pytest.mark.parametrize("key", [
    "org/m@v2@1@0@abc@halfkv_bytes",         # model org/m@v2
    "org/m2@1@0@abc@halfkv_bytes",           # model org/m2
    "org/m@1@0@abc@half@1@0@def@half",       # model org/m@1@0@abc@half
    "org/m@1@0@abc@halfx",                   # no such dtype or suffix
    "org/m@1@0@xyz@half",                    # hash not hex
    "org/m@1@0@abc",                         # too short
    "xorg/m@1@0@abc@half",
])
def test_look_alike_keys_do_not_match(key: str) -> None:
    assert not is_model_key(key, "org/m")


def test_a_model_with_at_and_glob_specials_matches_its_own_keys_only() -> None:
    assert is_model_key("org/m@v2@1@0@abc@halfkv_bytes", "org/m@v2")
    assert is_model_key("a*[b]@1@0@0@half", "a*[b]") and not is_model_key("aX[b]@1@0@0@half", "a*[b]")


class FakeRedis:
    """Redis's SCAN MATCH over a dict (``*`` and backslash escapes, as ``util.c::stringmatchlen``)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = {k.encode() for k in keys}

    def scan_iter(self, match: str, count: int) -> Any:
        rx = re.compile("".join(".*" if tok == "*" else re.escape(tok[-1])
                                for tok in re.findall(r"\\.|.", match, re.S)).encode(), re.S)
        return iter(sorted(k for k in self.keys if rx.fullmatch(k)))

    def scan(self, cursor: int, match: str, count: int) -> tuple[int, list[bytes]]:
        """One page holding every match (cursor 0: the scan is over), as the clear reads SCAN."""
        return 0, list(self.scan_iter(match, count))

    def unlink(self, *keys: bytes) -> int:
        gone = [k for k in keys if k in self.keys]
        self.keys -= set(gone)
        return len(gone)

    def close(self) -> None:
        pass


def _run(monkeypatch: pytest.MonkeyPatch, fake: FakeRedis, model: str, **kw: Any) -> redisclear.RedisClear:
    monkeypatch.setattr(redisclear, "_client", lambda *a, **k: fake)
    return clear_model_keys(lambda: None, Address("redis", 6379), model, **kw)  # type: ignore[arg-type,return-value]


KEYS = [f"{m}@1@0@{i:x}@half{s}" for m in ("org/m", "org/m@v2", "org/m2") for i in range(3)
        for s in ("kv_bytes", "metadata")]


def test_clear_unlinks_only_the_models_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRedis(KEYS)
    done = _run(monkeypatch, fake, "org/m")
    assert (done.pattern, done.before, done.removed, done.after, done.kept) == ("org/m@*", 6, 6, 0, 6)
    assert sorted(fake.keys) == sorted(k.encode() for k in KEYS if not k.startswith("org/m@1@"))
    again = _run(monkeypatch, fake, "org/m@v2", dry_run=True)
    assert (again.before, again.removed, again.after, again.kept) == (6, 0, 6, 0)


def test_cluster_mode_takes_bare_and_hash_tagged_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRedis(["org/m@1@0@a@half", "{org/m@1@0@b@half}:kv_bytes", "{org/m@v2@1@0@a@half}:kv_bytes"])
    done = _run(monkeypatch, fake, "org/m", cluster=True)
    assert (done.before, done.after, done.kept) == (2, 0, 1)
    assert fake.keys == {b"{org/m@v2@1@0@a@half}:kv_bytes"}


# LMCache 0.5.6 writes tag values verbatim (``lmcache/utils.py::CacheEngineKey.to_string``:
# ``f"{k}%{v}"`` joined by ``@``): any character may follow the first tag's ``%``
@pytest.mark.parametrize("key", [
    "org/m@1@0@77@half@user%alice@example.comkv_bytes",
    "org/m@1@0@77@half@user%alice@example.commetadata",
    "org/m@1@0@77@half@3@user%a%b@c d%e@@%kv_bytes",                     # layerwise, several tags
    "org/m@1@0@77@half@who%two words\nand a line",                       # space, newline
    "{org/m@1@0@77@half@user%alice@example.com}:kv_bytes",
])
def test_keys_with_at_and_percent_in_tag_values_match(key: str) -> None:
    assert is_model_key(key, "org/m"), key


def _key(model: str, ws: int, worker: int, chunk: int, dtype: str, layer: int | None,
         tags: list[tuple[str, str]]) -> str:
    """A key string as ``CacheEngineKey.to_string``/``LayerCacheEngineKey.to_string`` writes it."""
    s = f"{model}@{ws}@{worker}@{chunk:x}@{dtype}" + ("" if layer is None else f"@{layer}")
    return s + ("@" + "@".join(f"{k}%{v}" for k, v in tags) if tags else "")


def test_a_key_that_two_models_write_is_kept_and_unsure() -> None:
    from kubectl_kvreset.stores.redisclear import is_unsure_key

    # org/m@1@0@ab@half with a tag writes the string org/m writes for tag '0@cd@half@u'
    both = "org/m@1@0@ab@half@1@0@cd@half@u%xkv_bytes"
    assert is_unsure_key(both, "org/m") and is_unsure_key(both, "org/m@1@0@ab@half")
    assert not is_model_key(both, "org/m") and not is_model_key(both, "org/m@1@0@ab@half")
    # without tags the string has one reading only
    assert is_model_key("org/m@1@0@ab@half@1@0@cd@halfkv_bytes", "org/m@1@0@ab@half")
    assert not is_model_key("org/m@1@0@ab@half@1@0@cd@halfkv_bytes", "org/m")


def test_unsure_keys_are_not_unlinked_and_the_row_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = ["org/m@1@0@77@half@user%alice@example.comkv_bytes", "org/m@1@0@77@halfkv_bytes"]
    unsure = ["org/m@1@0@ab@half@1@0@cd@half@u%xkv_bytes"]
    fake = FakeRedis(mine + unsure + ["org/m@v2@1@0@1@half@u%v"])
    done = _run(monkeypatch, fake, "org/m")
    assert (done.before, done.removed, done.after, done.kept, done.unsure_owner) == (2, 2, 0, 1, 1)
    assert fake.keys == {k.encode() for k in unsure + ["org/m@v2@1@0@1@half@u%v"]}


_name = st.text(st.sampled_from("ab/-.@%_ 1"), min_size=1, max_size=12)
_tags = st.lists(st.tuples(st.text(max_size=8), st.text(max_size=12)), max_size=3)
_fields = st.tuples(st.integers(-3, 64), st.integers(-3, 8), st.integers(-2**63, 2**64),
                    st.sampled_from(["half", "bfloat16", "fp8_e5m2", "int8"]), st.none() | st.integers(0, 80))


@settings(max_examples=400, deadline=None)
@given(model=_name, fields=_fields, tags=_tags, suffix=st.sampled_from(["kv_bytes", "metadata", ""]))
def test_own_keys_match_unless_another_model_writes_the_same_string(
        model: str, fields: tuple[int, int, int, str, int | None], tags: list[tuple[str, str]], suffix: str) -> None:
    from kubectl_kvreset.stores.redisclear import is_unsure_key

    key = _key(model, *fields, tags) + suffix
    assert is_model_key(key, model) or is_unsure_key(key, model), key


@settings(max_examples=400, deadline=None)
@given(model=_name, other=_name, fields=_fields, tags=_tags, suffix=st.sampled_from(["kv_bytes", "metadata", ""]))
def test_another_models_keys_never_match(model: str, other: str, fields: tuple[int, int, int, str, int | None],
                                         tags: list[tuple[str, str]], suffix: str) -> None:
    assume(other != model)
    for name in (other, model + "@" + other, model + other, model.replace("/", "-") + "@" + other):
        if name != model:
            assert not is_model_key(_key(name, *fields, tags) + suffix, model), (name, model)


@settings(max_examples=300, deadline=None)
@given(model=_name, other=_name, fields=_fields, tags=_tags)
def test_disk_files_of_another_model_never_match(model: str, other: str, fields: tuple[int, int, int, str, int | None],
                                                 tags: list[tuple[str, str]]) -> None:
    from kubectl_kvreset.stores.lmcachekey import is_disk_file_of, may_write_as

    def disk(name: str) -> str:   # local_disk_backend.py::_key_to_path
        return _key(name, *fields, tags).replace("/", "-") + ".pt"

    assert is_disk_file_of(disk(model), model), disk(model)
    for name in (model + "@" + other, model + other, "x" + model):
        # a file of another model is taken only when the plan knows to ask (may_write_as)
        assert not is_disk_file_of(disk(name), model) or may_write_as(name, model), (name, model)
    assert may_write_as(model.replace("/", "-") if "/" in model else model + "/x", model) is ("/" in model)


def test_disk_files_of_at_tail_models_are_named_for_consent() -> None:
    from kubectl_kvreset.stores.lmcachekey import is_disk_file_of, may_write_as

    assert is_disk_file_of("org-m@1@0@77@half@user%alice@example.com.pt", "org/m")
    assert is_disk_file_of("org-m@1@0@77@half@3@a b%c%d@e.pt", "org/m")
    assert may_write_as("org/m@1@0@ab@half", "org/m") and may_write_as("org-m", "org/m")
    assert not may_write_as("org/m@v2", "org/m") and not may_write_as("org/m2", "org/m")
    assert not may_write_as("org/m", "org/m")
