"""The layout of LMCache 0.5.6's key strings, to tell one model's keys and files from those of
a model whose name merely starts the same way. Pure: no I/O.

``lmcache/utils.py::CacheEngineKey.to_string`` writes
``<model>@<world_size>@<worker_id>@<chunk_hash_hex>@<dtype>``; ``LayerCacheEngineKey`` adds
``@<layer_id>``; request tags add ``@`` and ``<name>%<value>`` for each ``lmcache.tag.<name>``
entry, joined by ``@``. The hash is ``f"{int:x}"`` (so it may be negative) or ``bytes.hex()``;
the dtype is a name of ``TORCH_DTYPE_TO_STR_DTYPE``. Tags come from the request's
``kv_transfer_params`` (``lmcache/integration/vllm/utils.py::
extract_request_configs_from_sampling_params``: any ``lmcache.*`` string key, any JSON value),
written verbatim with ``str()``: a tag name or value may hold any character, ``@``, ``%``,
spaces and newlines included. What LMCache writes after the dtype (or the layer id) is
therefore empty, or ``@`` and any text holding a ``%`` (the first tag's separator).

One string, several models. A model name may hold ``@`` too (``org/m@v2``), and a key is then
unambiguous only while its tag part holds nothing shaped like ``@<int>@<int>@<hex>@<dtype>``:

* without tags, a key of ``org/m@1@0@ab@half`` (``org/m@1@0@ab@half@1@0@cd@half``) never reads as
  one of ``org/m``: after ``org/m``'s four fields and a layer id ``1``, ``@0@cd@half`` would have
  to be tags, which hold ``%``; a dtype is never hex, so no field count works either;
* with a tag (``...@cd@half@user%x``) it does: the very same string is what ``org/m`` writes for
  a request tagged ``lmcache.tag.0@cd@half@user`` = ``x`` (layer 1). LMCache's own
  ``CacheEngineKey.from_string`` cannot tell either (it splits at every ``@``). The same holds the
  other way round (a key of ``org/m`` whose tags look like that reads as one of
  ``org/m@1@0@ab@half``).

No rule on the string alone can both take every key of ``org/m`` and never one of such a model.
So :func:`other_readings` finds the keys that also read as another model's (another ``@`` at
which the rest is a whole key tail); the clears keep those and say so instead of guessing
(a Redis row is then ``left``; for the disk, see :func:`disk_name_regex`).
"""

from __future__ import annotations

import re

__all__ = ["DTYPES", "KEY_TAIL", "disk_name_regex", "is_disk_file_of", "may_write_as", "other_readings"]

#: The dtype names a key can hold (``lmcache/utils.py::TORCH_DTYPE_TO_STR_DTYPE``, with the
#: float8 names it adds when torch has them).
DTYPES: tuple[str, ...] = ("half", "bfloat16", "float", "double", "int8", "uint8", "int16", "int32", "int64",
                           "bool", "fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2", "fp8_e5m2fnuz")

#: What follows ``<model>`` in a key string (a regular expression, ``str``, usable inside a
#: larger one), up to the end of the key:
#: ``@world_size@worker_id@hash@dtype[@layer_id][@<any text holding %>]``.
KEY_TAIL = (r"@-?[0-9]+@-?[0-9]+@-?[0-9a-f]+@(?:" + "|".join(DTYPES) + r")(?:@[0-9]+)?(?:@(?s:.*%.*))?")

#: The same for a LocalDiskBackend file name, without the first ``@`` and the ``.pt``, the
#: dtype as any ASCII word (this expression travels in the exec request, which must stay short).
_DISK_TAIL = r"-?\d+@-?\d+@-?[\da-f]+@\w+(@\d+)?(@.*%.*)?"


def other_readings(key: str, model_end: int, tail: re.Pattern[str]) -> bool:
    """True when ``key`` also reads as a key of another model than ``key[:model_end]``: at some
    other ``@`` after the first character, ``tail`` (a compiled :data:`KEY_TAIL`, with whatever
    the store adds after it) matches the rest in full (module docstring: such keys are kept)."""
    at = key.find("@", 1)
    while at != -1:
        if at != model_end and tail.fullmatch(key, at) is not None:
            return True
        at = key.find("@", at + 1)
    return False


def disk_name_regex() -> str:
    """What follows ``<model with "/" -> "-">@`` in the name of a LocalDiskBackend file, before
    ``.pt`` (``lmcache/v1/storage_backend/local_disk_backend.py::_key_to_path``: the key with
    every ``/`` made ``-``): :data:`KEY_TAIL` without its first ``@``, the dtype as any
    ASCII word (this expression travels in the exec request, which must stay short; what tells
    ``org/m@v2``'s files from ``org/m``'s is the numbers after ``@``). A file that also reads as
    one of a model named ``<model>@<int>@<int>@<hex>@<word>...`` (module docstring) matches too:
    the exec request has no room for that test, so the disk plan asks for consent when a pod
    writing such a model's files shares the volume (:func:`may_write_as`)."""
    return r"(?as)" + _DISK_TAIL


def may_write_as(other: str, model: str) -> bool:
    """True when some LocalDiskBackend file of model ``other`` may have the name of one of
    ``model``'s (:func:`is_disk_file_of`): the same name with ``/`` made ``-`` (``org-m`` and
    ``org/m``), or, after ``<model>@``, a name whose ``@``-parts, followed by their own numbers,
    start like a key tail, so their tagged files read as ``model``'s (``org/m@1@0@ab@half``,
    ``org/m@1``). ``org/m@v2`` and ``org/m2`` never do."""
    mine, theirs = model.replace("/", "-"), other.replace("/", "-")
    if other == model:
        return False
    if theirs == mine:
        return True
    if not theirs.startswith(mine + "@"):
        return False
    # ``<mine>@`` is read as world size, worker id, hash, dtype; what the rest of their name does
    # not fill, their own numbers do (ints are hex and words too)
    parts = theirs[len(mine) + 1:].split("@")
    shapes = (r"-?\d+", r"-?\d+", r"-?[\da-f]+", r"\w+")
    return all(re.fullmatch(p, x, re.ASCII) for p, x in zip(shapes, parts, strict=False))


def is_disk_file_of(name: str, model: str) -> bool:
    """True when ``name`` (a file name) is in the layout of a LocalDiskBackend file of ``model``:
    ``<model with "/" -> "-">@`` + :func:`disk_name_regex` + ``.pt`` (what the deletion selects).
    ``org/m`` never matches the files of ``org/m2`` or ``org/m@v2``; it does match those of
    ``org-m`` (the same name) and those of the models :func:`may_write_as` names."""
    prefix = model.replace("/", "-") + "@"
    return (name.startswith(prefix) and name.endswith(".pt")
            and re.fullmatch(disk_name_regex(), name[len(prefix):-len(".pt")]) is not None)
