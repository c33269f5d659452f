"""Heavy jobs outside the server's threads: the worker pool and the dashboard's job functions."""
