# -*- coding: utf-8 -*-
# ruff: noqa: UP009, UP031, UP036, E402  (deliberately old-Python syntax: this file runs on any Python)
# The zipapp's __main__.py: runs before shiv's bootstrap and the app, whose code needs
# Python >= 3.10. Written in syntax every Python 2.7 and 3.x reads, so an old python3 on PATH
# (macOS's is 3.9) gets one line and exit code 2 instead of a traceback, and nothing is
# extracted under SHIV_ROOT.
import sys

if sys.version_info < (3, 10):
    sys.stderr.write(
        "error: kubectl-kvreset needs Python 3.10 or newer, but %s is Python %d.%d; "
        "put a newer python3 first on PATH\n"
        % (sys.executable or "python3", sys.version_info[0], sys.version_info[1])
    )
    sys.exit(2)

import _kvreset_boot  # (krew/boot.py: where to extract, and the gate against removal)

_kvreset_boot.start()

import _bootstrap  # (shiv's bootstrap: extracts site-packages, runs the preamble, then the app)

_bootstrap.bootstrap()
