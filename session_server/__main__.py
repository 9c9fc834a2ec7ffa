"""``python -m session_server`` runs the ``session-server`` command line."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
