"""Data files the unit tests read, written for them (not recorded from a server)."""

from pathlib import Path

#: A one-engine vLLM ``GET /metrics`` text with the current family names (see its header).
METRICS_SAMPLE = Path(__file__).with_name("vllm-metrics-engine0.txt")
