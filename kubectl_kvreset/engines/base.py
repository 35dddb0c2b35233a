"""The extension point for inference engines: :class:`Engine`, the one base class an engine
implements (one subclass per engine package, registered in :mod:`kubectl_kvreset.engines`), and
the shapes every engine answers in: :class:`ServeConfig` (a server container's command line),
:class:`ResetAnswer` / :class:`ResetOutcome` (what one reset answer means) and
:class:`LiveConfig` (what the running server says of its KV configuration).

Pure: no I/O. The callers do the HTTP (:mod:`kubectl_kvreset.podapi`) and the Kubernetes reads
(:mod:`kubectl_kvreset.discovery`); an engine reads pod-spec containers and answer bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from packaging.version import Version

from ..tiers import KVLayout

__all__ = [
    "ConfigReader", "Engine", "EngineMetrics", "FileTier", "LiveConfig", "MetricsParseError", "ResetAnswer",
    "ResetOutcome", "ServeConfig", "ServerCommandError", "TierReset",
]

#: Reads a configuration file a container names (vLLM's ``--config``): ``path -> (yaml_text,
#: where)`` (``where`` names the source for notes, e.g. ``ConfigMap vllm-config key config.yaml``);
#: raises :class:`~kubectl_kvreset.engines.vllm.configfile.ConfigFileError` (a ``ValueError``)
#: when the file cannot be read.
ConfigReader = Callable[[str], "tuple[str, str]"]


class ServerCommandError(ValueError):
    """A server command line its engine would reject, or that cannot be read (the message names
    the flag or shell construct at fault). Discovery notes it on the pod and skips the
    container."""


@dataclass(frozen=True)
class ServeConfig:
    """What an inference server was told on its command line, in vLLM's terms (the first engine
    read into it; another engine fills what its server has and leaves the rest at their
    defaults: ``kv_transfer_config`` None, ``engines_per_port`` 1...).

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
            what vLLM sees (:func:`kubectl_kvreset.engines.vllm.servecmd.unevaluated_in`).
        notes: human-readable remarks about what could not be known.
        env: the environment vLLM would see: the container env plus what the script exported or
            set for the command (e.g. ``export VLLM_USE_SIMPLE_KV_OFFLOAD=1``).
        engines_per_port: how many engines (DP ranks) answer behind each API port, from
            :func:`kubectl_kvreset.engines.vllm.servecmd.engines_behind_port`; 1 without data parallelism or
            with one API server per
            rank.
        model_unknown: why ``model`` is not the name vLLM uses (``model_config.model``, which
            names the FS tier's directories and LMCache's keys and files): it holds a construct
            not evaluated, vLLM redirects it, or it is a remote URI
            (:func:`kubectl_kvreset.engines.vllm.servecmd.model_unknown_reason`);
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


class ResetOutcome(str, Enum):
    """How one reset call ended, as the caller should read it (each engine maps its server's
    answers onto these; the comments give vLLM's)."""

    CLEARED = "cleared"          # {"success": true}
    UNCONFIRMED = "unconfirmed"  # empty 200 (vLLM < 0.26): done, result unknown
    BUSY = "busy"                # {"success": false}: blocks still held, retry
    DEV_MODE_OFF = "dev-mode-off"  # 404 from vLLM: the dev routes are not mounted
    SERVER_ERROR = "server-error"  # vLLM's own 5xx (engine error, forced reset failed)
    BAD_REQUEST = "bad-request"    # 400/405/422: this client sent something that vLLM refused
    UNEXPECTED = "unexpected"      # anything else


@dataclass(frozen=True)
class ResetAnswer:
    """The meaning of one reset answer: ``outcome``, a short ``detail`` for the report and
    whether repeating the (idempotent) call may help (``retryable``)."""

    outcome: ResetOutcome
    detail: str
    retryable: bool


@dataclass(frozen=True)
class TierReset:
    """What an engine's reset does to one tier: ``emptied``, the ``reason`` (with its upstream
    source) and, when not emptied, the ``remedy`` step that would empty it (``"restart"``,
    ``"clear-fs"``) or None when no pod-side step does."""

    emptied: bool
    reason: str
    remedy: str | None


