"""vLLM ``--config FILE``: where a pod's file comes from, and the flags vLLM reads out of it.

Pure: no I/O. :func:`locate` turns a path inside the container into the ConfigMap or Secret key
that Kubernetes mounts there (plain, ``items``, ``subPath`` and projected volumes), or says why
the file cannot be read through the API (a PVC, an emptyDir, the image). :func:`config_args`
turns the YAML text into the argv entries vLLM splices into its command line. The API reads are
done by :mod:`kubectl_kvreset.discovery`.

vLLM's rules (read in vLLM 0.32.0, ``vllm/utils/argparse_utils.py``,
``FlexibleArgumentParser.parse_args``, ``_pull_args_from_config`` and ``load_config_file``):

* The file is read only when the separate token ``--config`` is in argv (``if "--config" in
  args``); ``--config=FILE`` is accepted by argparse (``entrypoints/launchers/cli_args.py``) and
  never expanded. More than one ``--config`` is refused.
* Only ``.yaml``/``.yml`` names are accepted (the extension after the last dot).
* Each top-level key becomes ``--KEY``: ``true`` -> ``--KEY``; ``false`` -> ``--no-KEY`` (kept
  only where vLLM has that flag; a reader that ignores unknown flags may keep it always); a list
  -> ``--KEY item ...`` (an empty one is dropped); a mapping -> ``--KEY <json.dumps>``; anything
  else -> ``--KEY str(value)``. Keys go through the same ``_``/``-`` folding as command-line
  flags, so ``kv_transfer_config`` and ``kv-transfer-config`` are the same.
* The entries are inserted after ``serve MODEL`` (or first, for the api_server module), before
  the other command-line arguments, so a flag on the command line wins over the file.
* A nested mapping is ``json.dumps``-ed from vLLM 0.16.0 on; up to 0.14.0 it became
  ``str(dict)`` (Python quotes), which no JSON flag accepts (``vllm/utils/argparse_utils.py``). 0.15.x is
  not known and read as the newer form, with a note.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigFileError", "ConfigSource", "config_args", "decode_key", "locate"]


class ConfigFileError(ValueError):
    """A ``--config`` file that cannot be read or used; the message says why and what to do."""


@dataclass(frozen=True)
class ConfigSource:
    """The API object holding a mounted file: ``kind`` ``ConfigMap`` or ``Secret``, its ``name``
    (in the pod's namespace), the ``key`` whose value is the file, and the pod ``volume`` name."""

    kind: str
    name: str
    key: str
    volume: str

    def describe(self) -> str:
        """``ConfigMap vllm-config key config.yaml`` (for notes)."""
        return f"{self.kind} {self.name} key {self.key}"


def _mount_for(container: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], str] | None:
    """The volumeMount whose ``mountPath`` holds ``path`` (the longest one) and the path below it."""
    best: tuple[Mapping[str, Any], str] | None = None
    best_len = -1
    for mount in container.get("volumeMounts") or []:
        mp = posixpath.normpath(str(mount.get("mountPath") or "/"))
        if path == mp:
            rest = ""
        elif path.startswith(mp.rstrip("/") + "/"):
            rest = path[len(mp.rstrip("/")) + 1:]
        else:
            continue
        if len(mp) > best_len:
            best, best_len = (mount, rest), len(mp)
    return best


def _key_in(items: Any, rel: str) -> str | None:
    """The key a configMap/secret projection puts at ``rel``: the ``items`` entry whose ``path``
    is ``rel``; without ``items`` every key is a file named after it."""
    if items:
        for item in items:
            if posixpath.normpath(str(item.get("path", ""))) == rel:
                return str(item.get("key", ""))
        return None
    return rel if rel and "/" not in rel else None


_OTHER_VOLUMES = {
    "persistentVolumeClaim": "a PersistentVolumeClaim", "emptyDir": "an emptyDir",
    "hostPath": "a hostPath", "nfs": "an NFS", "csi": "a CSI", "ephemeral": "an ephemeral",
    "image": "an image",
}


