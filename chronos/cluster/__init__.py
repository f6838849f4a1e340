"""The nodes together: leader election, the leader's monitor and failure recovery."""
