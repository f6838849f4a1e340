"""The in-memory store: the Postgres store's behaviour, for unit tests."""