def locate(pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> ConfigSource:
    """The ConfigMap or Secret key Kubernetes mounts at ``path`` in ``container`` of ``pod``.

    ``path`` is what ``--config`` names; a relative one is taken from the container's
    ``workingDir``. ``subPath`` mounts, ``items`` and ``projected`` sources are followed as the
    kubelet lays them out (``pkg/volume/util/atomic_writer.go``: each key or item path is a file
    under the mount).

    Raises:
        ConfigFileError: the file is not on a ConfigMap, Secret or projected volume (a PVC, an
            emptyDir, the container image), a ``subPathExpr`` mount, or no key lands there.
    """
    if not path.startswith("/"):
        workdir = str(container.get("workingDir") or "")
        if not workdir.startswith("/"):
            raise ConfigFileError(f"--config {path}: a relative path and no workingDir; the file's "
                                  "place in the container is not known")
        path = posixpath.join(workdir, path)
    path = posixpath.normpath(path)
    found = _mount_for(container, path)
    if found is None:
        raise ConfigFileError(f"--config {path}: not on a mounted volume (it is in the container "
                              "image), which the API cannot read")
    mount, rest = found
    if mount.get("subPathExpr"):
        raise ConfigFileError(f"--config {path}: volume {mount.get('name')} is mounted with "
                              "subPathExpr, which is not followed")
    sub = posixpath.normpath(str(mount["subPath"])) if mount.get("subPath") else ""
    rel = posixpath.normpath(posixpath.join(sub, rest)) if (sub or rest) else ""
    vol_name = str(mount.get("name", ""))
    volume = next((v for v in ((pod.get("spec") or {}).get("volumes") or []) if v.get("name") == vol_name), None)
    if volume is None:
        raise ConfigFileError(f"--config {path}: volume {vol_name} is not in the pod spec")
    candidates: list[tuple[str, str, Any]] = []
    if "configMap" in volume:
        cm = volume["configMap"] or {}
        candidates.append(("ConfigMap", str(cm.get("name", "")), cm.get("items")))
    elif "secret" in volume:
        sec = volume["secret"] or {}
        candidates.append(("Secret", str(sec.get("secretName", "")), sec.get("items")))
    elif "projected" in volume:
        for source in (volume["projected"] or {}).get("sources") or []:
            if "configMap" in source:
                cm = source["configMap"] or {}
                candidates.append(("ConfigMap", str(cm.get("name", "")), cm.get("items")))
            elif "secret" in source:
                sec = source["secret"] or {}
                candidates.append(("Secret", str(sec.get("name", "")), sec.get("items")))
    else:
        kind = next((text for k, text in _OTHER_VOLUMES.items() if k in volume), "a non-ConfigMap")
        raise ConfigFileError(f"--config {path}: on {kind} volume ({vol_name}), which the API "
                              "cannot read; put the file in a ConfigMap or pass the flags on the "
                              "command line")
    for kind, name, items in candidates:
        key = _key_in(items, rel)
        if key:
            return ConfigSource(kind, name, key, vol_name)
    raise ConfigFileError(f"--config {path}: no key of volume {vol_name} is mounted there")


def decode_key(obj: Mapping[str, Any], source: ConfigSource) -> str:
    """The text of ``source.key`` in a ConfigMap or Secret object as the API returns it
    (ConfigMap ``data`` or base64 ``binaryData``; Secret base64 ``data``).

    Raises:
        ConfigFileError: the key is absent, or not base64/UTF-8.
    """
    data = obj.get("data") or {}
    if source.kind == "ConfigMap" and source.key in data:
        return str(data[source.key])
    raw = data.get(source.key) if source.kind == "Secret" else (obj.get("binaryData") or {}).get(source.key)
    if raw is None:
        raise ConfigFileError(f"{source.kind} {source.name} has no key {source.key}")
    try:
        return base64.b64decode(str(raw), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{source.kind} {source.name} key {source.key}: not UTF-8 text ({exc})") from exc


def _str_dict_form(version: tuple[int, ...] | None) -> bool:
    return version is not None and version[:2] < (0, 15)


def config_args(text: str, path: str, *, version: tuple[int, ...] | None = None) -> tuple[list[str], list[str]]:
    """The argv entries vLLM builds from a ``--config`` YAML file, and notes.

    ``version``: the server's release as a tuple (e.g. ``(0, 14, 0)``) where known before any
    call (the image tag); it decides the nested-mapping form (see the module docstring).

    Returns:
        ``(args, notes)``: e.g. ``(["--port", "8123", "--kv-transfer-config", "{...}"], [])``.

    Raises:
        ConfigFileError: not a ``.yaml``/``.yml`` name, YAML that does not parse, or a file that
            is not a mapping (vLLM fails to start on each of these).
    """
    import yaml  # PyYAML, as vLLM itself uses (yaml.safe_load)

    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        raise ConfigFileError(f"--config {path}: vLLM reads only .yaml/.yml files ({extension} given)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"--config {path}: not valid YAML ({exc})") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config {path}: the file is not a mapping of flags")
    args: list[str] = []
    notes: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key)
        if isinstance(value, bool):
            if value:
                args.append(flag)
            else:
                args.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                args.append(flag)
                args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            args.append(flag)
            if _str_dict_form(version):
                args.append(str(value))
            else:
                if version is not None and version[:2] == (0, 15):
                    notes.append(f"--config {path}: {key} is a nested mapping; how vLLM 0.15 reads "
                                 "one is not known (0.16+ reads it as JSON)")
                args.append(json.dumps(value))
        else:
            args.append(flag)
            args.append(str(value))
    return args, notes