@dataclass(frozen=True)
class EngineMetrics:
    """KV-cache figures of one engine (or data-parallel rank) from one ``/metrics`` scrape, as
    :meth:`Engine.read_metrics` reads it.

    ``engine`` is the engine or rank label (vLLM's ``engine``, ``"0"``; ``""`` where the version has
    none). ``usage`` is a fraction 0..1 from ``usage_metric`` (vLLM: ``vllm:kv_cache_usage_perc``,
    or the older ``vllm:gpu_cache_usage_perc`` where only that is exported); ``cpu_offload_usage``
    is ``vllm:kv_offload_cpu_cache_usage_perc`` (the fraction of the CPU tier pinned by transfers,
    not occupancy). Counters are token counts since start. None = the family is absent (or, with
    ``note``, not shown because it would mislead). ``note``: what the row should say about them.
    """

    engine: str
    model: str | None
    usage: float | None
    usage_metric: str | None
    cpu_offload_usage: float | None
    prefix_hits: float | None
    prefix_queries: float | None
    external_hits: float | None
    external_queries: float | None
    note: str | None = None


class MetricsParseError(ValueError):
    """The ``/metrics`` body is not Prometheus text exposition format."""


@dataclass(frozen=True)
class FileTier:
    """A tier a server keeps as files in a directory of its pod, whose names carry the model, and
    that no route of the server empties for one model only: the store step deletes this server's
    files there (:mod:`kubectl_kvreset.job.storedisk`, through ``pods/exec``), as for LMCache's
    local disk. The server creates the directory when it starts, so a missing one is never read
    as empty (the row says ``unconfirmed``).

    Attributes:
        store: the ``StoreClear`` row's ``store`` and the tier's :attr:`~kubectl_kvreset.tiers.Tier.store`
            (``hicache-file``).
        label: what the rows call it (``SGLang HiCache file storage``).
        setting: the directory as configured, with where it was read.
        paths: the directories, as the server container sees them (empty when not known).
        suffix: what every file of the tier ends with (``.bin``).
        model: the model name the file names carry, None when not known.
        name_regex: a regular expression that the names of this server's files (the suffix
            removed) match in full and the names of other models' files do not; None when the
            model is not known.
        unknown: why the directory is not known (nothing is then deleted), or None.
    """

    store: str
    label: str
    setting: str
    paths: tuple[str, ...]
    suffix: str
    model: str | None
    name_regex: str | None
    unknown: str | None = None


@dataclass(frozen=True)
class LiveConfig:
    """The part of a running server's own configuration this tool reads (vLLM's
    ``/server_info?config_format=json``: :meth:`Engine.read_live_config`).

    Attributes:
        readable: the answer carried ``vllm_config`` as an object (False: text form, an old
            server, or an answer of another shape; nothing is known then).
        kv_transfer_config: the live connector object, redacted (None: no connector).
        model: ``vllm_config.model_config.model``, the model name vLLM uses for the FS tier's
            directories and LMCache's keys (after ``VLLM_MODEL_REDIRECT_PATH`` or an object-store
            download, ``vllm/config/model.py``); None when absent.
    """

    readable: bool
    kv_transfer_config: Mapping[str, Any] | None
    model: str | None = None


