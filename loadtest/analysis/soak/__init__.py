"""The soak's analysis (``python -m loadtest soak --analyze DIR``): ``summary`` (the results
directory into ``summary.json`` and the report), ``figures`` (the Spark aggregations per
minute), ``samples`` (the sampler's lines, as types), ``verdicts`` (PASS or FAIL, no Spark) and
``report`` (``report.html`` and its plots)."""
