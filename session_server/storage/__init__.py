"""SQLite storage: schema, SQL operations, the async store (I/O)."""
