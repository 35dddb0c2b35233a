"""Load the llm-d fixture manifests kept beside the repository (``tests/beside.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.beside import llm_d_fixture


def fixture_path(prefix: str) -> Path:
    """The fixture file whose name starts with ``prefix``; skips the test when absent."""
    return llm_d_fixture(prefix)


def pod_templates(prefix: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(owner name, pod template spec) for every Deployment / LeaderWorkerSet in a fixture."""
    with fixture_path(prefix).open(encoding="utf-8") as fh:
        for doc in yaml.safe_load_all(fh):
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get(
                "workerTemplate")
            if template:
                yield doc["metadata"]["name"], template["spec"]


def container_env(container: Mapping[str, Any], extra: Mapping[str, str] | None = None
                  ) -> dict[str, str]:
    """The container's literal env (valueFrom entries get a placeholder) plus ``extra``."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        env[item["name"]] = str(item.get("value", f"<{item['name']}>"))
    env.update(extra or {})
    return env


def vllm_container(prefix: str, owner_suffix: str) -> tuple[Mapping[str, Any], dict[str, str]]:
    """containers[0] of the owner whose name ends with ``owner_suffix`` and its env."""
    for name, spec in pod_templates(prefix):
        if name.endswith(owner_suffix):
            container = spec["containers"][0]
            return container, container_env(container)
    raise AssertionError(f"no owner *{owner_suffix} in fixture {prefix}")
