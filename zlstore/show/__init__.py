"""What the stored results say: the judging queries, the IR diffs and the reports."""
