"""Flow control from the admin API and the command line: pauses and rate limits."""
