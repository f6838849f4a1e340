"""Ready-and-fire: the firing loop (claims and timers) and the dispatcher (publishes, outcomes)."""
