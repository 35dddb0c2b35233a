"""The inference engines whose servers this tool empties, one package per engine.

An engine knows its server's command line and configuration files, its API's reset calls and
what their answers mean, its live configuration and metrics. :mod:`kubectl_kvreset.engines.vllm`
is vLLM's.
"""
