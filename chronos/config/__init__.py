"""Settings (one declaration each: flag, env var, default), their value parsers, policies."""
