"""The no-sandbox reading of a ``bash -c`` container script (tests/sim/pods.py ``script_serve_argv``)."""

from __future__ import annotations

from tests.sim.pods import script_serve_argv
from tests.sim.serveargs import parse_vllm_argv

DECODE = """\
# decode server: NIXL for the prefill/decode transfer
exec vllm serve Qwen/Qwen3-0.6B \\
  --port 8200 \\
  --kv-transfer-config '{"kv_connector":"NixlConnector",
    "kv_role":"kv_both"}'
"""


def test_the_first_server_command_of_a_script_is_read() -> None:
    argv = script_serve_argv(["/bin/bash", "-c", DECODE])
    assert argv is not None and argv[:3] == ["vllm", "serve", "Qwen/Qwen3-0.6B"]
    parsed = parse_vllm_argv(argv)
    assert parsed is not None and parsed.api_ports == (8200,)
    chained = script_serve_argv(["sh", "-c", "pip list; python3 -m vllm.entrypoints.openai.api_server "
                                 "--model m --port 9000 && echo done"])
    assert chained == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "9000"]


def test_anything_else_is_not_a_script() -> None:
    assert script_serve_argv(["vllm", "serve", "m"]) is None
    assert script_serve_argv(["/bin/bash", "-c", "echo hello"]) is None
    assert script_serve_argv(["/bin/bash", "-c", "vllm serve 'unterminated"]) is None
    assert script_serve_argv(["python3", "-c", "vllm serve m"]) is None
