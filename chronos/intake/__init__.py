"""Consume-and-enqueue: the intake loop, its process and child, the header quarantine, actions."""
