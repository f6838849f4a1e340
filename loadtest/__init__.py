"""Chronos load tests: a load generator and recorder, the analysis of what it recorded, and the
headline benchmark; besides them, one-off cost probes.

* ``harness``: what a load-test run uses: the open-loop producer, the recorder, the echo relay
  that stands in for Chronos, topic checks, delays and the multi-tenant load, the files a run
  writes (``python -m loadtest run`` and ``relay``);
* ``analysis``: a results directory turned into ``summary.json`` and ``report.html`` with Spark,
  and synthetic results directories to test it (``python -m loadtest analyze`` and ``synth``);
* ``bench``: the benchmark that brings up its own stack and runs the scenarios
  (``python -m loadtest bench``, ``make bench``; ``python -m loadtest ceiling``);
* ``soak``: an hour (or a few minutes) on the benchmark's stack, sampled, drained and analysed
  (``python -m loadtest soak``, ``make soak``; its analysis is ``analysis.soak``);
* ``probes``: one-off measurements of one cost each, ``python -m loadtest.probes.<name>``.

Layers, top to bottom: ``cli``, ``soak``, ``bench``, ``analysis``, ``harness``; a module
imports only from its own layer or those below. ``probes`` import nothing of the others. See
``loadtest/README.md``.
"""
