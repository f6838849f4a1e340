"""The Postgres store: one statement per batch, every statement named in ``sql/``."""
