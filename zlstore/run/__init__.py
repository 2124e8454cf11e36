"""Running screens and campaigns: cells written and recorded as they end; the commands that start them (commands.py)."""
