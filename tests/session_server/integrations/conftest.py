"""The ADK tests need google-adk, which needs websockets<16: they run in .venv-adk
(``scripts/ci_adk``, which ``scripts/test`` runs), and are collected wherever google-adk
is installed."""

from __future__ import annotations

import importlib.util


def _has_adk() -> bool:
    try:
        return importlib.util.find_spec("google.adk") is not None
    except ModuleNotFoundError:  # no ``google`` package at all
        return False


collect_ignore = [] if _has_adk() else ["adk"]
