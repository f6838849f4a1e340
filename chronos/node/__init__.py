"""A node: the supervisor of its loops, its HTTP server and the operator's console."""
