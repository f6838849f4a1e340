"""The intake's side of the consumer group: committing its offsets, where a partition resumes
when it comes back, and telling when a member joined without partitions."""
