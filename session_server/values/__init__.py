"""The value types and pure rules every folder shares: events, codec, errors,
validation, token counts, turns, the recent-events cache and the plans the core
hands to the shell. Imports nothing of ``core``, ``compaction`` or ``mirror``."""
