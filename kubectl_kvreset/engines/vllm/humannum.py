"""vLLM's human-readable numbers (``80g``, ``2G``, ``25.6k``), alone and inside JSON flag values.

Rules from ``vllm/utils/argparse_utils.py::human_readable_int`` and
``vllm/engine/arg_utils.py::_expand_json_human_readable_numbers`` (vLLM >= 0.20). Pure.
"""

from __future__ import annotations

import re

__all__ = ["expand_human_readable_json", "human_readable_int"]


_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$", re.ASCII)
_HUMAN_IN_JSON_RE = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", re.ASCII)


def human_readable_int(value: str) -> int:
    """Convert ``"25.6k"``/``"80g"``/``"2G"``/``"1000"`` to an int as vLLM does.

    Lower-case suffixes ``k m g t`` are powers of 1000 and allow decimals; upper-case ``K M G T``
    are powers of 1024 and must be whole numbers.

    Raises:
        ValueError: not a number of that form (including a decimal with an upper-case suffix).
    """
    text = value.strip()
    m = _HUMAN_RE.match(text)
    if m is None:
        return int(text)
    number, suffix = m.group(1), m.group(2)
    if suffix in _DECIMAL:
        try:
            return int(float(number) * _DECIMAL[suffix])
        except OverflowError as exc:
            raise ValueError(f"number too large: {value!r}") from exc
    if "." in number:
        raise ValueError(f"decimals are not allowed with binary suffix {suffix!r}: {value!r}")
    return int(number) * _BINARY[suffix]


def expand_human_readable_json(text: str) -> str:
    """Replace bare human-readable numbers (``80g``, ``1K``) outside JSON strings by integers.

    Raises:
        ValueError: a decimal with a binary (upper-case) suffix, such as ``1.5G``.
    """
    out: list[str] = []
    seg_start = 0
    i = 0
    n = len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
                out.append(text[seg_start:i + 1])
                seg_start = i + 1
        elif c == '"':
            out.append(_HUMAN_IN_JSON_RE.sub(lambda m: str(human_readable_int(m.group(0))),
                                             text[seg_start:i]))
            seg_start = i
            in_str = True
        i += 1
    tail = text[seg_start:]
    out.append(tail if in_str else _HUMAN_IN_JSON_RE.sub(
        lambda m: str(human_readable_int(m.group(0))), tail))
    return "".join(out)
