"""Shell completion for ``kubectl kvreset`` in cobra's plugin-completion format.

kubectl 1.26+ completes a plugin's arguments by running ``kubectl_complete-kvreset`` from
``PATH`` with the words typed after ``kubectl kvreset``, the last one being the word to complete
(``""`` for a new word), and reads one candidate per line (``value<TAB>description``) followed
by a line ``:<directive>`` (``k8s.io/kubectl/pkg/cmd/plugin/plugin_completion.go``, kubernetes
PR #105867; directive bits from ``spf13/cobra`` ``completions.go``). The zipapp answers the same
request as ``kubectl-kvreset __complete WORDS...`` (cobra's spelling, which is also accepted by
:func:`main`), so the completion helper can be a two-line shell script.

Sub-commands, option names and ``click.Choice`` values come from the click commands themselves
(resolved the way ``click.shell_completion`` resolves them); namespaces and owner names come
from the cluster (``GET /api/v1/namespaces``, Deployments and LeaderWorkerSets of the namespace),
read with the kubectl flags already on the line (``--kubeconfig``, ``--context``, ``-n``...) and
a short request bound; contexts, clusters and users from the kubeconfig. Any failure (no
kubeconfig, 403, timeout) yields no candidates rather than an error: completion must never print
a traceback into the user's shell.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from .commands import COMMANDS

#: cobra's ``ShellCompDirective`` bits (``spf13/cobra: completions.go``)
DIRECTIVE_DEFAULT = 0  # fall back to the shell's file completion
DIRECTIVE_ERROR = 1
DIRECTIVE_NO_SPACE = 2
DIRECTIVE_NO_FILE_COMP = 4
DIRECTIVE_KEEP_ORDER = 32

#: request bound for completion's API calls, seconds (a shell must not hang on TAB)
COMPLETION_TIMEOUT = "5s"

#: parameters whose values are file paths: left to the shell's own file completion
FILE_PARAMS = frozenset({"kubeconfig", "certificate_authority"})

LWS_GROUP_VERSION = "leaderworkerset.x-k8s.io/v1"


@dataclass(frozen=True)
class Candidate:
    """One completion: ``value`` and an optional one-line ``description``."""

    value: str
    description: str = ""


#: ``lister(kind, params)`` -> names; ``kind`` is ``"namespaces"``, ``"deployments"``,
#: ``"leaderworkersets"`` or ``"pods"``; ``params`` are the click parameters parsed so far.
Lister = Callable[[str, dict[str, Any]], list[str]]


def cluster_lister(kind: str, params: dict[str, Any]) -> list[str]:
    """List names from the cluster the parsed kubectl flags point at (request bound
    :data:`COMPLETION_TIMEOUT` unless ``--request-timeout`` was typed).

    ``kind``: ``namespaces`` (cluster scope) or ``deployments``, ``leaderworkersets``, ``pods``
    (in ``-n`` or the context's namespace). Returns sorted names.

    Raises:
        kubectl_kvreset.kube.KubeError: no kubeconfig, refused, unreachable (callers ignore it).
    """
    from ..kube import Kube
    from .options import flags_from

    params = dict(params)
    params.setdefault("request_timeout", None)
    if not params["request_timeout"]:
        params["request_timeout"] = COMPLETION_TIMEOUT
    kube = Kube.connect(flags_from(params), pool_size=4)
    if kind == "namespaces":
        items = kube.list_items("v1", "namespaces", None)
    elif kind == "deployments":
        items = kube.list_items("apps/v1", "deployments", kube.namespace)
    elif kind == "leaderworkersets":
        items = kube.list_items(LWS_GROUP_VERSION, "leaderworkersets", kube.namespace)
    elif kind == "pods":
        items = kube.list_items("v1", "pods", kube.namespace)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return sorted(str((item.get("metadata") or {}).get("name", "")) for item in items
                  if (item.get("metadata") or {}).get("name"))


def kubeconfig_names(section: str, params: dict[str, Any]) -> list[str]:
    """Names of the ``contexts``, ``clusters`` or ``users`` in the kubeconfig files the flags
    and ``KUBECONFIG`` select (merged as kubectl merges them). No network. Empty on any error."""
    from ..kube import kubeconfig_paths, merge_kubeconfigs

    try:
        cfg = merge_kubeconfigs(kubeconfig_paths(params.get("kubeconfig")))
    except Exception:  # noqa: BLE001 - completion never fails loudly
        return []
    return sorted(str(e.get("name")) for e in cfg.get(section) or [] if isinstance(e, dict) and e.get("name"))


def _safe(lister: Lister, kind: str, params: dict[str, Any]) -> list[str]:
    try:
        return lister(kind, params)
    except Exception:  # noqa: BLE001 - a 403, a timeout or no kubeconfig: no candidates
        return []


def owner_candidates(incomplete: str, params: dict[str, Any], lister: Lister) -> list[Candidate]:
    """Candidates for an ``OWNER`` argument, written as kubectl writes them.

    Without a ``/`` in ``incomplete``: bare Deployment names (a bare name means a Deployment) and
    ``leaderworkerset/NAME``. With a kind prefix (``deployment/``, ``deploy/``,
    ``leaderworkerset/``, ``lws/``, ``pod/``): the names of that kind, keeping the prefix typed.
    """
    kind_of = {"deployment": "deployments", "deploy": "deployments", "deployments": "deployments",
               "leaderworkerset": "leaderworkersets", "lws": "leaderworkersets",
               "leaderworkersets": "leaderworkersets", "pod": "pods", "po": "pods", "pods": "pods"}
    if "/" in incomplete:
        prefix, _, rest = incomplete.partition("/")
        kind = kind_of.get(prefix.lower())
        if kind is None:
            return []
        return [Candidate(f"{prefix}/{name}") for name in _safe(lister, kind, params) if name.startswith(rest)]
    out = [Candidate(name, "Deployment") for name in _safe(lister, "deployments", params)]
    out += [Candidate(f"leaderworkerset/{name}", "LeaderWorkerSet")
            for name in _safe(lister, "leaderworkersets", params)]
    return [c for c in out if c.value.startswith(incomplete)]


def _resolve(cli: click.Command, words: list[str], incomplete: str) -> tuple[click.Context, Any, str]:
    # click.shell_completion's own resolution (the same functions ShellComplete.get_completions
    # uses), so what is completed follows the commands' real options. click is pinned < 9.
    from click.shell_completion import _resolve_context, _resolve_incomplete

    ctx = _resolve_context(cli, {}, "kubectl kvreset", list(words))
    obj, incomplete = _resolve_incomplete(ctx, list(words), incomplete)
    return ctx, obj, incomplete


def complete(cli: click.Group, words: Sequence[str], *, lister: Lister | None = None) -> tuple[list[Candidate], int]:
    """Complete the last of ``words`` (the words after ``kubectl kvreset``; the last one may be
    ``""``) against the click group ``cli``. Returns ``(candidates, cobra directive)``.

    ``lister`` lists cluster objects (default :func:`cluster_lister`); tests pass a fake.
    Never raises for a malformed line: unknown words give no candidates.
    """
    lister = lister or cluster_lister
    args = list(words)
    incomplete = args.pop() if args else ""
    try:
        ctx, obj, incomplete = _resolve(cli, args, incomplete)
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        return [], DIRECTIVE_NO_FILE_COMP
    # every option's value parsed so far, from the group down to the sub-command
    params: dict[str, Any] = {}
    chain: list[click.Context] = []
    node: click.Context | None = ctx
    while node is not None:
        chain.append(node)
        node = node.parent
    for c in reversed(chain):
        params.update({k: v for k, v in c.params.items() if v not in (None, (), False)})

    own_values = isinstance(obj, click.Parameter) and (
        isinstance(obj.type, click.Choice) or type(obj.type).shell_complete is not click.ParamType.shell_complete)
    if isinstance(obj, click.Parameter) and not own_values:
        name = obj.name or ""
        if name in FILE_PARAMS:
            return [], DIRECTIVE_DEFAULT
        if name == "namespace":
            return [Candidate(n) for n in _safe(lister, "namespaces", params) if n.startswith(incomplete)], \
                DIRECTIVE_NO_FILE_COMP
        if name in ("context", "cluster", "user"):
            section = {"context": "contexts", "cluster": "clusters", "user": "users"}[name]
            return [Candidate(n) for n in kubeconfig_names(section, params) if n.startswith(incomplete)], \
                DIRECTIVE_NO_FILE_COMP
        if name == "owners":
            return owner_candidates(incomplete, params, lister), DIRECTIVE_NO_FILE_COMP
        return [], DIRECTIVE_NO_FILE_COMP
    if obj is cli and (list(getattr(ctx, "_protected_args", [])) + list(ctx.args)):
        return [], DIRECTIVE_NO_FILE_COMP  # an unknown sub-command (words left unparsed): nothing to offer
    items = obj.shell_complete(ctx, incomplete)
    out: list[Candidate] = []
    for item in items:
        if getattr(item, "type", "plain") in ("file", "dir"):
            return [], DIRECTIVE_DEFAULT
        value = str(item.value)
        # sub-commands: the full short help (click's is cut at 45 characters)
        help_text = COMMANDS[value][1] if obj is cli and value in COMMANDS else str(item.help or "")
        out.append(Candidate(value, " ".join(help_text.split())))
    return out, DIRECTIVE_NO_FILE_COMP


def format_cobra(candidates: Sequence[Candidate], directive: int, *, descriptions: bool = True) -> str:
    """cobra's output: ``value<TAB>description`` lines (tabs and newlines in a description are
    flattened; no tab without one), then ``:<directive>``, newline-terminated."""
    lines = []
    for c in candidates:
        desc = " ".join(c.description.split()) if descriptions else ""
        lines.append(f"{c.value}\t{desc}" if desc else c.value)
    lines.append(f":{directive}")
    return "\n".join(lines) + "\n"


def main(cli: click.Group, argv: Sequence[str] | None = None) -> int:
    """Answer a completion request for the click group ``cli`` (``kubectl_complete-kvreset``
    and ``kubectl-kvreset __complete``).

    ``argv``: the words after ``kubectl kvreset`` (default ``sys.argv[1:]``), optionally led by
    ``__complete`` or ``__completeNoDesc`` (no descriptions). Prints cobra's format on stdout;
    returns 0.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    descriptions = True
    if words and words[0] in ("__complete", "__completeNoDesc"):
        descriptions = words.pop(0) == "__complete"
    try:
        candidates, directive = complete(cli, words)
    except Exception:  # noqa: BLE001 - never a traceback in the user's shell
        candidates, directive = [], DIRECTIVE_ERROR
    sys.stdout.write(format_cobra(candidates, directive, descriptions=descriptions))
    return 0
