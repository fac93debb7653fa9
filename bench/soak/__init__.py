"""Long runs under faults: kill -9, random edits, starvation, hostile files."""
