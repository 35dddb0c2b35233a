"""What a vLLM command line established: :class:`ServeConfig` (the shape every engine reads a
command line into, defined in :mod:`kubectl_kvreset.engines.base` and re-exported here), and the
facts derived from it.

Which values hold a construct left unevaluated (:func:`unevaluated_in`), whether the model name is
the one vLLM uses (:func:`model_unknown_reason`, :func:`known_model`), and how many engines answer
behind an API port (:func:`engines_behind_port`, :func:`engines_unknown_reason`). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..base import ConfigReader, ServeConfig, ServerCommandError

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


class ServeCommandError(ServerCommandError):
    """A vLLM command line that vLLM itself would reject, or that cannot be read.

    The message names the flag (e.g. ``--kv-transfer-config: invalid JSON ...``) or the shell
    construct (unbalanced quotes) at fault.
    """


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
