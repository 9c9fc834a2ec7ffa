"""asyncio and thread primitives with no knowledge of sessions, events or agents."""
