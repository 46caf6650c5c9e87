"""Process and thread plumbing: drafters in child processes, thread priority, one owner of threads and processes."""
