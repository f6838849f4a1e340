"""Loop plumbing shared by the loops: stoppable loops and fault points."""
