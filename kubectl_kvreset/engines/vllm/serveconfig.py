"""What a vLLM command line established: :class:`ServeConfig`, and the facts derived from it.

Which values hold a construct left unevaluated (:func:`unevaluated_in`), whether the model name is
the one vLLM uses (:func:`model_unknown_reason`, :func:`known_model`), and how many engines answer
behind an API port (:func:`engines_behind_port`, :func:`engines_unknown_reason`). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: Reads a ``--config`` path of the container: returns ``(yaml_text, where)`` (``where`` names
#: the source for notes, e.g. ``ConfigMap vllm-config key config.yaml``); raises
#: :class:`~kubectl_kvreset.engines.vllm.configfile.ConfigFileError` when the file cannot be read.
ConfigReader = Callable[[str], "tuple[str, str]"]

__all__ = [
    "MODEL_REDIRECT_ENV",
    "ConfigReader",
    "ServeCommandError",
    "ServeConfig",
    "engines_behind_port",
    "engines_unknown_reason",
    "known_model",
    "model_unknown_reason",
    "unevaluated_in",
]


class ServeCommandError(ValueError):
    """A vLLM command line that vLLM itself would reject, or that cannot be read.

    The message names the flag (e.g. ``--kv-transfer-config: invalid JSON ...``) or the shell
    construct (unbalanced quotes) at fault.
    """


@dataclass(frozen=True)
class ServeConfig:
    """What a vLLM API server was told on its command line.

    Attributes:
        argv: the vLLM invocation after every expansion, from ``vllm``/``python3`` on.
        entrypoint: ``"vllm serve"`` or ``"api_server"``
            (``python3 -m vllm.entrypoints.openai.api_server``).
        model: the positional model of ``vllm serve`` or ``--model``; None when absent.
        served_model_name: the first ``--served-model-name`` value, or None.
        api_ports: every API server port, ascending. ``--port`` (default 8000); with
            ``--data-parallel-multi-port-external-lb`` one port per local DP rank,
            ``port .. port+N-1`` where N is ``--data-parallel-size-local``. Empty when the port
            could not be resolved (see ``notes``).
        scheme: ``"https"`` when ``--ssl-certfile``/``--ssl-keyfile`` is given, else ``"http"``.
        kv_transfer_config: decoded ``--kv-transfer-config`` (dotted keys merged, human-readable
            numbers expanded), or None.
        kv_offloading_size_gib: ``--kv-offloading-size`` in GiB, or None.
        kv_offloading_backend: ``--kv-offloading-backend``; ``"native"`` when only the size is
            given; None without a size.
        data_parallel_size_local: ``--data-parallel-size-local`` (``-dpl``), or None.
        config_file: ``--config FILE`` (or ``--config=FILE``, which vLLM does not expand).
        config_source: where the file's flags were read from (``ConfigMap NAME key K``), None
            when it was not read.
        config_error: why a ``--config`` file vLLM reads could not be read (its port and tiers
            are then not established), else None.
        unresolved_vars: names of ``$VAR``/``$(VAR)`` references the environment could not
            resolve (kept literally in ``argv``).
        unevaluated: ``(literal, reason)`` for each construct kept as written in ``argv``
            because it could not be evaluated here (command substitution, an unset variable, a
            ``$(VAR)`` whose value the spec does not hold): a value holding ``literal`` is not
            what vLLM sees (:func:`unevaluated_in`).
        notes: human-readable remarks about what could not be known.
        env: the environment vLLM would see: the container env plus what the script exported or
            set for the command (e.g. ``export VLLM_USE_SIMPLE_KV_OFFLOAD=1``).
        engines_per_port: how many engines (DP ranks) answer behind each API port, from
            :func:`engines_behind_port`; 1 without data parallelism or with one API server per
            rank.
        model_unknown: why ``model`` is not the name vLLM uses (``model_config.model``, which
            names the FS tier's directories and LMCache's keys and files): it holds a construct
            not evaluated, vLLM redirects it, or it is a remote URI (:func:`model_unknown_reason`);
            None when ``model`` is that name. Per-model steps are then left.
        model_live: ``model`` is the running server's ``model_config.model`` (read from
            ``/server_info``), not the spec's: nothing redirects it any more.
        engines_flags: the data-parallel flags that decide ``engines_per_port`` as vLLM reads
            them (``("--data-parallel-size $(DP)",)``); empty without them or with one API
            server per rank.
        engines_unknown: why the flags do not establish ``engines_per_port`` (a value holding a
            construct not evaluated, such as ``$(DP)`` from a ConfigMap, or an unread
            ``--config`` file), so more engines than counted may answer behind the port; None
            when they do.
        engines_secret: ``engines_per_port`` was read from a Secret's value, which is never
            shown (the count is used, not printed).
    """

    argv: tuple[str, ...]
    entrypoint: str
    model: str | None
    served_model_name: str | None
    api_ports: tuple[int, ...]
    scheme: str
    kv_transfer_config: Mapping[str, Any] | None
    kv_offloading_size_gib: float | None
    kv_offloading_backend: str | None
    data_parallel_size_local: int | None
    config_file: str | None
    unresolved_vars: tuple[str, ...]
    notes: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    engines_per_port: int = 1
    config_source: str | None = None
    config_error: str | None = None
    unevaluated: tuple[tuple[str, str], ...] = ()
    model_unknown: str | None = None
    model_live: bool = False
    engines_flags: tuple[str, ...] = ()
    engines_unknown: str | None = None
    engines_secret: bool = False


#: vLLM's model-redirect variable (``vllm/envs.py``): a file mapping model names to others.
MODEL_REDIRECT_ENV = "VLLM_MODEL_REDIRECT_PATH"
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def model_unknown_reason(model: str | None, unevaluated: Sequence[tuple[str, str]], env: Mapping[str, str],
                         redirect_source: str | None = None) -> str | None:
    """Why ``model`` (as the command line names it) is not the name vLLM's
    ``model_config.model`` takes, or None when it is.

    * it holds a construct left as written (:func:`unevaluated_in`);
    * ``VLLM_MODEL_REDIRECT_PATH`` is set in ``env`` (or by ``redirect_source``, a ``valueFrom``
      the spec does not hold): vLLM replaces the name by the one that file maps it to, a local
      directory (``vllm/transformers_utils/utils.py::maybe_model_redirect``, called from
      ``vllm/config/model.py::ModelConfig.__post_init__``);
    * it is a URI (``s3://``, ``gs://``, other schemes alike): vLLM 0.32 mirrors an object-store
      model into a temporary local directory and uses that directory as ``model``
      (``vllm/config/model.py::maybe_pull_model_tokenizer_for_runai`` sets ``self.model`` to
      ``ObjectStorageModel.dir``, ``vllm/transformers_utils/runai_utils.py``).
    """
    if not model:
        return None
    unknown = unevaluated_in(model, unevaluated)
    if unknown:
        return f"the model name {model!r} cannot be evaluated from the pod spec: {'; '.join(unknown)}"
    if env.get(MODEL_REDIRECT_ENV) or redirect_source:
        where = redirect_source or f"{MODEL_REDIRECT_ENV}={env.get(MODEL_REDIRECT_ENV)}"
        return (f"{MODEL_REDIRECT_ENV} is set ({where}): vLLM replaces the model name {model!r} by the one that "
                "file maps it to (vllm/transformers_utils/utils.py::maybe_model_redirect), which the plugin does "
                "not read")
    if _URI_RE.match(model):
        return (f"the model {model!r} is a remote URI: vLLM copies it to a local directory and uses that directory "
                "as the model name (vllm/config/model.py::maybe_pull_model_tokenizer_for_runai), which the pod "
                "spec does not say")
    return None


def known_model(cfg: ServeConfig) -> str | None:
    """The model name vLLM uses (``model_config.model``) when the spec tells it, else None
    (see :attr:`ServeConfig.model_unknown`)."""
    return None if cfg.model_unknown else cfg.model


def unevaluated_in(value: str | None, unevaluated: Sequence[tuple[str, str]]) -> list[str]:
    """Why ``value`` (a path or setting read from the command line or its environment) is not
    what the server sees: the reasons of the ``unevaluated`` constructs (see
    :attr:`ServeConfig.unevaluated`) whose literal text it holds; empty when none.

    A value holding such a literal was built around a construct the reader left as written, so
    the real value is unknown (a literal that the spec itself writes, e.g. in single quotes,
    is never recorded there and does not count)."""
    if not value:
        return []
    return list(dict.fromkeys(reason for literal, reason in unevaluated if literal and literal in value))


def engines_behind_port(dp_size: int | None, dp_local: int | None, *, external_lb: bool,
                        hybrid_lb: bool) -> int:
    """The number of engines one API server port fronts (vLLM's DP load-balancing modes,
    ``vllm/v1/engine/core_client.py::EngineCoreClient.make_async_mp_client``: external LB
    (``--data-parallel-external-lb``, ``--data-parallel-multi-port-external-lb``) gives a
    client per DP rank, so one engine per API server; internal LB (the default with
    ``--data-parallel-size`` N) gives ``DPLBAsyncMPClient``, one API server balancing over
    every rank, N; hybrid LB (``--data-parallel-hybrid-lb``) balances over the node's local
    ranks, ``--data-parallel-size-local``)."""
    if external_lb:
        return 1
    if hybrid_lb:
        return max(dp_local or dp_size or 1, 1)
    return max(dp_size or dp_local or 1, 1)


def engines_unknown_reason(flags: Sequence[str], unevaluated: Sequence[tuple[str, str]],
                           config_error: str | None) -> str | None:
    """Why the data-parallel ``flags`` (``"--data-parallel-size VALUE"`` items, see
    :attr:`ServeConfig.engines_flags`) do not establish the engines behind a port, or None
    when they do: a value that is not an integer (the reasons of the ``unevaluated`` constructs
    it holds, e.g. a ``$(DP)`` whose ConfigMap is not read), or a ``--config`` file that could
    not be read (``config_error``), which may set the size itself."""
    why: list[str] = []
    for flag in flags:
        name, _, raw = flag.partition(" ")
        try:
            int(raw)
        except ValueError:
            reasons = unevaluated_in(raw, unevaluated)
            why.append(f"{name} {raw}: " + ("; ".join(reasons) if reasons else "not an integer here"))
    if config_error is not None:
        why.append(f"the --config file, which may set the data-parallel size, was not read ({config_error})")
    return "; ".join(why) or None
