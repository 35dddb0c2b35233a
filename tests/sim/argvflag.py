"""Reading one flag's value from a server's argv, shared by the real-server launchers
(tests/sim/realpeers.py, tests/sim/realsglang.py)."""

from __future__ import annotations

__all__ = ["_flag_value"]


def _flag_value(argv: list[str], *names: str) -> str | None:
    """The last value of ``--name V`` / ``--name=V`` (gflags' ``-name`` too), or None."""
    found = None
    for i, tok in enumerate(argv):
        for n in names:
            bare = n.lstrip("-")
            for prefix in (f"--{bare}", f"-{bare}"):
                if tok == prefix and i + 1 < len(argv):
                    found = argv[i + 1]
                elif tok.startswith(prefix + "="):
                    found = tok.split("=", 1)[1]
    return found
