"""Where intake reads each input partition from: after what was made durable when it is assigned
(resume), again over a fetch that skipped records (gaps), held back while its shard's database is
away (shards), and whether the group is joined though it gave this node none (warmth)."""
