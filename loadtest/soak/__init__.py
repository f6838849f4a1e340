"""``python -m loadtest soak`` (``make soak``): an hour (``--duration``) at full rate
(``--rate``) on the benchmark's stack, to see what only time shows.

``driver`` (the command) brings up the benchmark's embedded Postgres and Apache Kafka
(``loadtest.bench.stack``), warms the broker (``loadtest.bench.warmup``), starts two nodes and
runs the load generator (``python -m loadtest run --mix``: ``loadtest.harness.mix``) with the
load of ``load`` (delays from seconds to hours, cancels, reschedules, series, tenants) while
``sampling`` records the nodes, Postgres and the broker every ten seconds; after the drain it
runs the Spark analysis (``loadtest.analysis.soak``) in a process of its own.
"""
