"""``kubectl kvreset clear-store``: empty the shared stores outside the pods that the targets use."""

from __future__ import annotations

import sys
from typing import Any

import click

from .options import (
    EXIT_CODES_HELP,
    INTERRUPTED,
    concurrency_option,
    dry_run_option,
    emit,
    handle_errors,
    info,
    kube_flags,
    output_option,
    target_options,
    yes_option,
)
from .prompt import ask_yes_no
from .signals import changing

__all__ = ["command", "force_mp_option", "shared_option"]


def shared_option(func: Any) -> Any:
    """``--shared-stores``: clear a store even when pods outside the targets use it."""
    return click.option(
        "--shared-stores", "shared", is_flag=True,
        help="Also clear what pods outside the targets use: a model's keys that an untargeted pod of "
             "the same model shares, and store-wide clears (Mooncake remove_all) of a store any "
             "untargeted pod (or an unlistable namespace) may use; for clear, also reset_external=true on "
             "MooncakeStoreConnector and LMCacheMPConnector pods, whose reset empties their whole Mooncake "
             "store or MP server L1, a target model's FS-tier directories on a volume where pods "
             "outside the targets serve the same model, and with --fallback restart the restart of an "
             "LMCache server (lm://) that engines use.")(func)


def force_mp_option(func: Any) -> Any:
    """``--force-mp-clear``: send ``force: true`` to the LMCache MP servers' clear."""
    return click.option(
        "--force-mp-clear", "force_mp", is_flag=True,
        help="LMCache MP server: send force: true, which also removes locked objects; stores and "
             "prefetches in flight may be corrupted (default force: false keeps them).")(func)


@click.command(
    "clear-store",
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset clear-store -n llm-d --all\n"
        "  kubectl kvreset clear-store deployment/ms-decode --dry-run -o yaml\n"
        "  kubectl kvreset clear-store -n llm-d --all --shared-stores --yes\n\n"
        "Stores come from the vLLM pods' configuration: LMCache's remote_url (kv_connector_extra_config "
        "lmcache.*, LMCACHE_* env, the LMCACHE_CONFIG_FILE YAML in its ConfigMap/Secret volume) and "
        "Mooncake's MOONCAKE_CONFIG_PATH JSON. Each address is resolved to a Service or pod of the "
        "cluster. Redis/Valkey: the keys of the targets' models (SCAN MATCH '<model>@*' + UNLINK over "
        "port-forward), counted before and after. Mooncake master: POST /api/v1/remove_all?force=true "
        "on its admin port through the pod proxy, confirmed by master_key_count. LMCache MP server: "
        "POST /cache/clear {\"tier\":\"l1\",\"force\":false} on its HTTP port (--http-port, default 8080; "
        "older servers' /clear-cache, /api/clear-cache), confirmed by the L1 objects in GET /status. "
        "InfiniStore: POST /purge on its manage port, confirmed by /kvmap_len. LMCache's local disk: its "
        "*.pt files deleted through exec as clear-fs deletes, counted before and after. A clear that would "
        "remove what pods outside the targets use is left unless --shared-stores is given. "
        + EXIT_CODES_HELP
    ),
)
@target_options
@shared_option
@force_mp_option
@click.option("--timeout", "call_timeout", default="30s", show_default=True, metavar="DURATION",
              help="Bound on each call to a store.")
@dry_run_option("Print one row per store call (with the stores' counts); change nothing.")
@yes_option
@output_option
@concurrency_option
@kube_flags
@handle_errors
def command(**params: Any) -> None:
    """Empty the shared KV stores (Redis/Valkey, Mooncake, LMCache MP server) the targeted vLLM pods use.

    Targets are OWNER arguments (deployment/NAME, leaderworkerset/NAME, pod/NAME; a bare name
    is a Deployment), --all or -l SELECTOR.
    """
    from ..job.storeclear import plan_store, run_store
    from ..kube import parse_duration
    from ..report import ExitCode
    from .context import complete, exit_if_empty

    timeout = parse_duration(params["call_timeout"], default=30.0) or 30.0
    ctx = complete(params, default_all=False)
    exit_if_empty(ctx, required=True, output=params["output"])
    plan = plan_store(ctx, shared=params["shared"], force_mp=params["force_mp"])
    for note in plan.notes:
        info(note)
    if params["dry_run"]:
        report = run_store(plan, dry_run=True, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED,
                           timeout_s=timeout)
        emit(report, params["output"], empty_message="Nothing to do.")
        return
    if sys.stdin.isatty() and not params["yes"] and not plan.empty:
        # what --dry-run shows: every call with its method, scope and the store's count now
        shown = run_store(plan, dry_run=True, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED,
                          timeout_s=timeout)
        info(shown.render("wide").rstrip())
        where = ctx.kube.where(all_namespaces=ctx.namespace is None)
        if not ask_yes_no(f"Clear these stores, found from {where}?"):
            info("nothing changed")
            sys.exit(int(ExitCode.FAILED))
    with changing():  # a signal from here on stops new calls and prints the rows of those done
        report = run_store(plan, max_concurrency=params["max_concurrency"], cancel=INTERRUPTED, timeout_s=timeout)
        emit(report, params["output"], empty_message="Nothing to do.")
