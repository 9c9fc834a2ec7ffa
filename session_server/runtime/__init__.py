"""The I/O shell: actor pump, registry, mirror link, compaction runner, summarizers, metrics."""
