"""Metrics, batch histograms, the intake process's metrics relay, tenant labels, logging."""
