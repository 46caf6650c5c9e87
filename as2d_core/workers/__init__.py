"""Process and thread plumbing: drafters in child processes, thread priority, joining drafter threads at exit."""
