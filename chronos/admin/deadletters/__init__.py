"""The dead-letter topic: browse and replay it, from the admin API and the command line."""
