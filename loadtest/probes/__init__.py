"""One-off cost probes: each measures one cost of Chronos's parts in isolation (a statement, a
loop, the embedded broker) and prints it; ``loadtest/README.md`` lists them with when to run
each. None is part of ``python -m loadtest`` or the benchmark."""
