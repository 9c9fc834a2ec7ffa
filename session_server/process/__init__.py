"""Process-wide operations: file-descriptor limits, malloc, operational metrics,
log redaction and progress bars."""
