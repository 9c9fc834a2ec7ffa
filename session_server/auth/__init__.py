"""Access tokens: the rules (``tokens``, pure: parsing, signing, checking a grant)
and their files (``token_files``: reading them, reloading on change).

Every name of ``tokens`` is importable from here.
"""

from __future__ import annotations

from .tokens import *  # noqa: F403
from .tokens import __all__ as __all__
