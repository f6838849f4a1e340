"""The scheduled messages from the admin API and the command line: find, show, act in bulk."""
