"""``python -m loadtest bench``: the headline benchmark, reproduced by one command.

It brings up its own stack with the project's code — ``EmbeddedPostgres`` (durable, as
``chronos dev`` runs it) and ``EmbeddedKafka`` on free ports in a fresh data directory — runs
the migrations, measures the ceiling (``ceiling``: the node's store without Kafka) on that
Postgres, and then runs each scenario (``scenarios``) on fresh topics, an empty table (or one
pre-loaded with far-future rows) and freshly started ``python -m chronos run`` node processes:

* the load generator runs in a separate process (``python -m loadtest run``), then the Spark
  analysis (``python -m loadtest analyze``) writes the scenario's ``summary.json``,
  ``report.html`` and plots;
* every second a sampler records each node's memory (the PSS of its processes, psutil) and the
  table (rows waiting, claimed and overdue, from the partial indexes, never a scan of
  pre-loaded rows), and scrapes each node's ``/metrics`` (consumer lag, in-flight messages);
* around the load it records each node's CPU time (its whole process tree) and ``/metrics``
  (the ``claim`` statement latency histogram: mean from the sum/count delta, p99 from the
  bucket deltas), the CPU time of Postgres, the broker, the load generator and the rest of the
  machine, and each one's CPU per message handled;
* a node that fires nothing for 10 s while rows are overdue gets its thread stacks and the
  database sessions saved (``stall-node<i>.txt``); ``--profile`` records a node with py-spy.

The ``relay`` scenario runs the same load with the harness's echo relay in place of Chronos: the
lateness the load generator and the broker impose on their own, measured in the same run.

Everything is stopped at the end (nodes by SIGTERM, then the broker and Postgres), also on
Ctrl-C or an error. ``<out>/bench.json`` holds every figure, ``<out>/BENCHMARK.md`` the headline
table, the ratio of Chronos's sustained throughput to the ceiling, the command line and the
machine facts, with links to each scenario's report.


The parts: ``driver`` (the command), ``scenarios`` (what runs, and the targets), ``ceiling``
(the store-only pipeline, also ``python -m loadtest ceiling``), ``runs`` (one scenario),
``stack`` (the processes), ``sampling`` (the per-second sampler), ``procstats`` (CPU and
memory, with psutil), ``promtext`` (the nodes' ``/metrics``, with prometheus_client's parser),
``figures`` (figures derived from the analysis and the samples), ``results`` (those figures as
types, one module per subject), ``records`` (``bench.json`` read back as types),
``evaluation`` and ``tenant_verdicts`` (the verdicts), ``report`` (``BENCHMARK.md``) and
``profiles`` (py-spy).
"""
