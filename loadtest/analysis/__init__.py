"""The analysis of a results directory: the Spark summary (``summary``) with its per-tenant
section (``tenants``) and delivery classes (``delivery``), ``report.html`` (``report``), and
synthetic results directories with known figures (``synth``)."""
