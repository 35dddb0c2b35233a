"""The exit-code paragraphs of the sub-commands' help: each command lists the codes it can end
with, and names ``kubectl kvreset options`` for kubectl's global flags."""

from __future__ import annotations

__all__ = ["EXIT_CODES_HELP", "EXIT_CODES_READ", "EXIT_CODES_ROLLOUT"]

#: The exit codes of the commands that empty caches (clear, clear-fs, clear-store).
EXIT_CODES_HELP = (
    "Exit codes: 0 every targeted tier emptied and confirmed (read-only commands: every pod "
    "answered); 1 something failed or a tier was left full; 2 usage or configuration error; "
    "3 done but some result could not be confirmed (vLLM < 0.26 answers an empty 200); "
    "130 interrupted (SIGINT, Ctrl-C); 143 terminated (SIGTERM, as timeout and CI runners send). "
    "Either signal stops new work, waits for the calls in flight (up to 40s after SIGINT, 5s after "
    "SIGTERM) and prints the rows of what was done; a second one exits within a second. "
    "Global flags (--context, --kubeconfig, --token, ...): kubectl kvreset options."
)

#: The exit codes of the read-only commands (detect, metrics).
EXIT_CODES_READ = (
    "Exit codes: 0 every pod answered; 1 a pod or port could not be read; 2 usage or configuration "
    "error; 130 interrupted (Ctrl-C); 143 terminated (SIGTERM). "
    "Global flags (--context, --kubeconfig, --token, ...): kubectl kvreset options."
)

#: The exit codes of the commands that roll owners (restart, devmode).
EXIT_CODES_ROLLOUT = (
    "Exit codes: 0 every owner done and ready (read, with no --enable/--disable; planned, with "
    "--dry-run); 1 an owner failed, timed out or was refused; 2 usage or configuration error; "
    "130 interrupted (Ctrl-C: no more patches are sent and the waits end; a second Ctrl-C exits "
    "at once); 143 terminated (SIGTERM). "
    "Global flags (--context, --kubeconfig, --token, ...): kubectl kvreset options."
)
