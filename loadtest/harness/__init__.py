"""What a load-test run uses: the open-loop producer and its schedule, the recorder, the echo
relay, topic checks, delay distributions, the multi-tenant load and the files a run writes."""
