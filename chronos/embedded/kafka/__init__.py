"""Apache Kafka in a JVM of its own for development and tests: one broker, or a quorum of three."""
