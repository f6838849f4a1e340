"""The figures the benchmark computes, as types, one module per subject: ``load`` (rates,
backlog, burst drain and intake, pre-load, output offset holes), ``node`` (statement latencies,
counters, stalls, profiles), ``cpu`` (CPU per component and per message), ``samples`` (the
sampler's seconds), ``tenants`` (a multi-tenant load's fairness figures) and ``jsonread`` (the
typed reading of JSON they share).

Each figure is written into a scenario's record in ``bench.json`` with ``as_dict`` (always the
same keys, so ``bench --render`` reads any earlier run) and read back with ``from_dict``, where a
figure an older or a failed run lacks is None. ``loadtest.bench.records`` reads whole records
back.
"""