class Engine:
    """One inference engine: how to find its servers in pod specs and how to empty them.

    A subclass answers from pod-spec data and HTTP answer bodies only (no I/O). Registered
    once in :data:`kubectl_kvreset.engines.ENGINES`; a discovered server carries its engine
    (:attr:`kubectl_kvreset.pods.VllmPod.engine`), and the plan and the job ask it for the reset
    routes and what the answers mean.

    Attributes:
        name: the registry key and the name rows and notes use (``"vllm"``).
        version_route: the ``GET`` route whose answer :meth:`read_version` reads (not gated by
            dev mode).
        reset_route: the main reset route (``POST``, sent with :meth:`reset_query`); its answer
            decides the row (:meth:`read_reset_answer`).
        live_config_route: ``(path, query)`` of the ``GET`` route whose answer
            :meth:`read_live_config` reads, or None when the server has none.
        dev_mode_env: the container variable that must be a non-zero integer for the server to
            serve its reset routes (vLLM's ``VLLM_SERVER_DEV_MODE``; the ``devmode`` fallback sets
            it), or None when the routes are always served (then the ``devmode`` fallback never
            applies and only ``restart`` replaces pods).
        preempts_running: :meth:`reset_query` honours ``reset_running_requests`` (the reset can
            preempt running requests), so a reset that stays busy offers ``--preempt-running``.
    """

    name: str = ""
    version_route: str = "/version"
    reset_route: str = ""
    live_config_route: tuple[str, tuple[tuple[str, str], ...]] | None = None
    dev_mode_env: str | None = None
    preempts_running: bool = False

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        """The command line of one pod-spec container (``command``, ``args``, ``image``; a
        shell script in them is read as sh would), if it runs this engine's API server.

        Args:
            container: one item of ``spec.containers`` as the API returns it.
            env: the container's resolved environment (name -> value), for ``$(VAR)`` and
                ``$VAR`` expansion.
            config_reader: reads a configuration file the command names (:data:`ConfigReader`);
                without one such a file is noted unread.

        Returns:
            None when the container does not run this engine's server; else its
            :class:`ServeConfig`, whose ``api_ports`` (ascending; empty when not resolved) are
            the ports the reset routes are sent to, with ``scheme`` ``http``/``https``.

        Raises:
            ServerCommandError: the command runs this engine's server but cannot be read.
        """
        raise NotImplementedError

    def kv_layout(self, config: ServeConfig, env: Mapping[str, str]) -> KVLayout:
        """The KV tiers a server with this command line fills (GPU first, then every tier its
        KV connectors name), from the config and ``env`` (the container's environment)."""
        raise NotImplementedError

    def spec_notes(self, container: Mapping[str, Any], layout: KVLayout) -> list[str]:
        """Notes on settings of ``layout``'s tiers the pod spec does not hold literally (a
        ConfigMap or Secret reference): a tier they name may be missing. None by default."""
        return []

    def read_version(self, body: bytes) -> str | None:
        """The version string in the answer to ``GET`` :attr:`version_route`, or None."""
        raise NotImplementedError

    def release(self, version: str | None) -> Version | None:
        """The release a version string names, for the version rules (``0.23.1.dev42`` ->
        ``0.23.1``), or None for an unknown build (the oldest behaviour is assumed)."""
        raise NotImplementedError

    def reset_query(self, release: Version | None, *, reset_external: bool = True,
                    reset_running_requests: bool = False) -> list[tuple[str, str]]:
        """The query of :attr:`reset_route` on this ``release``: ``reset_external`` empties the
        connectors' tiers too, ``reset_running_requests`` preempts running requests (only when the
        user allowed it). A parameter the server does not take is left out. ``[]`` by default."""
        return []

    def extra_reset_routes(self, release: Version | None) -> tuple[str, ...]:
        """The other cache-reset routes (``POST``, no query) this release serves, in call order
        (vLLM's ``/reset_mm_cache``...). None by default."""
        return ()

    def read_reset_answer(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
        """What the server's own answer (HTTP ``status``, ``body``, ``headers``) to a reset route
        means: :attr:`ResetOutcome.CLEARED` (emptied), ``UNCONFIRMED`` (done, result not said),
        ``BUSY`` (blocks still held: retried until the busy timeout), ``DEV_MODE_OFF`` (routes not
        served), ``SERVER_ERROR`` (retryable), ``BAD_REQUEST`` (refused), ``UNEXPECTED``.
        Never raises."""
        raise NotImplementedError

    def busy_reason(self, elapsed_s: float, answers: int) -> str:
        """Why a reset that answered :attr:`ResetOutcome.BUSY` ``answers`` times over
        ``elapsed_s`` seconds (until the busy timeout) did not empty the cache, for the row."""
        return f"{self.name} kept answering busy for {elapsed_s:.1f}s ({answers} answers)"

    def read_reset_answer_for(self, config: ServeConfig, status: int, body: bytes,
                              headers: Mapping[str, str] | None = None) -> ResetAnswer:
        """:meth:`read_reset_answer` for a server started with ``config`` (an engine whose answers
        mean more or less by its flags overrides it). Never raises."""
        return self.read_reset_answer(status, body, headers)

    def tier_resets(self, layout: KVLayout, release: Version | None) -> tuple[TierReset, ...] | None:
        """One :class:`TierReset` per tier of ``layout`` on ``release``, or None (the default)
        when the reset-effect table of :mod:`kubectl_kvreset.plan` (vLLM's connectors) decides."""
        return None

    def read_metrics(self, text: str) -> list[EngineMetrics]:
        """The KV-cache figures of one ``GET /metrics`` text, one per engine or rank (``metrics``).
        ``[]`` by default (the scrape holds none this tool reads).

        Raises:
            MetricsParseError: the text is not Prometheus text exposition format.
        """
        return []

    def file_tiers(self, config: ServeConfig, layout: KVLayout) -> tuple[FileTier, ...]:
        """The tiers of ``layout`` this server keeps as per-model files in a directory
        (:class:`FileTier`), which the store step empties. None by default."""
        return ()

    def files_alike(self, other: str, model: str) -> bool:
        """True when some file of model ``other`` in a :class:`FileTier` may be named as one of
        ``model``'s (they cannot be told apart: a per-model deletion then needs consent). False by
        default."""
        return False

    def busy_query(self, busy_timeout_s: float) -> list[tuple[str, str]]:
        """Query parameters added to :attr:`reset_route` so the server itself waits up to the
        plugin's busy timeout (seconds) for running requests. ``[]`` by default."""
        return []

    def reset_headers(self, config: ServeConfig, keys: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Headers the reset routes need (an ``Authorization`` the server asks for), from the
        command line ``config`` and ``keys`` (flag -> value read from a Secret the spec names).
        Never logged in clear (:mod:`kubectl_kvreset.redact` masks ``Authorization``). None by default."""
        return ()

    def secret_keys(self, config: ServeConfig) -> tuple[tuple[str, str, str], ...]:
        """``(flag, secret name, key)`` of each reset credential the spec takes from a Secret
        (read with the user's rights before the reset). None by default."""
        return ()

    def unconfirmed_text(self, answer: ResetAnswer) -> str:
        """The row's message for an :attr:`ResetOutcome.UNCONFIRMED` answer."""
        return answer.detail

    def answer_contradicts(self, version: str | None, outcome: ResetOutcome | None) -> bool:
        """True when a reset answer does not fit the version the pod's template reported (the
        pod is then probed on its own). False by default."""
        return False

    def request_counts(self, metrics: str) -> dict[str, tuple[int, int]] | None:
        """``engine label -> (running, waiting)`` requests in one ``GET /metrics`` text (``--wait-idle``),
        or None when this engine's metrics do not count them (the port is then reported not idle).
        Raises ``ValueError`` for a text that is not Prometheus exposition. None by default."""
        return None

    def counts_engines_by_metrics(self, version: str | None) -> bool:
        """True when a reset answer of this version may speak for data-parallel engine 0 only and
        the engine count is read from ``/metrics``. False by default."""
        return False

    #: Whether an unknown build's reset routes and parameters are read from ``/openapi.json``.
    routes_from_openapi: bool = False
    #: ``(step prefix, short code)`` of this engine's reset steps in the default table
    #: (:data:`kubectl_kvreset.report.STEP_CODES`).
    step_codes: tuple[tuple[str, str], ...] = ()

    def read_live_config(self, body: bytes) -> LiveConfig:
        """Read the answer to :attr:`live_config_route`. Never raises: an answer of another
        shape gives ``readable=False``."""
        return LiveConfig(False, None)

    def __repr__(self) -> str:
        return f"<engine {self.name}>"
